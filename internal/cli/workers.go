package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// workerFlags are the flags of every command that runs workers.
type workerFlags struct {
	providers listFlag
	notifiers listFlag
	opts      app.WorkerOptions
	// publicURL is --public-url as given ("" when not).
	publicURL string
}

func (w *workerFlags) register(fs *flag.FlagSet) {
	fs.Var(&w.providers, "provider", "NAME=URL of a provider, repeatable (default $ONCEPLAN_PROVIDERS, else outbox=maildir://DATA-DIR/outbox)")
	fs.DurationVar(&w.opts.OwnerTimeout, "owner-timeout", executor.DefaultOwnerTimeout, "a worker process silent this long is dead: its in-flight effects are recovered and its targets requeued")
	fs.DurationVar(&w.opts.MaintenanceInterval, "maintenance-interval", jobs.DefaultMaintenanceInterval, "how often recovery, completion and scheduled starts run")
	fs.DurationVar(&w.opts.JobTimeout, "job-timeout", jobs.DefaultJobTimeout, "the longest one effect (render, wait, call, record) may take")
	// No fixed default: left unset, it follows --job-timeout (jobs.Config).
	fs.DurationVar(&w.opts.RescueAfter, "rescue-after", 0, fmt.Sprintf("River rescues a job still running after this long; must exceed --job-timeout (default: --job-timeout + %s)", jobs.DefaultRescueMargin))
	fs.IntVar(&w.opts.MaxAttempts, "max-attempts", jobs.DefaultMaxAttempts, "tries of a target whose sends fail temporarily (a refused connection, a 408, an SMTP 4xx) before it is given up, failed for all to see (an over-quota answer uses none)")
	fs.IntVar(&w.opts.WorkersPerQueue, "workers-per-queue", jobs.DefaultWorkersPerQueue, fmt.Sprintf("effects one process works on at once per provider (1-%d); a provider's concurrency still bounds its calls", jobs.MaxWorkersPerQueue))
	fs.Var(&w.notifiers, "notify", "NAME=URL of a notifier, repeatable (default $ONCEPLAN_NOTIFY, comma-separated): mailto:[ADDRESS,…]?provider=NAME[&from=ADDRESS] emails the users who must act through a --provider; https://host/path[?hmac_secret_env=VAR] posts Slack-compatible JSON (docs/guide/notifications.md)")
	fs.DurationVar(&w.opts.NotifyWindow, "notify-window", notify.DefaultWindow, "at most one message per campaign per window about its unknown, stranded or failed targets (a growth gathers for a tenth of it first)")
}

// registerPublicURL adds --public-url; def says what its default is for
// this command.
func (w *workerFlags) registerPublicURL(fs *flag.FlagSet, def string) {
	fs.StringVar(&w.publicURL, "public-url", "", "the absolute http(s) URL people reach onceplan serve at: the base of the one-click unsubscribe link in every message, of the links in notifications and of every link in the API's answers (approval_url; default "+def+")")
}

// workerFlagOf names the flag that sets each jobs.Config field, so that a
// refusal names what the user typed.
var workerFlagOf = map[string]string{
	"OwnerTimeout":        "--owner-timeout",
	"HeartbeatInterval":   fmt.Sprintf("the heartbeat interval (--owner-timeout/%d)", jobs.HeartbeatsPerOwnerTimeout),
	"MaintenanceInterval": "--maintenance-interval",
	"JobTimeout":          "--job-timeout",
	"RescueAfter":         "--rescue-after",
	"WorkersPerQueue":     "--workers-per-queue",
	"MaxAttempts":         "--max-attempts",
	"NotifyWindow":        "--notify-window",
	"NotifyWait":          fmt.Sprintf("the attention wait (--notify-window/%d)", notify.WaitPerWindow),
}

func workerFlagName(field string) string {
	if f, ok := workerFlagOf[field]; ok {
		return f
	}
	return field
}

// workerPoolConns is the database pool of a process that runs workers
// (serve, worker): pgxpool's default (4 on 2 cores) starves River's
// producers, the executor's batches, maintenance and, in serve, the UI.
// The executor opens a few more of its own for its write batches
// (executor.newWritePool).
const workerPoolConns = 40

// check refuses flag values that cannot work, before anything starts:
// the options' one validation (jobs.Config's), in the flags' names.
func (w *workerFlags) check() error {
	if w.publicURL != "" {
		u, err := suppression.ParsePublicURL(w.publicURL)
		if err != nil {
			return err
		}
		w.opts.PublicURL = u
	}
	err := w.opts.Validate()
	var ce *jobs.ConfigError
	if errors.As(err, &ce) {
		return errors.New(ce.Message(workerFlagName))
	}
	return err
}

// start builds the providers and the workers on d and starts them.
func (w *workerFlags) start(ctx context.Context, env Env, d *app.DB, dataDir string, logger *slog.Logger) (*app.Workers, error) {
	reg, err := app.Providers(app.ProviderOptions{Flags: w.providers, Env: env.Getenv("ONCEPLAN_PROVIDERS"), DataDir: dataDir, DB: d.Pool})
	if err != nil {
		return nil, err
	}
	if msg := ignoredProviders(w.providers, env.Getenv("ONCEPLAN_PROVIDERS")); msg != "" {
		logger.Warn(msg)
	}
	nots, err := app.Notifiers(app.NotifierOptions{Flags: w.notifiers, Env: env.Getenv("ONCEPLAN_NOTIFY"), Providers: reg,
		PublicURL: cmp.Or(w.opts.PublicURL, suppression.DefaultPublicURL), Getenv: env.Getenv})
	if err != nil {
		reg.Close()
		return nil, err
	}
	w.opts.Notifiers = nots
	ws, err := app.NewWorkers(d, reg, w.opts, logger)
	if err != nil {
		reg.Close()
		return nil, err
	}
	if err := ws.Runner.Start(ctx, ws.Approval); err != nil {
		reg.Close()
		return nil, err
	}
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		logger.Info("provider", "name", name, "kind", p.Kind(), "url", p.String())
	}
	for _, n := range nots.All() {
		logger.Info("notifier", "name", n.Name(), "kind", n.Kind(), "url", n.String(), "signed", n.Signed())
	}
	return ws, nil
}

// ignoredProviders says, when both --provider and ONCEPLAN_PROVIDERS are
// given, that the flags win and the environment's providers are not
// configured: never silently ("" otherwise).
func ignoredProviders(flags []string, env string) string {
	if len(flags) == 0 || strings.TrimSpace(env) == "" {
		return ""
	}
	return fmt.Sprintf("ONCEPLAN_PROVIDERS is set but --provider was given: the --provider flags (%d) are the providers, and ONCEPLAN_PROVIDERS (%s) is ignored; give the providers one way",
		len(flags), redactProviders(env))
}

// redactProviders names the providers of an ONCEPLAN_PROVIDERS value
// without their URLs, which may carry secrets.
func redactProviders(env string) string {
	var names []string
	for _, item := range strings.Split(env, ",") {
		if name, _, ok := strings.Cut(strings.TrimSpace(item), "="); ok && name != "" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// stopWorkers stops workers softly (jobs in flight finish), then hard.
func stopWorkers(ws *app.Workers, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ws.Stop(ctx); err != nil {
		logger.Error("stopping the workers", "err", err)
	}
}
