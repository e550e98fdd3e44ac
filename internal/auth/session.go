package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// Session lifetimes. The web layer gives the cookie SessionMaxAge.
const (
	SessionIdleTimeout = 12 * time.Hour
	SessionMaxAge      = 7 * 24 * time.Hour
	// touchEvery bounds how often use of a session or token is written
	// back (last_seen_at, last_used_at): once a minute is precise enough
	// for the idle timeout and spares a write per request.
	touchEvery = time.Minute
)

// LoginMeta describes where a sign-in comes from. IP is used for
// throttling (see [FailuresBeforeDelay]) and kept on the session with
// UserAgent for the user to see; an empty IP (a sign-in not over HTTP) is
// throttled per account only.
type LoginMeta struct {
	IP        string
	UserAgent string
}

// newSecret returns 32 random bytes in unpadded base64url (43 characters).
func newSecret() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func secretHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// sessionTokenLength is the length of a session token: 32 bytes in
// unpadded base64url.
const sessionTokenLength = 43

// Login checks email and password and, when they match an enabled user,
// starts a session and returns its token (for the session cookie) and the
// user. Only the token's SHA-256 is stored.
//
// An unknown email and a wrong password both give ErrBadCredentials after
// the same argon2id work; the right password for a disabled user gives
// ErrDisabled. Every attempt is recorded in login_attempt under the
// account and the client address; when too many recent ones failed (see
// [FailuresBeforeDelay]), Login refuses with a *ThrottledError before
// looking at the password.
func Login(ctx context.Context, db onceplan.DB, email, password string, meta LoginMeta) (string, User, error) {
	key, emailErr := normalizeEmail(email)
	if emailErr != nil {
		// Still count (and throttle) it, under the text as typed.
		key = strings.ToLower(strings.TrimSpace(email))
	}
	key = truncate(key, 320)
	meta.IP = truncate(meta.IP, 64)
	meta.UserAgent = truncate(meta.UserAgent, 512)
	client := clientKey(meta.IP)

	var (
		token   string
		user    User
		refusal error
		held    *ThrottledError // the address's hold, the password checked all the same
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := lockAttempts(ctx, tx, key, client); err != nil {
			return err
		}
		if err := throttled(ctx, tx, key, client); err != nil {
			switch {
			case errors.As(err, &held) && held.passwordChecked:
				// The address is held, but not this account: the
				// owner behind a shared address still gets in.
			case errors.Is(err, ErrThrottled):
				// Not recorded: refused attempts do not extend the wait.
				refusal = err
				return nil
			default:
				return err
			}
		}

		var hash *string
		err := tx.QueryRow(ctx, `SELECT `+userCols+`, password_hash FROM app_user WHERE email = $1`, key).
			Scan(&user.ID, &user.Email, &user.Name, new([]string), &user.CreatedAt, &user.DisabledAt, &hash)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		ok := false
		if hash != nil && emailErr == nil {
			ok, err = VerifyPassword(*hash, password)
			if err != nil {
				return err
			}
		} else {
			// Same work as a real check, so timing does not say whether
			// the account exists.
			VerifyPassword(dummyHash(), password)
		}
		if ok && user.Disabled() {
			ok, refusal = false, ErrDisabled
		}
		if _, err := tx.Exec(ctx, `INSERT INTO login_attempt (email, ip, ok) VALUES ($1, $2, $3)`, key, client, ok); err != nil {
			return err
		}
		if !ok {
			switch {
			case refusal != nil:
			case held != nil:
				// Counted (the insert above), so that this account is
				// held from here on: one guess per account while the
				// address is held, never a free run.
				refusal = held
			default:
				refusal = ErrBadCredentials
			}
			return nil
		}
		if NeedsRehash(*hash) {
			newHash, err := HashPassword(password)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE app_user SET password_hash = $2 WHERE id = $1`, user.ID, newHash); err != nil {
				return err
			}
		}
		if user, err = GetUser(ctx, tx, user.ID); err != nil {
			return err
		}
		token, err = startSession(ctx, tx, user.ID, meta)
		return err
	})
	if err != nil {
		return "", User{}, err
	}
	if refusal != nil {
		return "", User{}, refusal
	}
	return token, user, nil
}

// startSession starts a session of user userID and returns its token (for
// the session cookie); only the token's SHA-256 is stored.
func startSession(ctx context.Context, tx pgx.Tx, userID int64, meta LoginMeta) (string, error) {
	token := newSecret()
	_, err := tx.Exec(ctx, `
		INSERT INTO session (id, user_id, expires_at, user_agent, ip)
		VALUES ($1, $2, now() + make_interval(secs => $3), $4, $5)`,
		secretHash(token), userID, SessionMaxAge.Seconds(), meta.UserAgent, meta.IP)
	return token, err
}

// truncate cuts s to at most n bytes, dropping a rune cut in half.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// SessionActor resolves a session token to its user, acting in person. An
// unknown token, an ended session (idle or too old) or a disabled user is
// onceplan.ErrUnauthenticated. Use refreshes last_seen_at at most once a minute.
func SessionActor(ctx context.Context, db onceplan.DB, token string) (Actor, User, error) {
	if len(token) != sessionTokenLength {
		return Actor{}, User{}, onceplan.Errorf(onceplan.ErrUnauthenticated, "the session is not valid: sign in again")
	}
	id := secretHash(token)
	var (
		u     User
		roles []string
		touch bool
	)
	err := db.QueryRow(ctx, `
		SELECT u.id, u.email, u.name, u.roles, u.created_at, u.disabled_at,
		       s.last_seen_at < now() - make_interval(secs => $3)
		FROM session s JOIN app_user u ON u.id = s.user_id
		WHERE s.id = $1 AND s.expires_at > now() AND s.last_seen_at > now() - make_interval(secs => $2)
		  AND u.disabled_at IS NULL`,
		id, SessionIdleTimeout.Seconds(), touchEvery.Seconds()).
		Scan(&u.ID, &u.Email, &u.Name, &roles, &u.CreatedAt, &u.DisabledAt, &touch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Actor{}, User{}, onceplan.Errorf(onceplan.ErrUnauthenticated, "the session has ended or is not valid: sign in again")
	}
	if err != nil {
		return Actor{}, User{}, err
	}
	for _, r := range roles {
		u.Roles = append(u.Roles, Role(r))
	}
	if touch {
		if _, err := db.Exec(ctx, `UPDATE session SET last_seen_at = now() WHERE id = $1`, id); err != nil {
			return Actor{}, User{}, err
		}
	}
	return u.Actor(), u, nil
}

// Logout ends the session with token. An unknown token is not an error:
// the session is over either way.
func Logout(ctx context.Context, db onceplan.DB, token string) error {
	_, err := db.Exec(ctx, `DELETE FROM session WHERE id = $1`, secretHash(token))
	return err
}

// Prune deletes ended sessions and sign-in attempts too old to count
// towards throttling (a day); run it now and then. It returns how many
// rows went.
func Prune(ctx context.Context, db onceplan.DB) (int64, error) {
	a, err := db.Exec(ctx, `
		DELETE FROM session
		WHERE expires_at <= now() OR last_seen_at <= now() - make_interval(secs => $1)`,
		SessionIdleTimeout.Seconds())
	if err != nil {
		return 0, err
	}
	b, err := db.Exec(ctx, `DELETE FROM login_attempt WHERE at < now() - make_interval(secs => $1)`, throttleMemory.Seconds())
	if err != nil {
		return 0, err
	}
	return a.RowsAffected() + b.RowsAffected(), nil
}
