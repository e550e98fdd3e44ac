// Package app wires Onceplan's parts together for the commands in
// cmd/onceplan: configuration, the database (a given URL or the embedded
// default), the HTTP server. End-to-end tests reuse it so that they run the
// same wiring as the binary.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/pgcluster"
	"github.com/onceplan/onceplan/migrations"
)

// DBOptions say where the database is.
type DBOptions struct {
	// URL of a PostgreSQL database; empty means the embedded default. The
	// role it names is the one this process works as: the application role
	// (migrations.AppRole) for serve, worker and the other commands, the
	// schema's owner for `onceplan migrate`.
	URL string
	// DataDir holds the embedded default's cluster (in DataDir/pg).
	DataDir string
	// Migrate applies migrations on open. Commands do so on the embedded
	// default; against a given URL the operator runs `onceplan migrate`.
	// On the embedded default migrations run as the owner role
	// (migrations.OwnerRole) and the pool then connects as the application
	// role; against a given URL both use that URL.
	Migrate bool
	// MaxConns sizes the pool; pgxpool's default (4 on 2 cores) is too
	// small for workers and group commits.
	MaxConns int32
	Logger   *slog.Logger
}

// DB is an open database and, on the embedded default, the cluster behind it.
type DB struct {
	Pool *pgxpool.Pool
	// URL is what Pool connects with: on the embedded default, the
	// application role's.
	URL     string
	cluster *pgcluster.Cluster
}

// OpenDB connects to the configured database, starting the embedded default
// when no URL is given, and checks (or applies) the schema.
//
// On the embedded default the cluster has two roles besides its superuser
// (docs/ARCHITECTURE.md, "Two roles"): migrations run as the owner of the
// schema, and the pool connects as the application role, which may not
// alter, drop or truncate tables, update frozen rows or delete ledger rows.
func OpenDB(ctx context.Context, opts DBOptions) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	d := &DB{URL: opts.URL}
	migrateURL := opts.URL
	if d.URL == "" {
		dir, err := filepath.Abs(filepath.Join(opts.DataDir, "pg"))
		if err != nil {
			return nil, err
		}
		c, err := pgcluster.Open(ctx, pgcluster.Options{
			Dir: dir, Logger: logger,
			Roles: &pgcluster.Roles{Owner: migrations.OwnerRole, App: migrations.AppRole},
		})
		if err != nil {
			return nil, err
		}
		d.cluster = c
		d.URL = c.AppURL("")
		migrateURL = c.OwnerURL("")
		logger.Info("embedded PostgreSQL", "data", c.Dir(), "started", c.Started(), "role", migrations.AppRole)
	}
	var err error
	if d.Pool, err = openPool(ctx, d.URL, opts.MaxConns, logger); err != nil {
		d.Close(ctx)
		return nil, err
	}
	if opts.Migrate {
		if err := migrate(ctx, d, migrateURL, logger); err != nil {
			d.Close(ctx)
			return nil, fmt.Errorf("migrating the database: %w", err)
		}
		// Again, now that the schema the sessions are pinned to exists.
		d.Pool.Close()
		if d.Pool, err = openPool(ctx, d.URL, opts.MaxConns, logger); err != nil {
			d.Close(ctx)
			return nil, err
		}
		return d, nil
	}
	if err := CheckSchema(ctx, d.Pool); err != nil {
		d.Close(ctx)
		return nil, err
	}
	warnIfPrivileged(ctx, d.Pool, logger)
	return d, nil
}

// openPool opens a pool on url whose sessions take the settings the
// server depends on (withSessionSettings), and checks it connects.
func openPool(ctx context.Context, url string, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("the database URL is not valid: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if err := withSessionSettings(ctx, cfg, logger); err != nil {
		return nil, fmt.Errorf("cannot connect to the database at %s: %w", redact(url), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot connect to the database at %s: %w", redact(url), err)
	}
	return pool, nil
}

// migrate applies the migrations through url: d's own pool when it is d's
// URL, else a short-lived pool of the owner's.
func migrate(ctx context.Context, d *DB, url string, logger *slog.Logger) error {
	pool := d.Pool
	if url != d.URL {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return fmt.Errorf("the owner's database URL is not valid: %w", err)
		}
		// One connection holds the advisory lock while River's migrator
		// works on another.
		cfg.MaxConns = 2
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return fmt.Errorf("cannot connect to the database at %s: %w", redact(url), err)
		}
		defer pool.Close()
	}
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		return err
	}
	if len(res.Applied)+len(res.River) > 0 {
		logger.Info("migrated", "onceplan_versions", res.Applied, "river_versions", res.River)
	}
	return nil
}

// warnIfPrivileged says so when a process given a database URL works as a
// superuser or as the schema's owner: then nothing but the triggers stands
// between a bug and the frozen plans and the ledger.
func warnIfPrivileged(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	var role string
	var super, owner bool
	err := pool.QueryRow(ctx, `
		SELECT current_user, r.rolsuper, coalesce(pg_has_role(current_user, c.relowner, 'USAGE'), false)
		FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass('effect')
		WHERE r.rolname = current_user`).Scan(&role, &super, &owner)
	if err != nil || !(super || owner) {
		return
	}
	logger.Warn("the database role is a superuser or owns the schema, so PostgreSQL's privileges do not keep this process from altering tables or deleting ledger rows; connect as "+
		migrations.AppRole+" (see docs/guide/secure.md, \"Database roles\")", "role", role, "superuser", super, "owner", owner)
}

// CheckSchema says clearly when the database's schema is not the one this
// binary carries.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	have, err := migrations.Current(ctx, pool)
	if err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	switch want := migrations.Latest(); {
	case have < want:
		return fmt.Errorf("the database schema is at version %d but this onceplan needs %d: run `onceplan migrate` first", have, want)
	case have > want:
		return fmt.Errorf("the database schema is at version %d, newer than this onceplan knows (%d): run a newer onceplan", have, want)
	}
	return nil
}

// Close closes the pool and, when this process was the cluster's last
// user, stops the embedded cluster.
func (d *DB) Close(ctx context.Context) error {
	if d.Pool != nil {
		d.Pool.Close()
	}
	if d.cluster != nil {
		return d.cluster.Close(ctx)
	}
	return nil
}
