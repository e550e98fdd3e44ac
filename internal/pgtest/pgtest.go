// Package pgtest gives each test its own migrated PostgreSQL database.
//
// `make test` starts one throw-away cluster for the whole run and passes its
// URL in TEST_DATABASE_URL; a package tested alone with plain `go test`
// starts its own cluster (in a fresh temporary directory) and stops it when
// its tests end. Either way every test gets a fresh database cloned from a
// migrated template, so tests run in parallel without seeing each other.
//
// The roles are production's (docs/ARCHITECTURE.md, "Two roles"): the
// template is migrated as the owner role (migrations.OwnerRole), and URL
// hands out the application role (migrations.AppRole), the one a server
// connects as, so every test that runs a server or a worker shows that role
// is enough. Pool connects as the cluster's superuser, which no privilege
// stops: tests of the triggers need that, as they must show the triggers
// hold on their own.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/onceplan/onceplan/internal/pgcluster"
	"github.com/onceplan/onceplan/migrations"
)

// EnvURL names the variable that points the tests at a running cluster.
const EnvURL = "TEST_DATABASE_URL"

var (
	setupOnce sync.Once
	setupErr  error
	baseURL   string
	admin     *pgxpool.Pool
	template  string
	ownDir    string
	own       *pgcluster.Cluster
)

// Main runs a package's tests: it stops a cluster this process started,
// then fails the run if goroutines leaked. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	teardown()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func teardown() {
	if admin != nil {
		admin.Close()
	}
	if own != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := own.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the test cluster: %v\n", err)
		}
		os.RemoveAll(ownDir)
	}
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	baseURL = os.Getenv(EnvURL)
	if baseURL == "" {
		dir, err := os.MkdirTemp("", "onceplan-pgtest-")
		if err != nil {
			return err
		}
		// The postgres account (when we are root) must be able to enter it.
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		ownDir = dir
		own, err = pgcluster.Open(ctx, pgcluster.Options{
			Dir: dir + "/pg",
			Settings: map[string]string{
				"fsync":              "off",
				"synchronous_commit": "off",
				"full_page_writes":   "off",
			},
		})
		if err != nil {
			return fmt.Errorf("starting a test cluster (set %s to use a running one): %w", EnvURL, err)
		}
		baseURL = own.URL("")
	}
	cfg, err := pgxpool.ParseConfig(baseURL)
	if err != nil {
		return fmt.Errorf("%s: %w", EnvURL, err)
	}
	cfg.MaxConns = 4
	admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	template = "onceplan_tmpl_" + migrations.Fingerprint()
	return ensureTemplate(ctx)
}

// ensureRoles creates the owner and the application role on the cluster
// when missing (the caller holds the template lock). The application role
// logs in without a password, like the superuser it sits beside.
func ensureRoles(ctx context.Context, conn *pgxpool.Conn) error {
	for _, r := range []struct{ name, create, alter string }{
		{migrations.OwnerRole, "CREATE ROLE %s NOLOGIN", ""},
		// 0008 makes it NOLOGIN when it has to create it itself.
		{migrations.AppRole, "CREATE ROLE %s LOGIN", "ALTER ROLE %s LOGIN"},
	} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, r.name).Scan(&exists); err != nil {
			return err
		}
		stmt := r.create
		if exists {
			stmt = r.alter
		}
		if stmt == "" {
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(stmt, pgx.Identifier{r.name}.Sanitize())); err != nil {
			return fmt.Errorf("setting up role %s: %w", r.name, err)
		}
	}
	return nil
}

// ensureTemplate builds the migrated template database once per schema
// version; concurrent test binaries wait on an advisory lock.
func ensureTemplate(ctx context.Context) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('onceplan-pgtest-template'))`); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('onceplan-pgtest-template'))`)
	if err := ensureRoles(ctx, conn); err != nil {
		return err
	}

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	build := template + "_build"
	ident := pgx.Identifier{build}.Sanitize()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
		return err
	}
	// Owned by the owner role, which creates the schema in it.
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident+` OWNER `+pgx.Identifier{migrations.OwnerRole}.Sanitize()); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, asOwner(withDatabase(baseURL, build)))
	if err != nil {
		return err
	}
	_, err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrating the template database: %w", err)
	}
	_, err = conn.Exec(ctx, `ALTER DATABASE `+ident+` RENAME TO `+pgx.Identifier{template}.Sanitize())
	return err
}

func parse(raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("pgtest: %s is not a URL: %v", EnvURL, err))
	}
	return u
}

func withDatabase(raw, name string) string {
	u := parse(raw)
	u.Path = "/" + name
	return u.String()
}

// asOwner makes the superuser's URL act as the owner role once connected.
func asOwner(raw string) string {
	u := parse(raw)
	q := u.Query()
	q.Set("options", "-c role="+migrations.OwnerRole)
	// %20, not Encode's "+": pgx does not read "+" as a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// asApp makes the superuser's URL connect as the application role.
func asApp(raw string) string {
	u := parse(raw)
	u.User = url.User(migrations.AppRole)
	return u.String()
}

// URLs are one test database's connection URLs, one per role.
type URLs struct {
	// Admin connects as the cluster's superuser: no privilege applies.
	Admin string
	// Owner connects as the superuser acting as the owner of the schema
	// (migrations.OwnerRole), as migrations run.
	Owner string
	// App connects as the application role (migrations.AppRole), as
	// serve and worker do.
	App string
}

// Database creates a fresh migrated database for t and returns its URLs;
// the database is dropped when t ends.
func Database(t testing.TB) URLs {
	t.Helper()
	setupOnce.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("pgtest: %v", setupErr)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{name}.Sanitize()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident+` OWNER `+pgx.Identifier{migrations.OwnerRole}.Sanitize()+
		` TEMPLATE `+pgx.Identifier{template}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	adminURL := withDatabase(baseURL, name)
	return URLs{Admin: adminURL, Owner: asOwner(adminURL), App: asApp(adminURL)}
}

// URL creates a fresh migrated database for t and returns its URL as the
// application role; the database is dropped when t ends. Use it to hand a
// database to a server or worker, in-process or a child process.
func URL(t testing.TB) string {
	t.Helper()
	return Database(t).App
}

// Pool returns a connection pool on a fresh migrated database of t's own,
// connected as the cluster's superuser.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, Database(t).Admin)
}

// AppPool returns a connection pool on a fresh migrated database of t's
// own, connected as the application role.
func AppPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, Database(t).App)
}

// Listeners counts the sessions of pool's database whose last statement
// was LISTEN channel: how a test knows that a waiter (a long poll, a
// server's notification hub) is waiting, instead of sleeping for it. The
// query text of other roles' sessions is hidden from the application
// role, so pool should be the superuser's or the same role as the
// listener's.
func Listeners(t testing.TB, pool *pgxpool.Pool, channel string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN ' || $1`, channel).Scan(&n); err != nil {
		t.Fatalf("pgtest: counting listeners: %v", err)
	}
	return n
}

// NewPool opens a pool on raw (one of Database's URLs), closed when t ends.
func NewPool(t testing.TB, raw string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
