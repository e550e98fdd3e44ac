package auth_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const goodPassword = "correct horse battery staple"

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: context.Background(), pool: pgtest.Pool(t)}
}

// userOpts describe a user a test needs; zero fields get defaults.
type userOpts struct {
	Email    string      // default: a unique address
	Roles    []auth.Role // default: proposer
	Password string      // default: goodPassword
}

func (b *bundle) user(t *testing.T, opts userOpts) auth.User {
	t.Helper()
	if opts.Email == "" {
		var r [4]byte
		rand.Read(r[:])
		opts.Email = "user-" + hex.EncodeToString(r[:]) + "@example.com"
	}
	if opts.Roles == nil {
		opts.Roles = []auth.Role{auth.RoleProposer}
	}
	if opts.Password == "" {
		opts.Password = goodPassword
	}
	u, err := auth.CreateUser(b.ctx, b.pool, auth.NewUser{Email: opts.Email, Roles: opts.Roles, Password: opts.Password})
	require.NoError(t, err)
	return u
}
