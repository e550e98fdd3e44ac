package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/onceplan/onceplan/internal/app"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// workerFlags are the flags of every command that runs workers.
type workerFlags struct {
	providers listFlag
	opts      app.WorkerOptions
}

func (w *workerFlags) register(fs *flag.FlagSet) {
	fs.Var(&w.providers, "provider", "NAME=URL of a provider, repeatable (default $ONCEPLAN_PROVIDERS, else outbox=maildir://DATA-DIR/outbox)")
	fs.DurationVar(&w.opts.OwnerTimeout, "owner-timeout", 30*time.Second, "a worker process silent this long is dead: its in-flight effects are recovered and its targets requeued")
	fs.DurationVar(&w.opts.MaintenanceInterval, "maintenance-interval", 10*time.Second, "how often recovery, completion and scheduled starts run")
	fs.DurationVar(&w.opts.JobTimeout, "job-timeout", 2*time.Minute, "the longest one effect (render, wait, call, record) may take")
	fs.DurationVar(&w.opts.RescueAfter, "rescue-after", 3*time.Minute, "River rescues a job still running after this long (must exceed --job-timeout)")
	fs.IntVar(&w.opts.WorkersPerQueue, "workers-per-queue", 16, "effects one process works on at once per provider (1-10000); a provider's concurrency still bounds its calls")
}

// workerPoolConns is the database pool of a process that runs workers
// (serve, worker): pgxpool's default (4 on 2 cores) starves River's
// producers, the executor's batches, maintenance and, in serve, the UI.
// The executor opens a few more of its own for its write batches
// (executor.newWritePool).
const workerPoolConns = 40

// check refuses flag values that cannot work, before anything starts.
func (w *workerFlags) check() error {
	if n := w.opts.WorkersPerQueue; n < 1 || n > 10_000 {
		return fmt.Errorf("--workers-per-queue %d: want a number from 1 to 10000", n)
	}
	return nil
}

// start builds the providers and the workers on d and starts them.
func (w *workerFlags) start(ctx context.Context, env Env, d *app.DB, dataDir string, logger *slog.Logger) (*app.Workers, error) {
	reg, err := app.Providers(app.ProviderOptions{Flags: w.providers, Env: env.Getenv("ONCEPLAN_PROVIDERS"), DataDir: dataDir})
	if err != nil {
		return nil, err
	}
	ws, err := app.NewWorkers(d, reg, w.opts, logger)
	if err != nil {
		reg.Close()
		return nil, err
	}
	if err := ws.Runner.Start(ctx); err != nil {
		reg.Close()
		return nil, err
	}
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		logger.Info("provider", "name", name, "kind", p.Kind(), "url", p.String())
	}
	return ws, nil
}

// stopWorkers stops workers softly (jobs in flight finish), then hard.
func stopWorkers(ws *app.Workers, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ws.Stop(ctx); err != nil {
		logger.Error("stopping the workers", "err", err)
	}
}
