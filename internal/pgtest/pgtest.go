// Package pgtest gives each test its own migrated PostgreSQL database.
//
// `make test` starts one throw-away cluster for the whole run and passes its
// URL in TEST_DATABASE_URL; a package tested alone with plain `go test`
// starts its own cluster (in a fresh temporary directory) and stops it when
// its tests end. Either way every test gets a fresh database cloned from a
// migrated template, so tests run in parallel without seeing each other.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
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
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, withDatabase(baseURL, build))
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

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("pgtest: %s is not a URL: %v", EnvURL, err))
	}
	u.Path = "/" + name
	return u.String()
}

// URL creates a fresh migrated database for t and returns its URL; the
// database is dropped when t ends. Use it to hand a database to a child
// process.
func URL(t testing.TB) string {
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
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident+` TEMPLATE `+pgx.Identifier{template}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return withDatabase(baseURL, name)
}

// Pool returns a connection pool on a fresh migrated database of t's own.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
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
