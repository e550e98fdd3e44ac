package app

import (
	"bytes"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/migrations"
)

// TestRoleDefaultsCannotBreakTheServer: the server's role may set its own
// defaults (docs/RELIABILITY.md, "The server's own role as the
// attacker"); here, as that role, it sets a 1 ms
// statement timeout, a 1 ms idle-in-transaction timeout, read-only
// transactions, a search_path without Onceplan's schema and synchronous
// commit off, for its database. A process opening the database as
// serve does still works: every setting it depends on is its own.
func TestRoleDefaultsCannotBreakTheServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)
	u, err := url.Parse(urls.App)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")

	// As the application role itself, in plain SQL: PostgreSQL lets any
	// role set its own defaults.
	app, err := pgx.Connect(ctx, urls.App)
	require.NoError(t, err)
	in := "ALTER ROLE " + migrations.AppRole + " IN DATABASE " + pgx.Identifier{dbName}.Sanitize() + " SET "
	for _, set := range []string{
		"statement_timeout = '1ms'",
		"idle_in_transaction_session_timeout = '1ms'",
		"default_transaction_read_only = on",
		"search_path = pg_catalog",
		"synchronous_commit = off",
	} {
		_, err := app.Exec(ctx, in+set)
		require.NoError(t, err, set)
	}
	require.NoError(t, app.Close(ctx))

	// A plain connection now breaks as the review found.
	plain, err := pgx.Connect(ctx, urls.App)
	require.NoError(t, err)
	_, err = plain.Exec(ctx, `SELECT pg_sleep(0.05)`)
	require.ErrorContains(t, err, "statement timeout")
	require.NoError(t, plain.Close(ctx))

	var logs bytes.Buffer
	d, err := OpenDB(ctx, DBOptions{URL: urls.App, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(ctx) })
	require.Contains(t, logs.String(), "defaults of its own", "the server says the role has defaults of its own")

	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		// Long enough for both 1 ms timeouts, between statements and within one.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
			return err
		}
		var schema, commit, idle string
		if err := tx.QueryRow(ctx, `SELECT current_schema(), current_setting('synchronous_commit'),
			current_setting('idle_in_transaction_session_timeout')`).Scan(&schema, &commit, &idle); err != nil {
			return err
		}
		require.Equal(t, "public", schema, "the schema Onceplan was migrated into")
		require.Equal(t, "on", commit)
		require.Equal(t, IdleInTransactionTimeout, idle, "bounded, not 0 and not 1 ms")
		// A write: not read-only, and the tables are found.
		_, err := tx.Exec(ctx, `INSERT INTO app_user (email) VALUES ('still-works@example.com')`)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, CheckSchema(ctx, d.Pool))
}
