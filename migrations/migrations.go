// Package migrations owns Onceplan's database schema: numbered SQL files
// embedded in the binary, applied in order together with River's own
// migrations, in one transaction under an advisory lock.
//
// Applying is idempotent: a second run finds every version recorded and does
// nothing. Versions are never edited once released; a change is a new file.
//
// The schema belongs to the role that applies it (OwnerRole on the embedded
// default); the running system connects as AppRole, which owns nothing and
// holds only the privileges 0008_privileges grants it
// (docs/ARCHITECTURE.md, "Two roles").
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed [0-9][0-9][0-9][0-9]_*.sql
var files embed.FS

// The two database roles (docs/guide/secure.md, "Database roles"). OwnerRole owns the
// schema and applies these migrations; on the embedded default it cannot
// log in, and the cluster's superuser acts as it. AppRole is what serve,
// worker and the other commands connect as: it may read and write what the
// running system needs, and nothing else. The SQL files name AppRole
// literally.
const (
	OwnerRole = "onceplan_owner"
	AppRole   = "onceplan_app"
)

// lockID is the advisory lock that serialises concurrent migrators
// (two `serve` processes starting at once on one database).
const lockID = 0x6f6e6365706c616e // "onceplan"

// Migration is one numbered schema step.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Result says what a run applied.
type Result struct {
	// Applied lists the Onceplan versions this run applied, in order.
	Applied []int
	// River lists River's migration versions this run applied.
	River []int
}

var fileRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns the embedded migrations in version order.
func All() ([]Migration, error) { return allIn(files) }

func allIn(files fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not named NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		// Two branches can each take the next number: merged, their files
		// would be read as one version, the up of one and the down of the
		// other.
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %04d has two names, %s and %s", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrations: version %04d needs both an up and a down file", m.Version)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: version %04d is missing", i+1)
		}
	}
	return out, nil
}

// Fingerprint is a hash of every embedded migration and River's migration
// line; test harnesses name their template databases after it, so a schema
// change never reuses a stale template.
func Fingerprint() string {
	h := sha256.New()
	ms, err := All()
	if err != nil {
		h.Write([]byte(err.Error()))
	}
	for _, m := range ms {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.Up)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err == nil {
		for _, m := range migrator.AllVersions() {
			fmt.Fprintf(h, "river%d\x00%s\x00", m.Version, m.SQLUp)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

const createTable = `
CREATE TABLE IF NOT EXISTS onceplan_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies River's migrations, then every Onceplan migration not yet
// recorded, under a session advisory lock so that two processes starting
// at once take turns. River applies each of its versions in a transaction
// of its own (some add enum values that a single transaction could not
// use); Onceplan's versions all go in one transaction, so a failure leaves
// Onceplan's schema as it was.
func Up(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	var res Result
	all, err := All()
	if err != nil {
		return res, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockID)); err != nil {
		return res, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockID))
	if err := checkCanCreate(ctx, conn); err != nil {
		return res, err
	}

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	rr, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return res, fmt.Errorf("river migrations: %w", err)
	}
	for _, v := range rr.Versions {
		res.River = append(res.River, v.Version)
	}

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, createTable); err != nil {
			return err
		}
		done, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		if len(done) > 0 && done[len(done)-1] > len(all) {
			return fmt.Errorf("the database has schema version %d but this onceplan knows only up to %d: run a newer onceplan", done[len(done)-1], len(all))
		}
		for _, m := range all {
			if slices.Contains(done, m.Version) {
				continue
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO onceplan_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
			res.Applied = append(res.Applied, m.Version)
		}
		// River's tables are granted to the application role whenever
		// migrations run, so that those a newer River adds are too.
		var grants bool
		if err := tx.QueryRow(ctx, `SELECT to_regprocedure('onceplan_grant_river()') IS NOT NULL`).Scan(&grants); err != nil || !grants {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT onceplan_grant_river()`)
		return err
	})
	return res, err
}

// checkCanCreate says clearly when the connection's role cannot create
// tables: most often it is the application role, given to `onceplan
// migrate` instead of the owner's.
func checkCanCreate(ctx context.Context, conn *pgxpool.Conn) error {
	var role, schema string
	var can bool
	err := conn.QueryRow(ctx, `SELECT current_user, coalesce(current_schema(), ''),
		coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)`).Scan(&role, &schema, &can)
	if err != nil {
		return err
	}
	switch {
	case schema == "":
		return fmt.Errorf("the database role %s has no schema to create tables in (its search_path names none that exists)", role)
	case !can:
		return fmt.Errorf("the database role %s may not create tables in schema %s: run migrations as the role that owns the schema (%s on the embedded default; see docs/guide/secure.md, \"Database roles\")", role, schema, OwnerRole)
	}
	return nil
}

// DownTo reverts Onceplan migrations above version (River's schema is left
// in place). It exists for development and for testing that every down file
// undoes its up file; it destroys data.
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var reverted []int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockID)); err != nil {
			return err
		}
		done, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if m.Version <= version || !slices.Contains(done, m.Version) {
				continue
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("reverting %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM onceplan_migration WHERE version = $1`, m.Version); err != nil {
				return err
			}
			reverted = append(reverted, m.Version)
		}
		return nil
	})
	return reverted, err
}

// Current returns the highest applied Onceplan version, 0 on an empty database.
func Current(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('onceplan_migration') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM onceplan_migration`).Scan(&v)
	return v, err
}

// Latest is the highest version this binary carries.
func Latest() int {
	all, err := All()
	if err != nil || len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

func appliedVersions(ctx context.Context, tx pgx.Tx) ([]int, error) {
	rows, err := tx.Query(ctx, `SELECT version FROM onceplan_migration ORDER BY version`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}
