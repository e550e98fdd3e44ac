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
	// URL of a PostgreSQL database; empty means the embedded default.
	URL string
	// DataDir holds the embedded default's cluster (in DataDir/pg).
	DataDir string
	// Migrate applies migrations on open. Commands do so on the embedded
	// default; against a given URL the operator runs `onceplan migrate`.
	Migrate bool
	// MaxConns sizes the pool; pgxpool's default (4 on 2 cores) is too
	// small for workers and group commits.
	MaxConns int32
	Logger   *slog.Logger
}

// DB is an open database and, on the embedded default, the cluster behind it.
type DB struct {
	Pool    *pgxpool.Pool
	URL     string
	cluster *pgcluster.Cluster
}

// Embedded reports whether this DB runs on the embedded default cluster.
func (d *DB) Embedded() bool { return d.cluster != nil }

// OpenDB connects to the configured database, starting the embedded default
// when no URL is given, and checks (or applies) the schema.
func OpenDB(ctx context.Context, opts DBOptions) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	d := &DB{URL: opts.URL}
	if d.URL == "" {
		dir, err := filepath.Abs(filepath.Join(opts.DataDir, "pg"))
		if err != nil {
			return nil, err
		}
		c, err := pgcluster.Open(ctx, pgcluster.Options{Dir: dir, Logger: logger})
		if err != nil {
			return nil, err
		}
		d.cluster = c
		d.URL = c.URL("")
		logger.Info("embedded PostgreSQL", "data", c.Dir(), "started", c.Started())
	}
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		d.Close(ctx)
		return nil, fmt.Errorf("the database URL is not valid: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	d.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = d.Pool.Ping(ctx)
	}
	if err != nil {
		d.Close(ctx)
		return nil, fmt.Errorf("cannot connect to the database at %s: %w", redact(d.URL), err)
	}
	if opts.Migrate {
		res, err := migrations.Up(ctx, d.Pool)
		if err != nil {
			d.Close(ctx)
			return nil, fmt.Errorf("migrating the database: %w", err)
		}
		if len(res.Applied)+len(res.River) > 0 {
			logger.Info("migrated", "onceplan_versions", res.Applied, "river_versions", res.River)
		}
		return d, nil
	}
	if err := CheckSchema(ctx, d.Pool); err != nil {
		d.Close(ctx)
		return nil, err
	}
	return d, nil
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
