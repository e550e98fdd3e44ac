package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UserOpts describe a user a test needs.
type UserOpts struct {
	Email string   // default: a unique address
	Roles []string // default: none
}

// User inserts a user and returns its id.
func User(t testing.TB, pool *pgxpool.Pool, opts UserOpts) int64 {
	t.Helper()
	if opts.Email == "" {
		var b [4]byte
		rand.Read(b[:])
		opts.Email = "user-" + hex.EncodeToString(b[:]) + "@example.com"
	}
	if opts.Roles == nil {
		opts.Roles = []string{}
	}
	var id int64
	if err := pool.QueryRow(context.Background(), `INSERT INTO app_user (email, roles) VALUES ($1, $2) RETURNING id`,
		opts.Email, opts.Roles).Scan(&id); err != nil {
		t.Fatalf("pgtest: creating user %s: %v", opts.Email, err)
	}
	return id
}
