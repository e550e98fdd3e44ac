package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Roles are the two database roles of a least-privilege setup, created beside the
// bootstrap superuser that initdb makes.
//
// Open creates them when they are missing (holding the start lock, so processes
// never race): Owner without LOGIN, App with LOGIN. It then makes Owner the owner
// of the database, lets App connect to it (and, the superuser aside, nobody else),
// and hands Owner every object in the database that the superuser owns outside the
// system schemas: what was made before the roles existed. What App may do inside
// the database is for Owner to grant; onceplan's migrations do that.
//
// Every connection is trusted on the private socket, so the roles are not a
// defence against the machine's own accounts: they bound what the running
// application (App) can do to the schema and the data it must not change.
type Roles struct {
	// Owner owns the database and everything in it. It cannot log in: the
	// superuser acts as it (OwnerURL), so that what it creates belongs to Owner.
	Owner string
	// App logs in (AppURL) and owns nothing.
	App string
}

var roleNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (r *Roles) validate() error {
	for _, name := range []string{r.Owner, r.App} {
		if !roleNameRE.MatchString(name) || name == superuser || name == "public" {
			return errorf(nil, "%q cannot name a role of the embedded PostgreSQL cluster (pgcluster.Roles): use lower-case letters, digits and _, and neither %q nor \"public\"", name, superuser)
		}
	}
	if r.Owner == r.App {
		return errorf(nil, "the owner and the application role of the embedded PostgreSQL cluster must differ (pgcluster.Roles names %q twice)", r.Owner)
	}
	return nil
}

// OwnerURL returns URL(database) with the bootstrap superuser acting as Roles.Owner
// (the "role" setting, sent at connection start); it is for migrations. It returns
// "" when Open was given no Roles.
func (c *Cluster) OwnerURL(database string) string {
	if c.roles == nil {
		return ""
	}
	// %20, not QueryEscape's "+": pgx does not read "+" as a space.
	return c.URL(database) + "&options=" + strings.ReplaceAll(url.QueryEscape("-c role="+c.roles.Owner), "+", "%20")
}

// AppURL returns a connection URL for database as Roles.App, e.g.
// "postgres://onceplan_app@/onceplan?host=%2Fvar%2Flib%2Fonceplan%2Fpg&sslmode=disable".
// It returns "" when Open was given no Roles.
func (c *Cluster) AppURL(database string) string {
	if c.roles == nil {
		return ""
	}
	if database == "" {
		database = c.database
	}
	return "postgres://" + c.roles.App + "@/" + url.PathEscape(database) +
		"?host=" + url.QueryEscape(c.sockDir) + "&sslmode=disable"
}

// handOverSQL lists the statements that give the superuser's objects in the current
// database ($1 names the new owner). Tables take their indexes, row types and
// identity or serial sequences with them; objects of extensions stay as they are.
const handOverSQL = `
WITH su AS (SELECT oid FROM pg_roles WHERE rolname = current_user),
ns AS (SELECT oid, nspname, nspowner FROM pg_namespace
       WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'),
ext AS (SELECT classid, objid FROM pg_depend WHERE deptype = 'e')
SELECT format('ALTER SCHEMA %I OWNER TO %I', ns.nspname, $1::text)
FROM ns, su WHERE ns.nspowner = su.oid
UNION ALL
SELECT format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, $1::text)
FROM pg_class c JOIN ns ON ns.oid = c.relnamespace, su
WHERE c.relowner = su.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND NOT EXISTS (SELECT 1 FROM ext WHERE ext.classid = 'pg_class'::regclass AND ext.objid = c.oid)
UNION ALL
SELECT format('ALTER SEQUENCE %s OWNER TO %I', c.oid::regclass, $1::text)
FROM pg_class c JOIN ns ON ns.oid = c.relnamespace, su
WHERE c.relowner = su.oid AND c.relkind = 'S'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                  AND d.deptype IN ('a', 'i', 'e'))
UNION ALL
SELECT format('ALTER TYPE %s OWNER TO %I', t.oid::regtype, $1::text)
FROM pg_type t JOIN ns ON ns.oid = t.typnamespace, su
WHERE t.typowner = su.oid
  AND (t.typtype IN ('e', 'd', 'r')
       OR (t.typtype = 'c' AND EXISTS (SELECT 1 FROM pg_class k WHERE k.oid = t.typrelid AND k.relkind = 'c')))
  AND NOT EXISTS (SELECT 1 FROM ext WHERE ext.classid = 'pg_type'::regclass AND ext.objid = t.oid)
UNION ALL
SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, $1::text)
FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace, su
WHERE p.proowner = su.oid
  AND NOT EXISTS (SELECT 1 FROM ext WHERE ext.classid = 'pg_proc'::regclass AND ext.objid = p.oid)`

// ensureRoles sets up c.roles (see Roles). Open holds <dir>.start.lock.
func (c *Cluster) ensureRoles(ctx context.Context) error {
	if c.roles == nil {
		return nil
	}
	conn, err := c.connect(ctx, c.database)
	if err != nil {
		return errorf(err, "could not connect to PostgreSQL on %s to set up its roles: %v", c.dir, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	owner := pgx.Identifier{c.roles.Owner}.Sanitize()
	app := pgx.Identifier{c.roles.App}.Sanitize()
	db := pgx.Identifier{c.database}.Sanitize()
	var handed int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, r := range []struct {
			name, create string
			login        bool
		}{
			{c.roles.Owner, "CREATE ROLE " + owner + " NOLOGIN", false},
			{c.roles.App, "CREATE ROLE " + app + " LOGIN", true},
		} {
			var exists, canLogin bool
			err := tx.QueryRow(ctx, `SELECT true, rolcanlogin FROM pg_roles WHERE rolname = $1`, r.name).Scan(&exists, &canLogin)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			switch {
			case !exists:
				if _, err := tx.Exec(ctx, r.create); err != nil {
					return err
				}
				c.log.Info("created database role", "role", r.name, "dir", c.dir)
			case r.login && !canLogin:
				// Made without LOGIN by a migration run before the roles were set up.
				if _, err := tx.Exec(ctx, "ALTER ROLE "+app+" LOGIN"); err != nil {
					return err
				}
			}
		}
		var dbOwner string
		if err := tx.QueryRow(ctx, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()`).Scan(&dbOwner); err != nil {
			return err
		}
		if dbOwner != c.roles.Owner {
			if _, err := tx.Exec(ctx, "ALTER DATABASE "+db+" OWNER TO "+owner); err != nil {
				return err
			}
		}
		// Nobody else connects, and nobody makes temporary tables.
		if _, err := tx.Exec(ctx, "REVOKE ALL ON DATABASE "+db+" FROM PUBLIC"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "GRANT CONNECT ON DATABASE "+db+" TO "+app); err != nil {
			return err
		}
		// Nor in the cluster's other databases, which every role may
		// enter and make temporary tables in by default: the roles have
		// no business there (the superuser keeps its way in).
		for _, other := range []string{"postgres", "template1"} {
			if other == c.database {
				continue
			}
			if _, err := tx.Exec(ctx, "REVOKE CONNECT, TEMPORARY ON DATABASE "+pgx.Identifier{other}.Sanitize()+" FROM PUBLIC"); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, handOverSQL, c.roles.Owner)
		if err != nil {
			return err
		}
		stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		handed = len(stmts)
		return nil
	})
	if err != nil {
		return errorf(err, "could not set up the roles %q and %q of database %q on %s: %v", c.roles.Owner, c.roles.App, c.database, c.dir, err)
	}
	if handed > 0 {
		c.log.Info("handed the database's objects to its owner role", "owner", c.roles.Owner, "objects", handed, "dir", c.dir)
	}
	return nil
}
