package cli

import (
	"context"
	"flag"
	"time"

	"github.com/onceplan/onceplan/internal/app"
)

// runWorker runs workers only: more machines (or processes) performing
// effects on the same database.
func runWorker(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	var wf workerFlags
	wf.register(fs)
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if err := wf.check(); err != nil {
		return err
	}
	logger := newLogger(env.Stderr)
	// 40 connections: pgxpool's default (4 on 2 cores) starves River's
	// producers, the workers' batches and maintenance; the executor opens
	// a few more of its own for its write batches (executor.newWritePool).
	d, err := app.OpenDB(ctx, app.DBOptions{URL: db.databaseURL, DataDir: db.dataDir, Migrate: db.databaseURL == "", MaxConns: 40, Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.Close(stopCtx)
	}()
	ws, err := wf.start(ctx, env, d, db.dataDir, logger)
	if err != nil {
		return err
	}
	logger.Info("onceplan worker is running", "owner", ws.Runner.Executor().Owner())
	<-ctx.Done()
	logger.Info("shutting down")
	stopWorkers(ws, logger)
	return nil
}
