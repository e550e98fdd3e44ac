package cli

import (
	"context"
	"flag"
	"time"

	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/web"
)

func runServe(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	listen := fs.String("listen", "127.0.0.1:8080", "address for the web UI and the JSON API")
	var wf workerFlags
	wf.register(fs)
	if err := parse(fs, env, args); err != nil {
		return err
	}
	logger := newLogger(env.Stderr)

	d, err := app.OpenDB(ctx, app.DBOptions{
		URL:      db.databaseURL,
		DataDir:  db.dataDir,
		Migrate:  db.databaseURL == "",
		MaxConns: 40,
		Logger:   logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Close(stopCtx); err != nil {
			logger.Error("closing the database", "err", err)
		}
	}()

	srv := web.NewServer(web.Config{Pool: d.Pool, Logger: logger})
	if err := srv.Listen(*listen); err != nil {
		return err
	}
	ws, err := wf.start(ctx, env, d, db.dataDir, logger)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	// Shutdown in order: HTTP first (no new work), then the workers (jobs
	// in flight finish), then the database (deferred above).
	defer stopWorkers(ws, logger)
	logger.Info("onceplan is serving", "url", "http://"+srv.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return err
	}
	return <-errc
}
