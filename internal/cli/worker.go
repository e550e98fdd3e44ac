package cli

import (
	"cmp"
	"context"
	"flag"
	"time"

	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/suppression"
)

// runWorker runs workers only: more machines (or processes) performing
// effects on the same database.
func runWorker(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	var wf workerFlags
	wf.register(fs)
	wf.registerPublicURL(fs, suppression.DefaultPublicURL+", serve's default address: set it wherever serve listens elsewhere")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if err := wf.check(); err != nil {
		return err
	}
	logger := newLogger(env.Stderr)
	d, err := app.OpenDB(ctx, app.DBOptions{URL: db.databaseURL, DataDir: db.dataDir, Migrate: db.databaseURL == "", MaxConns: workerPoolConns, Logger: logger})
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
	logger.Info("onceplan worker is running", "owner", ws.Runner.Executor().Owner(), "public_url", cmp.Or(wf.opts.PublicURL, suppression.DefaultPublicURL))
	<-ctx.Done()
	logger.Info("shutting down")
	stopWorkers(ws, logger)
	return nil
}
