package auth_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// requireNotStored fails if secret appears in any column of any row of
// table.
func requireNotStored(t *testing.T, b *bundle, table, secret string) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT row_to_json(t)::text FROM `+table+` t`)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var row string
		require.NoError(t, rows.Scan(&row))
		require.NotContains(t, row, secret)
		require.NotContains(t, row, secret[len(secret)-20:], "no part of the secret beyond the display prefix")
		n++
	}
	require.NoError(t, rows.Err())
	require.Positive(t, n)
}

func TestCreateToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{Email: "ann@example.com", Roles: []auth.Role{auth.RoleProposer, auth.RoleApprover}})

	secret, tok, err := auth.CreateToken(b.ctx, b.pool, "Ann@example.com", " ci deploy ", false)
	require.NoError(t, err)
	require.Regexp(t, `^op_[A-Za-z0-9_-]{43}$`, secret)
	require.Equal(t, secret[:8], tok.Prefix)
	require.Equal(t, "ci deploy", tok.Name)
	require.Equal(t, u.ID, tok.UserID)
	require.Equal(t, "ann@example.com", tok.UserEmail)
	require.False(t, tok.Agent)
	require.Nil(t, tok.LastUsedAt)
	requireNotStored(t, b, "api_token", secret)

	var stored bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT token_hash = sha256(convert_to($1, 'UTF8')) FROM api_token WHERE id = $2`, secret, tok.ID).Scan(&stored))
	require.True(t, stored, "the token's SHA-256 is what is kept")

	actor, used, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.Equal(t, auth.Actor{UserID: u.ID, Email: "ann@example.com", Roles: u.Roles}, actor)
	require.NoError(t, auth.Authorize(actor, auth.ActionApprove), "a personal token acts as its user")
	require.NotNil(t, used.LastUsedAt)
	require.WithinDuration(t, time.Now(), *used.LastUsedAt, time.Minute)

	list, err := auth.ListTokens(b.ctx, b.pool, "ann@example.com")
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, used.LastUsedAt, list[0].LastUsedAt, "last_used_at is stored")
}

func TestCreateTokenValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	_, _, err := auth.CreateToken(b.ctx, b.pool, u.Email, "  ", false)
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	_, _, err = auth.CreateToken(b.ctx, b.pool, "nobody@example.com", "x", false)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = auth.DisableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	_, _, err = auth.CreateToken(b.ctx, b.pool, u.Email, "x", false)
	require.ErrorIs(t, err, onceplan.ErrConflict)
}

func TestAgentToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{Roles: []auth.Role{auth.RoleAdmin}})

	secret, tok, err := auth.CreateToken(b.ctx, b.pool, u.Email, "claude", true)
	require.NoError(t, err)
	require.Regexp(t, `^opa_[A-Za-z0-9_-]{43}$`, secret)
	require.True(t, tok.Agent)
	requireNotStored(t, b, "api_token", secret)

	actor, _, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.True(t, actor.Agent)
	require.Equal(t, []auth.Role{auth.RoleAdmin}, actor.Roles, "the user's roles")
	require.Equal(t, "agent:"+u.Email, actor.String())
	require.NoError(t, auth.Authorize(actor, auth.ActionCreate))
	for _, decision := range []auth.Action{auth.ActionApprove, auth.ActionReject, auth.ActionStart, auth.ActionResolve} {
		require.ErrorIs(t, auth.Authorize(actor, decision), onceplan.ErrForbidden, decision)
	}

	// The kind comes from the row, not from the text: an agent secret
	// relabelled as personal is just an unknown token.
	_, _, err = auth.TokenActor(b.ctx, b.pool, "op_"+secret[len("opa_"):])
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)
}

func TestTokenActorRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{Roles: []auth.Role{auth.RoleViewer}})
	secret, _, err := auth.CreateToken(b.ctx, b.pool, u.Email, "script", false)
	require.NoError(t, err)
	_, err = auth.SetRoles(b.ctx, b.pool, u.Email, []auth.Role{auth.RoleOperator})
	require.NoError(t, err)
	actor, _, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.Equal(t, []auth.Role{auth.RoleOperator}, actor.Roles, "roles are the user's current ones")

	_, err = auth.DisableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	_, _, err = auth.TokenActor(b.ctx, b.pool, secret)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated, "a disabled user's tokens stop working")
	_, err = auth.EnableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	_, _, err = auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
}

func TestRevokeToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	byID, t1, err := auth.CreateToken(b.ctx, b.pool, u.Email, "one", false)
	require.NoError(t, err)
	byPrefix, t2, err := auth.CreateToken(b.ctx, b.pool, u.Email, "two", true)
	require.NoError(t, err)

	r, err := auth.RevokeToken(b.ctx, b.pool, t1.ID)
	require.NoError(t, err)
	require.True(t, r.Revoked())
	again, err := auth.RevokeToken(b.ctx, b.pool, t1.ID)
	require.NoError(t, err)
	require.Equal(t, r.RevokedAt, again.RevokedAt, "revoking twice keeps the first time")
	_, _, err = auth.TokenActor(b.ctx, b.pool, byID)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)

	_, _, err = auth.TokenActor(b.ctx, b.pool, byPrefix)
	require.NoError(t, err)
	r, err = auth.RevokeTokenByPrefix(b.ctx, b.pool, t2.Prefix)
	require.NoError(t, err)
	require.Equal(t, t2.ID, r.ID)
	_, _, err = auth.TokenActor(b.ctx, b.pool, byPrefix)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)

	_, err = auth.RevokeToken(b.ctx, b.pool, 424242)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = auth.RevokeTokenByPrefix(b.ctx, b.pool, "op_zzzzz")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = auth.RevokeTokenByPrefix(b.ctx, b.pool, "op_")
	require.ErrorIs(t, err, onceplan.ErrInvalid)

	// A prefix two tokens share is refused rather than guessed.
	_, err = b.pool.Exec(b.ctx, `UPDATE api_token SET prefix = 'op_same0'`)
	require.NoError(t, err)
	_, err = auth.RevokeTokenByPrefix(b.ctx, b.pool, "op_same0")
	require.ErrorIs(t, err, onceplan.ErrConflict)

	list, err := auth.ListTokens(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	require.Len(t, list, 2, "revoked tokens are listed")
	require.True(t, list[0].Revoked())
	require.True(t, list[1].Revoked())
}

func TestTokenActorRefusesGarbage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, s := range []string{"", "op_", "Bearer op_x", "opa_short", "op_" + string(make([]byte, 43))} {
		_, _, err := auth.TokenActor(b.ctx, b.pool, s)
		require.ErrorIs(t, err, onceplan.ErrUnauthenticated, "%q", s)
	}
}

func TestTokenLastUsedAtMostOnceAMinute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	secret, tok, err := auth.CreateToken(b.ctx, b.pool, u.Email, "poller", false)
	require.NoError(t, err)

	_, first, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	_, second, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.Equal(t, first.LastUsedAt, second.LastUsedAt, "not written again within the minute")

	_, err = b.pool.Exec(b.ctx, `UPDATE api_token SET last_used_at = now() - interval '2 minutes' WHERE id = $1`, tok.ID)
	require.NoError(t, err)
	_, third, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.True(t, third.LastUsedAt.After(*first.LastUsedAt))
}
