package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
)

// TestChangeOwnPassword: a signed-in user changes their own password on
// /account/password: a wrong current password or two different typings
// are refused beside their fields and change nothing; the change signs
// them out everywhere else, keeps this browser signed in (a new session
// cookie), and the next sign-in takes only the new password.
func TestChangeOwnPassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := b.as["proposer"]
	other, _, err := auth.Login(ctx, b.pool, "proposer@example.com", testPassword, auth.LoginMeta{})
	require.NoError(t, err)

	d := parse(t, p.get("/campaigns"))
	require.Equal(t, "/account/password", tid(d, "nav-password").AttrOr("href", ""))
	require.Equal(t, 1, tid(parse(t, p.get("/account/password")), "password-form").Length())

	const newPassword = "a much longer new passphrase"
	for field, form := range map[string]url.Values{
		"current_password": {"current_password": {"not my password"}, "password": {newPassword}, "password_confirm": {newPassword}},
		"password_confirm": {"current_password": {testPassword}, "password": {newPassword}, "password_confirm": {newPassword + "!"}},
		"password":         {"current_password": {testPassword}, "password": {"short"}, "password_confirm": {"short"}},
	} {
		rec := p.post("/account/password", form)
		require.Equal(t, http.StatusUnprocessableEntity, rec.Code, field)
		require.Equal(t, 1, tid(parse(t, rec), "error-"+field).Length(), field)
	}
	_, _, err = auth.SessionActor(ctx, b.pool, other)
	require.NoError(t, err, "a refused change ends no session")

	rec := p.post("/account/password", url.Values{"current_password": {testPassword}, "password": {newPassword}, "password_confirm": {newPassword}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/account/password?flash=password-changed", rec.Header().Get("Location"))
	var session string
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == sessionCookie {
			session = ck.Value
		}
	}
	require.NotEmpty(t, session, "this browser gets the new session")
	_, _, err = auth.SessionActor(ctx, b.pool, other)
	require.Error(t, err, "signed out everywhere else")
	require.Equal(t, http.StatusSeeOther, p.get("/campaigns").Code, "the old cookie is over")
	p.token, p.csrf = session, csrfFromSession(session)
	d = parse(t, p.get("/account/password?flash=password-changed"))
	require.Contains(t, tid(d, "flash").Text(), "Your password is changed")

	_, _, err = auth.Login(ctx, b.pool, "proposer@example.com", testPassword, auth.LoginMeta{})
	require.ErrorIs(t, err, auth.ErrBadCredentials)
	_, _, err = auth.Login(ctx, b.pool, "proposer@example.com", newPassword, auth.LoginMeta{})
	require.NoError(t, err)

	// The admin trail says who changed it: the user.
	d = parse(t, b.as["admin"].get("/admin"))
	ev := d.Find(`[data-testid="admin-event"][data-action="user_password"]`)
	require.Equal(t, 1, ev.Length())
	require.Contains(t, ev.Text(), "proposer@example.com")
}
