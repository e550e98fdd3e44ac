package auth_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

func TestCreateUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := auth.CreateUser(b.ctx, b.pool, auth.NewUser{
		Email:    "  Ann.Lee@EXAMPLE.com ",
		Name:     " Ann Lee ",
		Roles:    []auth.Role{auth.RoleApprover, auth.RoleProposer, auth.RoleApprover},
		Password: goodPassword,
	})
	require.NoError(t, err)
	require.Equal(t, "ann.lee@example.com", u.Email)
	require.Equal(t, "Ann Lee", u.Name)
	require.Equal(t, []auth.Role{auth.RoleProposer, auth.RoleApprover}, u.Roles, "deduplicated, in auth.Roles order")
	require.False(t, u.Disabled())

	var hash string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT password_hash FROM app_user WHERE id = $1`, u.ID).Scan(&hash))
	require.Regexp(t, `^\$argon2id\$v=19\$m=19456,t=2,p=1\$`, hash)
	require.NotContains(t, hash, goodPassword)

	got, err := auth.GetUserByEmail(b.ctx, b.pool, "ANN.LEE@example.com")
	require.NoError(t, err)
	require.Equal(t, u, got)
	got, err = auth.GetUser(b.ctx, b.pool, u.ID)
	require.NoError(t, err)
	require.Equal(t, u, got)

	_, err = auth.CreateUser(b.ctx, b.pool, auth.NewUser{Email: "ann.lee@example.com", Roles: []auth.Role{auth.RoleViewer}, Password: goodPassword})
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Equal(t, "a user with the email ann.lee@example.com already exists", err.Error())
}

func TestCreateUserValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name  string
		n     auth.NewUser
		field string
		msg   string
	}{
		{"short password", auth.NewUser{Email: "a@example.com", Roles: []auth.Role{"viewer"}, Password: "short"},
			"password", "password: must be at least 12 characters (it has 5)"},
		{"no password", auth.NewUser{Email: "a@example.com", Roles: []auth.Role{"viewer"}},
			"password", "password: must be at least 12 characters (it has 0)"},
		{"bad role", auth.NewUser{Email: "a@example.com", Roles: []auth.Role{"viewer", "boss"}, Password: goodPassword},
			"roles", `roles: "boss" is not a role (one of admin, proposer, approver, operator, viewer)`},
		{"no role", auth.NewUser{Email: "a@example.com", Password: goodPassword},
			"roles", "roles: name at least one role (admin, proposer, approver, operator, viewer)"},
		{"bad email", auth.NewUser{Email: "not-an-address", Roles: []auth.Role{"viewer"}, Password: goodPassword},
			"email", `email: address "not-an-address" has no "@"`},
	} {
		_, err := auth.CreateUser(b.ctx, b.pool, tc.n)
		require.Error(t, err, tc.name)
		require.True(t, errors.Is(err, onceplan.ErrInvalid), tc.name)
		var fe *onceplan.FieldError
		require.ErrorAs(t, err, &fe, tc.name)
		require.Equal(t, tc.field, fe.Field, tc.name)
		require.Equal(t, tc.msg, err.Error(), tc.name)
	}
	users, err := auth.ListUsers(b.ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, users)
}

func TestGetUserNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := auth.GetUserByEmail(b.ctx, b.pool, "nobody@example.com")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	require.Equal(t, "there is no user nobody@example.com", err.Error())
	_, err = auth.GetUser(b.ctx, b.pool, 424242)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

func TestListUsersAndSetRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.user(t, userOpts{Email: "zed@example.com"})
	b.user(t, userOpts{Email: "amy@example.com", Roles: []auth.Role{auth.RoleAdmin}})

	users, err := auth.ListUsers(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, users, 2)
	require.Equal(t, "amy@example.com", users[0].Email)
	require.Equal(t, "zed@example.com", users[1].Email)

	u, err := auth.SetRoles(b.ctx, b.pool, "Zed@example.com", []auth.Role{auth.RoleOperator, auth.RoleViewer})
	require.NoError(t, err)
	require.Equal(t, []auth.Role{auth.RoleOperator, auth.RoleViewer}, u.Roles)

	_, err = auth.SetRoles(b.ctx, b.pool, "zed@example.com", []auth.Role{"root"})
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	_, err = auth.SetRoles(b.ctx, b.pool, "nobody@example.com", []auth.Role{auth.RoleViewer})
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	// The last enabled admin keeps the role and cannot be disabled.
	_, err = auth.SetRoles(b.ctx, b.pool, "amy@example.com", []auth.Role{auth.RoleViewer})
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Contains(t, err.Error(), "last enabled admin")
	_, err = auth.DisableUser(b.ctx, b.pool, "amy@example.com")
	require.ErrorIs(t, err, onceplan.ErrConflict)

	// With a second admin, the first may step down.
	_, err = auth.SetRoles(b.ctx, b.pool, "zed@example.com", []auth.Role{auth.RoleAdmin})
	require.NoError(t, err)
	u, err = auth.SetRoles(b.ctx, b.pool, "amy@example.com", []auth.Role{auth.RoleViewer})
	require.NoError(t, err)
	require.Equal(t, []auth.Role{auth.RoleViewer}, u.Roles)
}

func TestDisableAndEnableUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	d, err := auth.DisableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	require.True(t, d.Disabled())
	again, err := auth.DisableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	require.Equal(t, d.DisabledAt, again.DisabledAt, "disabling twice keeps the first time")

	e, err := auth.EnableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	require.False(t, e.Disabled())
	_, err = auth.DisableUser(b.ctx, b.pool, "nobody@example.com")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

func TestSetPassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	token, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)

	err = auth.SetPassword(b.ctx, b.pool, u.Email, "short")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.NoError(t, auth.SetPassword(b.ctx, b.pool, u.Email, "a brand new passphrase"))

	_, _, err = auth.SessionActor(b.ctx, b.pool, token)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated, "a password change ends the sessions")
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.ErrorIs(t, err, auth.ErrBadCredentials)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, "a brand new passphrase", auth.LoginMeta{})
	require.NoError(t, err)

	require.ErrorIs(t, auth.SetPassword(b.ctx, b.pool, "nobody@example.com", goodPassword), onceplan.ErrNotFound)
}
