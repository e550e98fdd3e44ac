package pgcluster

import (
	"errors"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestRolesValidate(t *testing.T) {
	t.Parallel()
	for _, r := range []Roles{
		{Owner: "", App: "app"},
		{Owner: "owner", App: "Bad-Name"},
		{Owner: superuser, App: "app"},
		{Owner: "owner", App: "public"},
		{Owner: "same", App: "same"},
	} {
		_, err := Open(t.Context(), Options{Dir: filepath.Join(t.TempDir(), "pg"), Roles: &r})
		var e *Error
		require.Truef(t, errors.As(err, &e), "%+v: %v", r, err)
		require.Contains(t, e.Msg, "pgcluster.Roles")
	}
}

// TestRolesHandOver: a cluster whose objects the superuser made gets the two
// roles on its next Open with Roles, and the owner gets the database and every
// kind of object in it; the application role can log in, owns nothing, and may
// neither make temporary tables nor act as the owner.
func TestRolesHandOver(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	c := open(t, dir)
	exec1(t, c, `
		CREATE SCHEMA extra;
		CREATE TYPE mood AS ENUM ('ok', 'not ok');
		CREATE TYPE pair AS (a int, b int);
		CREATE DOMAIN positive AS int CHECK (VALUE > 0);
		CREATE SEQUENCE loose;
		CREATE TABLE ident (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, m mood);
		CREATE TABLE serials (id bigserial PRIMARY KEY);
		CREATE TABLE extra.other (v positive);
		CREATE VIEW v AS SELECT id FROM ident;
		CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';
		CREATE PROCEDURE p() LANGUAGE sql AS 'SELECT 1';`)
	require.NoError(t, c.Close(t.Context()))

	opts := testOptions(dir)
	opts.Roles = &Roles{Owner: "test_owner", App: "test_app"}
	c = openWith(t, opts)
	require.Equal(t, "test_owner", queryString(t, c, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()`))
	require.Equal(t, "", queryString(t, c, `
		SELECT coalesce(string_agg(what, ', '), '') FROM (
		    SELECT 'schema ' || nspname AS what FROM pg_namespace WHERE nspname = 'extra' AND nspowner <> 'test_owner'::regrole
		    UNION ALL SELECT 'relation ' || relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		        WHERE n.nspname IN ('public', 'extra') AND relowner <> 'test_owner'::regrole
		    UNION ALL SELECT 'type ' || typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		        WHERE n.nspname IN ('public', 'extra') AND typowner <> 'test_owner'::regrole
		    UNION ALL SELECT 'routine ' || proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		        WHERE n.nspname IN ('public', 'extra') AND proowner <> 'test_owner'::regrole) x`),
		"objects the superuser still owns")

	owner, err := pgx.Connect(t.Context(), c.OwnerURL(""))
	require.NoError(t, err)
	defer owner.Close(t.Context())
	var cur, sess string
	require.NoError(t, owner.QueryRow(t.Context(), `SELECT current_user, session_user`).Scan(&cur, &sess))
	require.Equal(t, []string{"test_owner", superuser}, []string{cur, sess})

	app, err := pgx.Connect(t.Context(), c.AppURL(""))
	require.NoError(t, err)
	defer app.Close(t.Context())
	require.NoError(t, app.QueryRow(t.Context(), `SELECT current_user`).Scan(&cur))
	require.Equal(t, "test_app", cur)
	for _, sql := range []string{`CREATE TEMP TABLE t (a int)`, `SET ROLE test_owner`, `SELECT * FROM ident`, `DROP TABLE ident`} {
		_, err := app.Exec(t.Context(), sql)
		var pgErr *pgconn.PgError
		require.Truef(t, errors.As(err, &pgErr), "%s: %v", sql, err)
		require.Equalf(t, "42501", pgErr.Code, "%s: %s", sql, pgErr.Message)
	}
	// Nor may it enter the cluster's other databases (by default every
	// role may, and make temporary tables there).
	for _, other := range []string{"postgres", "template1"} {
		u, err := url.Parse(c.AppURL(""))
		require.NoError(t, err)
		u.Path = "/" + other
		_, err = pgx.Connect(t.Context(), u.String())
		var pgErr *pgconn.PgError
		require.Truef(t, errors.As(err, &pgErr), "connecting to %s: %v", other, err)
		require.Equalf(t, "42501", pgErr.Code, "connecting to %s: %s", other, pgErr.Message)
	}
	require.NoError(t, c.Close(t.Context()))

	// Idempotent, and an application role made without LOGIN (by a migration run
	// before the roles were set up) is let in.
	c = openWith(t, opts)
	exec1(t, c, `ALTER ROLE test_app NOLOGIN`)
	require.NoError(t, c.Close(t.Context()))
	c = openWith(t, opts)
	app, err = pgx.Connect(t.Context(), c.AppURL(""))
	require.NoError(t, err)
	require.NoError(t, app.Close(t.Context()))
	require.NoError(t, c.Close(t.Context()))
}
