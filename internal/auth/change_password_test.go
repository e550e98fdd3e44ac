package auth_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// TestChangePassword: a user changes their own password only with the
// current one; every session they had ends, a new one starts for the
// browser that asked, the old password no longer signs in and the new one
// does, and the administration trail records it as done by the user.
func TestChangePassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{Email: "ann@example.com"})
	here, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "192.0.2.1"})
	require.NoError(t, err)
	elsewhere, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "198.51.100.7"})
	require.NoError(t, err)
	const newPassword = "a much longer new passphrase"
	change := func(current, next string) (auth.PasswordChange, error) {
		return auth.ChangePassword(b.ctx, b.pool, auth.ChangePasswordParams{UserID: u.ID, Current: current, New: next,
			Meta: auth.LoginMeta{IP: "192.0.2.1", UserAgent: "test"}})
	}

	// Refused, naming the field, and nothing changes.
	_, err = change("not my password", newPassword)
	var fe *onceplan.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "current_password", fe.Field)
	_, err = change(goodPassword, "short")
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "password", fe.Field)
	_, err = change(goodPassword, goodPassword)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "password", fe.Field)
	for _, tok := range []string{here, elsewhere} {
		_, _, err := auth.SessionActor(b.ctx, b.pool, tok)
		require.NoError(t, err, "a refused change ends no session")
	}
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "203.0.113.9"})
	require.NoError(t, err, "a refused change keeps the password")

	res, err := change(goodPassword, newPassword)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Ended)
	for _, tok := range []string{here, elsewhere} {
		_, _, err := auth.SessionActor(b.ctx, b.pool, tok)
		require.ErrorIs(t, err, onceplan.ErrUnauthenticated, "every earlier session ended")
	}
	a, _, err := auth.SessionActor(b.ctx, b.pool, res.Token)
	require.NoError(t, err, "the browser that asked stays signed in, on a new session")
	require.Equal(t, u.ID, a.UserID)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "203.0.113.9"})
	require.ErrorIs(t, err, auth.ErrBadCredentials)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, newPassword, auth.LoginMeta{IP: "203.0.113.9"})
	require.NoError(t, err)

	events, err := auth.RecentEvents(b.ctx, b.pool, 10)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, auth.EventUserPassword, events[0].Action)
	require.Equal(t, u.Email, events[0].Subject)
	require.Equal(t, u.Email, events[0].Who())
	require.JSONEq(t, `{"own": true, "sessions_ended": 3}`, events[0].Detail)
}

// TestChangePasswordIsThrottledAsASignIn: guessing the current password
// on the change form counts as failed sign-ins, and is held back as they
// are.
func TestChangePasswordIsThrottledAsASignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	for range auth.FailuresBeforeDelay {
		_, err := auth.ChangePassword(b.ctx, b.pool, auth.ChangePasswordParams{UserID: u.ID, Current: "a wrong guess!",
			New: "a much longer new passphrase", Meta: auth.LoginMeta{IP: "192.0.2.1"}})
		var fe *onceplan.FieldError
		require.ErrorAs(t, err, &fe)
	}
	_, err := auth.ChangePassword(b.ctx, b.pool, auth.ChangePasswordParams{UserID: u.ID, Current: goodPassword,
		New: "a much longer new passphrase", Meta: auth.LoginMeta{IP: "192.0.2.1"}})
	require.ErrorIs(t, err, auth.ErrThrottled, "held back even with the right password")
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "192.0.2.1"})
	require.ErrorIs(t, err, auth.ErrThrottled, "the sign-in from there is held back too")
}
