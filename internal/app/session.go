package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IdleInTransactionTimeout bounds how long one of the server's sessions may
// sit in a transaction without a statement running. Nothing the server does
// waits that long between two statements of one transaction; a session
// that does is stuck, and holding its snapshot and locks open would hold up
// vacuum and every writer behind its locks. (The frozen-plan rules do not
// depend on it: locks, not snapshot reads, decide them.)
const IdleInTransactionTimeout = "5min"

// sessionSettings are the session settings the server depends on, set on
// every connection it opens, after connecting, whatever the role's or the
// database's defaults say: the role the server runs as may change its own
// defaults (ALTER ROLE onceplan_app SET statement_timeout = '1ms' is allowed
// to any role), and such a default must not break every later connection
// (docs/ARCHITECTURE.md, "The guarantee against the server's own role"). A
// SET after connecting rather than a startup parameter, so that a pooler in
// front of PostgreSQL passes it on.
func sessionSettings(schema string, serverVersion int) string {
	set := []string{
		// Starting a million-target campaign is one long transaction.
		"SET statement_timeout = 0",
		"SET lock_timeout = 0",
		"SET idle_in_transaction_session_timeout = '" + IdleInTransactionTimeout + "'",
		// The ledger's and the plan's rules are written for READ COMMITTED
		// writers (the audit asks for REPEATABLE READ itself).
		"SET default_transaction_isolation = 'read committed'",
		"SET default_transaction_read_only = off",
		"SET default_transaction_deferrable = off",
	}
	if serverVersion >= 140000 {
		set = append(set, "SET idle_session_timeout = 0") // pooled connections wait idle
	}
	if serverVersion >= 170000 {
		set = append(set, "SET transaction_timeout = 0")
	}
	if schema != "" {
		set = append(set, "SET search_path = "+pgx.Identifier{schema}.Sanitize())
	}
	return strings.Join(set, "; ")
}

// schemaSQL finds the schema Onceplan was migrated into: the one holding
// its migration table that this role may read. When several do, the one
// the connection's search_path names first wins (an explicit search_path
// in the URL chooses).
const schemaSQL = `
SELECT n.nspname, n.nspname = current_schema()
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'onceplan_migration' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT')
ORDER BY 2 DESC, 1`

// roleDefaultsSQL lists the defaults set for this role or this database
// (ALTER ROLE … SET, ALTER DATABASE … SET).
const roleDefaultsSQL = `
SELECT coalesce(array_agg(c ORDER BY c), '{}')
FROM pg_db_role_setting s, unnest(s.setconfig) c
WHERE (s.setrole = 0 OR s.setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user))
  AND (s.setdatabase = 0 OR s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()))`

// withSessionSettings makes every connection of cfg's pools take the
// settings the server depends on. It asks the database once, on a
// connection of its own, which schema Onceplan lives in, and logs the
// role's and database's own defaults when there are any (one of them set
// synchronous_commit, which decides whether a committed claim survives a
// crash of PostgreSQL: the server then sets it back on).
func withSessionSettings(ctx context.Context, cfg *pgxpool.Config, logger *slog.Logger) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// This connection too must not be cut short by the role's defaults.
	if err := untimed(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, sessionSettings("", 0)); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, schemaSQL)
	if err != nil {
		return err
	}
	var (
		name, schema string
		current      bool
		schemas      []string
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &current}, func() error {
		if current {
			schema = name
		}
		schemas = append(schemas, name)
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case schema != "": // the search_path's own
	case len(schemas) == 1:
		schema = schemas[0]
	case len(schemas) > 1:
		return fmt.Errorf("the database has Onceplan schemas in %s: name the one to use with search_path in the database URL (options=-c%%20search_path%%3D…)",
			strings.Join(schemas, ", "))
	}
	// No schema at all: not migrated yet, which CheckSchema or the
	// migration says; the search_path is left as it is.
	var defaults []string
	if err := conn.QueryRow(ctx, roleDefaultsSQL).Scan(&defaults); err != nil {
		return err
	}
	version, _ := strconv.Atoi(conn.PgConn().ParameterStatus("server_version_num"))
	if version == 0 {
		if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return err
		}
	}
	set := sessionSettings(schema, version)
	if len(defaults) > 0 {
		for _, d := range defaults {
			if strings.HasPrefix(d, "synchronous_commit=") {
				set += "; SET synchronous_commit = on"
			}
		}
		logger.Warn("the database role or database has defaults of its own; the server sets the ones it depends on itself",
			"defaults", defaults, "set", set)
	}
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, conn); err != nil {
				return err
			}
		}
		if err := untimed(ctx, conn); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, set)
		return err
	}
	return nil
}

// untimed clears a statement_timeout the role's or the database's defaults
// set, before anything else runs on conn. The SET itself runs under that
// timeout, so a very short one (any role may give itself 1 ms) can cancel
// it while the machine is busy — every try, for as long as PostgreSQL's
// backend waits for a core: a cancelled SET is tried again, with a pause
// growing to 100 ms between tries, for up to untimedFor.
func untimed(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(untimedFor)
	pause := time.Millisecond
	for {
		_, err := conn.Exec(ctx, "SET statement_timeout = 0")
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" || time.Now().Add(pause).After(deadline) { // 57014: query_canceled
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// untimedFor bounds untimed's tries.
const untimedFor = 10 * time.Second
