package auth

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// API token format: a type prefix, then 32 random bytes in unpadded
// base64url (43 characters):
//
//	op_<43 chars>   a personal token: acts as its user
//	opa_<43 chars>  an agent token: acts for its user with Agent set, so it
//	                may propose and read but never decide
//
// The type prefix lets a person, a log scrubber or a secret scanner tell an
// Onceplan token (and its kind) at a glance; the server never trusts it —
// whether a token is an agent's comes from its row. Only the SHA-256 of
// the whole token is stored, with its first TokenPrefixLength characters
// for display ("op_Xa9Kq") and for revoking by prefix.
const (
	PersonalTokenPrefix = "op_"
	AgentTokenPrefix    = "opa_"
	TokenPrefixLength   = 8
	// MaxTokenNameLength bounds a token's name, in characters.
	MaxTokenNameLength = 100
)

// Token describes an API token; the secret itself is shown once, by
// CreateToken, and never stored.
type Token struct {
	ID         int64      `json:"id"`
	UserID     int64      `json:"user_id"`
	UserEmail  string     `json:"user_email"`
	Name       string     `json:"name"`
	Agent      bool       `json:"agent"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Revoked reports whether the token no longer works.
func (t Token) Revoked() bool { return t.RevokedAt != nil }

const tokenCols = `t.id, t.user_id, u.email, t.name, t.agent, t.prefix, t.created_at, t.last_used_at, t.revoked_at`

func scanToken(row pgx.Row) (Token, error) {
	var t Token
	err := row.Scan(&t.ID, &t.UserID, &t.UserEmail, &t.Name, &t.Agent, &t.Prefix, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
	return t, err
}

func tokenNotFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return onceplan.Errorf(onceplan.ErrNotFound, "there is no API token %s", what)
	}
	return err
}

// CreateToken makes an API token for the user with userEmail and returns
// its secret, which is not kept anywhere and cannot be shown again. An
// agent token acts with the user's roles but may never decide (see
// Authorize).
func CreateToken(ctx context.Context, db onceplan.DB, userEmail, name string, agent bool) (string, Token, error) {
	name = strings.TrimSpace(name)
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxTokenNameLength {
		return "", Token{}, fieldErr("name", "a token needs a name of 1 to %d characters saying what uses it", MaxTokenNameLength)
	}
	u, err := GetUserByEmail(ctx, db, userEmail)
	if err != nil {
		return "", Token{}, err
	}
	if u.Disabled() {
		return "", Token{}, onceplan.Errorf(onceplan.ErrConflict, "user %s is disabled: enable it before making it a token", u.Email)
	}
	secret := PersonalTokenPrefix + newSecret()
	if agent {
		secret = AgentTokenPrefix + newSecret()
	}
	t, err := scanToken(db.QueryRow(ctx, `
		WITH t AS (
			INSERT INTO api_token (user_id, name, agent, token_hash, prefix) VALUES ($1, $2, $3, $4, $5)
			RETURNING *
		)
		SELECT `+tokenCols+` FROM t JOIN app_user u ON u.id = t.user_id`,
		u.ID, name, agent, secretHash(secret), secret[:TokenPrefixLength]))
	if err != nil {
		return "", Token{}, err
	}
	return secret, t, nil
}

// looksLikeToken checks the shape before touching the database.
func looksLikeToken(secret string) bool {
	switch {
	case strings.HasPrefix(secret, AgentTokenPrefix):
		return len(secret) == len(AgentTokenPrefix)+sessionTokenLength
	case strings.HasPrefix(secret, PersonalTokenPrefix):
		return len(secret) == len(PersonalTokenPrefix)+sessionTokenLength
	}
	return false
}

// TokenActor resolves a bearer token to the actor it acts as: its user,
// with the user's current roles, and Agent set for an agent token. An
// unknown or revoked token, or one whose user is disabled, is
// onceplan.ErrUnauthenticated. Use sets last_used_at, at most once a minute.
func TokenActor(ctx context.Context, db onceplan.DB, secret string) (Actor, Token, error) {
	if !looksLikeToken(secret) {
		return Actor{}, Token{}, onceplan.Errorf(onceplan.ErrUnauthenticated, "the API token is not valid")
	}
	var (
		t     Token
		roles []string
		touch bool
	)
	err := db.QueryRow(ctx, `
		SELECT `+tokenCols+`, u.roles,
		       t.last_used_at IS NULL OR t.last_used_at < now() - make_interval(secs => $2)
		FROM api_token t JOIN app_user u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.disabled_at IS NULL`,
		secretHash(secret), touchEvery.Seconds()).
		Scan(&t.ID, &t.UserID, &t.UserEmail, &t.Name, &t.Agent, &t.Prefix, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt,
			&roles, &touch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Actor{}, Token{}, onceplan.Errorf(onceplan.ErrUnauthenticated, "the API token is not valid, was revoked, or its user is disabled")
	}
	if err != nil {
		return Actor{}, Token{}, err
	}
	if touch {
		if err := db.QueryRow(ctx, `UPDATE api_token SET last_used_at = now() WHERE id = $1 RETURNING last_used_at`, t.ID).
			Scan(&t.LastUsedAt); err != nil {
			return Actor{}, Token{}, err
		}
	}
	a := Actor{UserID: t.UserID, Email: t.UserEmail, Agent: t.Agent}
	for _, r := range roles {
		a.Roles = append(a.Roles, Role(r))
	}
	return a, t, nil
}

// RevokeToken stops the token with id working, for good. Revoking a
// revoked token changes nothing.
func RevokeToken(ctx context.Context, db onceplan.DB, id int64) (Token, error) {
	t, err := scanToken(db.QueryRow(ctx, `
		WITH t AS (
			UPDATE api_token SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING *
		)
		SELECT `+tokenCols+` FROM t JOIN app_user u ON u.id = t.user_id`, id))
	return t, tokenNotFound(err, "with that id")
}

// RevokeTokenByPrefix revokes the token whose secret starts with prefix
// (its first TokenPrefixLength characters, as listed). A prefix shared by
// several tokens is an onceplan.ErrConflict: revoke by id.
func RevokeTokenByPrefix(ctx context.Context, db onceplan.DB, prefix string) (Token, error) {
	prefix = strings.TrimSpace(prefix)
	if len(prefix) != TokenPrefixLength {
		return Token{}, fieldErr("prefix", "must be the token's first %d characters, as `token list` shows them", TokenPrefixLength)
	}
	rows, err := db.Query(ctx, `SELECT id FROM api_token WHERE prefix = $1`, prefix)
	if err != nil {
		return Token{}, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return Token{}, err
	}
	switch len(ids) {
	case 0:
		return Token{}, onceplan.Errorf(onceplan.ErrNotFound, "there is no API token with the prefix %s", prefix)
	case 1:
		return RevokeToken(ctx, db, ids[0])
	default:
		return Token{}, onceplan.Errorf(onceplan.ErrConflict, "%d API tokens start with %s: revoke by id instead", len(ids), prefix)
	}
}

// ListTokens returns the tokens of the user with userEmail, revoked ones
// included, oldest first.
func ListTokens(ctx context.Context, db onceplan.DB, userEmail string) ([]Token, error) {
	u, err := GetUserByEmail(ctx, db, userEmail)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `
		SELECT `+tokenCols+` FROM api_token t JOIN app_user u ON u.id = t.user_id
		WHERE t.user_id = $1 ORDER BY t.id`, u.ID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) { return scanToken(row) })
}
