package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgcluster"
	"github.com/onceplan/onceplan/migrations"
)

// TestOpenDBEmbeddedRoles: on the embedded default, OpenDB sets up the two
// roles by itself, also on a data dir made before they existed (schema
// owned by the superuser, migrated up to 0007): it hands the schema to the
// owner, migrates as the owner, and connects as the application role,
// which PostgreSQL then stops from changing the schema or the ledger.
func TestOpenDBEmbeddedRoles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dataDir, err := os.MkdirTemp("", "onceplan-app-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dataDir, 0o755)) // the postgres account enters it when we are root
	t.Cleanup(func() { os.RemoveAll(dataDir) })

	// A cluster as an earlier onceplan left it: everything the superuser's.
	c, err := pgcluster.Open(ctx, pgcluster.Options{Dir: filepath.Join(dataDir, "pg"), Settings: map[string]string{"fsync": "off"}})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Close(context.Background())
		}
	})
	old, err := pgxpool.New(ctx, c.URL(""))
	require.NoError(t, err)
	_, err = migrations.Up(ctx, old)
	require.NoError(t, err)
	_, err = migrations.DownTo(ctx, old, 7)
	require.NoError(t, err)
	_, err = old.Exec(ctx, `INSERT INTO app_user (email) VALUES ('kept@example.com')`)
	require.NoError(t, err)
	old.Close()
	require.NoError(t, c.Close(ctx))
	stopped = true

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	open := func() *DB {
		d, err := OpenDB(ctx, DBOptions{DataDir: dataDir, Migrate: true, Logger: logger})
		require.NoError(t, err)
		t.Cleanup(func() {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = d.Close(closeCtx)
		})
		return d
	}
	d := open()
	require.Contains(t, logs.String(), "handed the database's objects to its owner role")
	// From version 7: 0008 (the roles) and whatever came after it.
	require.Regexp(t, `onceplan_versions="?\[8( [0-9]+)*\]`, logs.String())

	var role string
	var version int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT current_user, (SELECT max(version) FROM onceplan_migration)`).Scan(&role, &version))
	require.Equal(t, migrations.AppRole, role)
	require.Equal(t, migrations.Latest(), version)

	var strays []string
	require.NoError(t, d.Pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(relname::text ORDER BY relname), '{}') FROM pg_class
		WHERE relnamespace = 'public'::regnamespace AND relowner <> $1::regrole`, migrations.OwnerRole).Scan(&strays))
	require.Empty(t, strays, "objects not owned by %s", migrations.OwnerRole)
	var dbOwner string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()`).Scan(&dbOwner))
	require.Equal(t, migrations.OwnerRole, dbOwner)

	// The normal work goes on; the data made before is there.
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM app_user WHERE email = 'kept@example.com'`).Scan(&n))
	require.Equal(t, 1, n)
	_, err = d.Pool.Exec(ctx, `INSERT INTO app_user (email) VALUES ('new@example.com')`)
	require.NoError(t, err)

	for _, sql := range []string{
		`DELETE FROM effect`,
		`ALTER TABLE effect DISABLE TRIGGER effect_no_delete`,
		`DROP TABLE plan`,
		`UPDATE plan SET subject = 'changed'`,
		`CREATE TABLE sneaky (a int)`,
		`CREATE TEMP TABLE sneaky (a int)`,
		`SET ROLE ` + migrations.OwnerRole,
	} {
		_, err := d.Pool.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		require.Truef(t, errors.As(err, &pgErr), "%s: %v", sql, err)
		require.Equalf(t, "42501", pgErr.Code, "%s: %s", sql, pgErr.Message)
	}
	require.NoError(t, d.Close(ctx))

	// Opening again changes nothing and needs nothing handed over.
	logs.Reset()
	d = open()
	require.NotContains(t, logs.String(), "handed")
	require.NotContains(t, logs.String(), "created database role")
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT current_user`).Scan(&role))
	require.Equal(t, migrations.AppRole, role)
}

// TestOpenDBWarnsWhenPrivileged: a process given the URL of a superuser or
// of the schema's owner says that the privilege wall is down.
func TestOpenDBWarnsWhenPrivileged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dataDir, err := os.MkdirTemp("", "onceplan-app-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dataDir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	embedded, err := OpenDB(ctx, DBOptions{DataDir: dataDir, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = embedded.Close(context.Background()) })

	for _, tc := range []struct {
		url  string
		warn bool
	}{
		{embedded.cluster.URL(""), true},
		{embedded.cluster.OwnerURL(""), true},
		{embedded.cluster.AppURL(""), false},
	} {
		var logs bytes.Buffer
		d, err := OpenDB(ctx, DBOptions{URL: tc.url, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		require.NoError(t, d.Close(ctx))
		if tc.warn {
			require.Contains(t, logs.String(), "level=WARN", tc.url)
			require.Contains(t, logs.String(), "connect as "+migrations.AppRole)
		} else {
			require.Empty(t, logs.String(), tc.url)
		}
	}
}
