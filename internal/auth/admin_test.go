package auth_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/onceplan"
)

func TestEnsureAdmin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created, generated, err := auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "", "")
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, generated, auth.GeneratedPasswordLength)

	u, err := auth.GetUserByEmail(b.ctx, b.pool, auth.DefaultAdminEmail)
	require.NoError(t, err)
	require.Equal(t, []auth.Role{auth.RoleAdmin}, u.Roles)
	_, _, err = auth.Login(b.ctx, b.pool, auth.DefaultAdminEmail, generated, auth.LoginMeta{})
	require.NoError(t, err, "the generated password signs in")
	requireNotStored(t, b, "app_user", generated)

	created, generated, err = auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "", "")
	require.NoError(t, err)
	require.False(t, created)
	require.Empty(t, generated)
	users, err := auth.ListUsers(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, users, 1)

	// The administration trail has the creation, once, by the process
	// that made it.
	events, err := auth.RecentEvents(b.ctx, b.pool, 10)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, auth.EventUserAdd, events[0].Action)
	require.Equal(t, auth.DefaultAdminEmail, events[0].Subject)
	require.Equal(t, "command line (ops@host)", events[0].Who())
	require.JSONEq(t, `{"roles": ["admin"], "first_admin": true}`, events[0].Detail)
}

func TestEnsureAdminGiven(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "root@example.com", "short")
	require.ErrorIs(t, err, onceplan.ErrInvalid)

	created, generated, err := auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "Root@Example.com", goodPassword)
	require.NoError(t, err)
	require.True(t, created)
	require.Empty(t, generated, "a given password is not echoed back")
	_, _, err = auth.Login(b.ctx, b.pool, "root@example.com", goodPassword, auth.LoginMeta{})
	require.NoError(t, err)
}

func TestEnsureAdminSkipsWhenAnAdminExists(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.user(t, userOpts{Roles: []auth.Role{auth.RoleAdmin, auth.RoleViewer}})
	created, _, err := auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "", "")
	require.NoError(t, err)
	require.False(t, created)
}

func TestEnsureAdminConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		creates int
		errs    []error
	)
	for range 4 {
		wg.Go(func() {
			created, _, err := auth.EnsureAdmin(b.ctx, b.pool, "ops@host", "", "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if created {
				creates++
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the concurrent admin creations to end")
	require.Empty(t, errs)
	require.Equal(t, 1, creates)
}
