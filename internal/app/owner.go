package app

import (
	"context"
	"log/slog"
)

// OpenOwnerDB opens a short-lived DB whose Pool works as the schema's owner
// (migrations.OwnerRole), for the few writes the application role is
// refused (registering a bump policy: docs/ARCHITECTURE.md, "The guarantee
// against the server's own role"). Close it as soon
// as the write is done.
//
// On the embedded default it opens the cluster as OpenDB does (applying
// migrations, as every command there does) and then acts as the owner
// there, as migrations do. Against a given URL it connects with that URL,
// which must be the owner's (PostgreSQL refuses the application role's at
// the write), and checks that the schema is current: it never migrates,
// that is `onceplan migrate`'s.
func OpenOwnerDB(ctx context.Context, opts DBOptions) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// One write at a time.
	const maxConns = 1
	if opts.URL != "" {
		pool, err := openPool(ctx, opts.URL, maxConns, logger)
		if err != nil {
			return nil, err
		}
		d := &DB{Pool: pool, URL: opts.URL}
		if err := CheckSchema(ctx, pool); err != nil {
			d.Close(ctx)
			return nil, err
		}
		return d, nil
	}
	opts.Migrate, opts.MaxConns, opts.Logger = true, maxConns, logger
	d, err := OpenDB(ctx, opts)
	if err != nil {
		return nil, err
	}
	// The application role's pool is not what the caller needs: swap it
	// for the owner's, keeping the cluster for d.Close to release.
	d.Pool.Close()
	d.URL = d.cluster.OwnerURL("")
	if d.Pool, err = openPool(ctx, d.URL, maxConns, logger); err != nil {
		d.Close(ctx)
		return nil, err
	}
	return d, nil
}
