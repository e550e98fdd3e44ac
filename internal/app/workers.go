package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
)

// ProviderOptions say which providers this process can send through.
type ProviderOptions struct {
	// Flags are NAME=URL items (--provider, repeatable).
	Flags []string
	// Env is ONCEPLAN_PROVIDERS: NAME=URL items separated by commas.
	Env string
	// DataDir hosts the default maildir outbox.
	DataDir string
	// DB, when set, paces the providers whose rate limit is their
	// account's through the database, shared with every other process
	// (provider.Registry.PaceThrough). A process that only probes (the
	// audit) leaves it nil.
	DB onceplan.DB
}

// Providers builds the registry: the flags, else the environment, else
// the embedded default outbox=maildir://<data-dir>/outbox.
func Providers(opts ProviderOptions) (*provider.Registry, error) {
	items := opts.Flags
	if len(items) == 0 && strings.TrimSpace(opts.Env) != "" {
		for _, item := range strings.Split(opts.Env, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
	}
	if len(items) == 0 {
		dir, err := filepath.Abs(filepath.Join(opts.DataDir, "outbox"))
		if err != nil {
			return nil, err
		}
		items = []string{"outbox=maildir://" + dir}
	}
	var ps []provider.Provider
	for _, item := range items {
		p, err := provider.ParseFlag(item)
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	if err != nil {
		for _, q := range ps {
			q.Close()
		}
		return nil, err
	}
	if opts.DB != nil {
		reg.PaceThrough(opts.DB)
	}
	return reg, nil
}

// WorkerOptions tune recovery: the jobs.Config fields a command line sets
// (serve's and worker's flags), as given. The flags' defaults are jobs'
// constants, so every field holds a value and a zero is refused, not taken
// for the default — except RescueAfter, whose zero (its flag's default)
// follows JobTimeout, as jobs.Config's derived default does.
type WorkerOptions struct {
	OwnerTimeout        time.Duration
	MaintenanceInterval time.Duration
	JobTimeout          time.Duration
	RescueAfter         time.Duration
	WorkersPerQueue     int
	// MaxAttempts bounds the tries of a target's temporary failure
	// (--max-attempts).
	MaxAttempts int
	InsertOnly  bool
	// PublicURL is where the messages' unsubscribe links point
	// (--public-url, checked by unsubscribe.ParsePublicURL). Default
	// unsubscribe.DefaultPublicURL.
	PublicURL string
	// Notifiers tell people when a campaign needs them (Notifiers;
	// none: nothing is announced).
	Notifiers *notify.Registry
	// NotifyWindow: at most one attention message per campaign per
	// window (--notify-window).
	NotifyWindow time.Duration
}

// NotifierOptions say which notifiers this process tells people through.
type NotifierOptions struct {
	// Flags are NAME=URL items (--notify, repeatable).
	Flags []string
	// Env is ONCEPLAN_NOTIFY: NAME=URL items separated by commas (a comma
	// inside a URL stays in its item: notify.SplitList).
	Env string
	// Providers are the providers a mailto: notifier may send through.
	Providers *provider.Registry
	// PublicURL is the base of the messages' links.
	PublicURL string
	// Getenv reads a webhook's hmac_secret_env= (default os.Getenv).
	Getenv func(string) string
}

// Notifiers builds the notifiers: the flags, else the environment, else
// none.
func Notifiers(opts NotifierOptions) (*notify.Registry, error) {
	items := opts.Flags
	if len(items) == 0 {
		items = notify.SplitList(opts.Env)
	}
	return notify.ParseList(items, notify.ParseOptions{Providers: opts.Providers, PublicURL: opts.PublicURL, Getenv: opts.Getenv})
}

// Config is the jobs.Config the options ask for, without a process's pool,
// providers and logger: the options' values, jobs' defaults for the rest
// (and for a zero RescueAfter).
func (o WorkerOptions) Config() jobs.Config {
	c := jobs.Config{
		OwnerTimeout: o.OwnerTimeout, MaintenanceInterval: o.MaintenanceInterval,
		JobTimeout: o.JobTimeout, RescueAfter: o.RescueAfter, WorkersPerQueue: o.WorkersPerQueue, MaxAttempts: o.MaxAttempts,
		InsertOnly: o.InsertOnly, PublicURL: o.PublicURL, Notifiers: o.Notifiers, NotifyWindow: o.NotifyWindow,
	}.WithDefaults()
	// A zero given is a value for Validate to refuse, not a request for
	// the default.
	c.OwnerTimeout, c.MaintenanceInterval, c.JobTimeout, c.WorkersPerQueue = o.OwnerTimeout, o.MaintenanceInterval, o.JobTimeout, o.WorkersPerQueue
	c.MaxAttempts = o.MaxAttempts
	c.NotifyWindow = o.NotifyWindow
	return c
}

// Validate refuses options that cannot work, by jobs.Config's own rules
// (jobs.Config.Validate), so that a command refuses them before it starts
// anything. The error is a *jobs.ConfigError.
func (o WorkerOptions) Validate() error { return o.Config().Validate() }

// Workers is a process's job machinery: the River runner with Onceplan's
// workers, and the approval service that enqueues through it.
type Workers struct {
	Runner    *jobs.Runner
	Approval  *approval.Service
	Providers *provider.Registry
	// Notifiers are the notifiers configured (the admin page lists them).
	Notifiers *notify.Registry
}

// NewWorkers wires the runner and the approval service on d.
func NewWorkers(d *DB, reg *provider.Registry, opts WorkerOptions, logger *slog.Logger) (*Workers, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("starting the workers: %w", err)
	}
	cfg := opts.Config()
	cfg.Pool, cfg.Providers, cfg.Logger = d.Pool, reg, logger
	r, err := jobs.NewRunner(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the workers: %w", err)
	}
	svc := approval.NewService(d.Pool, r.Enqueuer())
	// A campaign on a provider this deployment does not send through would
	// wait for a worker forever: the service refuses it at create and
	// submit.
	svc.Providers = reg.Names()
	// Decisions are announced to the notifiers in their own transaction
	// (nil without notifiers).
	svc.Announcer = r.Announcer()
	return &Workers{Runner: r, Approval: svc, Providers: reg, Notifiers: opts.Notifiers}, nil
}

// Stop stops the workers (soft, then hard when ctx ends) and closes the
// providers.
func (w *Workers) Stop(ctx context.Context) error {
	err := w.Runner.Stop(ctx)
	w.Providers.Close()
	return err
}
