package jobs

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/provider"
)

// Defaults of Config. The owner timeout and the paused snooze are the
// executor's (executor.DefaultOwnerTimeout, executor.DefaultPausedSnooze):
// Config passes them on to it.
const (
	// HeartbeatsPerOwnerTimeout: the heartbeat interval defaults to
	// OwnerTimeout divided by this, so a live process that misses a beat or
	// two is still far from being taken for dead.
	HeartbeatsPerOwnerTimeout = 6
	// DefaultMaintenanceInterval: how often recovery, completion and
	// scheduled starts run.
	DefaultMaintenanceInterval = 10 * time.Second
	// DefaultJobTimeout bounds one effect job.
	DefaultJobTimeout = 2 * time.Minute
	// DefaultRescueMargin: RescueAfter defaults to JobTimeout plus this.
	DefaultRescueMargin = time.Minute
	// DefaultMaxAttempts bounds the retries of a temporary failure.
	DefaultMaxAttempts = executor.DefaultMaxAttempts
	// DefaultWorkersPerQueue: workers per provider queue.
	DefaultWorkersPerQueue = 16
	// MaxWorkersPerQueue is the most workers a queue may have (River's
	// bound).
	MaxWorkersPerQueue = river.QueueNumWorkersMax
	// DefaultFetchCooldown is River's minimum time between fetches of one
	// queue, for Onceplan.
	DefaultFetchCooldown = 10 * time.Millisecond
	// DefaultNotifyMaxAttempts bounds the tries of one notification:
	// with DefaultNotifyRetryBase, the last comes about half an hour after
	// the first.
	DefaultNotifyMaxAttempts = 12
	// DefaultNotifyRetryBase: a notification's first retry waits this
	// long, each next one twice as long, at most NotifyRetryMax.
	DefaultNotifyRetryBase = time.Second
	// NotifyRetryMax is the longest wait between two tries of a
	// notification.
	NotifyRetryMax = 10 * time.Minute
)

// fetchPollInterval is how often River's producers poll their queue as a
// fallback to LISTEN/NOTIFY; a fetch cooldown may not exceed it.
const fetchPollInterval = time.Second

// Config configures a Runner. Zero values take the defaults named on each
// field (WithDefaults); Validate says whether the result can work.
type Config struct {
	Pool      *pgxpool.Pool
	Providers *provider.Registry
	Logger    *slog.Logger

	// OwnerTimeout: a process silent this long is dead; its pending
	// attempts are recovered and its targets requeued. Default
	// executor.DefaultOwnerTimeout.
	OwnerTimeout time.Duration
	// HeartbeatInterval: how often this process says it is alive; less
	// than OwnerTimeout. Default OwnerTimeout/HeartbeatsPerOwnerTimeout.
	HeartbeatInterval time.Duration
	// MaintenanceInterval: how often recovery, completion and scheduled
	// starts run. Default DefaultMaintenanceInterval.
	MaintenanceInterval time.Duration
	// JobTimeout bounds one effect job (render, wait, call, record). A
	// call cut off by it is recorded as what it is (unknown when the
	// request had left). Default DefaultJobTimeout.
	JobTimeout time.Duration
	// RescueAfter: River rescues a job still "running" after this long
	// (its process died). River's default is an hour, far too long to
	// leave a campaign stuck; too short and a slow but live job runs a
	// second time — harmless here, because the second run's claim finds
	// the first run's ledger row. It must exceed JobTimeout. Our own
	// recovery does not wait for it: a dead owner's targets are requeued
	// after OwnerTimeout. Default JobTimeout + DefaultRescueMargin, so it
	// follows a JobTimeout that is set.
	RescueAfter time.Duration
	// MaxAttempts bounds retries of a temporary failure; a target that
	// exhausts them stays failed and visible. Default DefaultMaxAttempts.
	MaxAttempts int
	// Workers per provider queue, 1 to MaxWorkersPerQueue. Default
	// DefaultWorkersPerQueue; the provider's own concurrency setting (4 by
	// default) still bounds calls in flight, so more workers than that
	// mostly wait for the provider. They are not free either: the ledger's
	// group commits get bigger and cheaper per effect with more workers,
	// at the price of latency (with a no-op provider the executor gained
	// on bare River as workers were added: docs/BENCHMARKS.md), so raise
	// it with a fast provider and a high concurrency.
	WorkersPerQueue int
	// PausedSnooze: how long a paused campaign's job waits before it
	// looks again. Default executor.DefaultPausedSnooze.
	PausedSnooze time.Duration
	// FetchCooldown is River's minimum time between fetches of one queue.
	// River's default (100ms) caps a queue at WorkersPerQueue/0.1s jobs
	// per second whatever the machine; LISTEN/NOTIFY wakes producers at
	// once, so a short cooldown costs little when idle. Default
	// DefaultFetchCooldown.
	FetchCooldown time.Duration
	// QuotaBackoffStart is the first pause of a provider's queue after a
	// quota answer that names no wait (Postmark's 429); each further one
	// in a row pauses twice as long as the last, at most QuotaBackoffMax,
	// and a message the provider accepts starts the sequence again
	// (quota.go). A wait the provider names is taken as it is. Defaults
	// DefaultQuotaBackoffStart and DefaultQuotaBackoffMax.
	QuotaBackoffStart time.Duration
	QuotaBackoffMax   time.Duration
	// InsertOnly makes a client that only enqueues (serve with --no-workers).
	InsertOnly bool
	// PublicURL is where the messages' unsubscribe links point (the
	// executor's Config.PublicURL), and the base of the notifications'
	// links. Default unsubscribe.DefaultPublicURL.
	PublicURL string

	// Notifiers tell people when a campaign needs them (--notify; package
	// notify). Without any, no decision is announced and this process
	// works no notification job: give every process the same ones.
	Notifiers *notify.Registry
	// NotifyWindow: at most one attention message (unknown, stranded,
	// failed targets) per campaign per window. Default
	// notify.DefaultWindow.
	NotifyWindow time.Duration
	// NotifyWait: a growth of a campaign's targets that need attention
	// gathers this long before its message goes out (a burst is one
	// message). Default NotifyWindow/notify.WaitPerWindow. The campaigns
	// are scanned every MaintenanceInterval, or every NotifyWait/2 when
	// that is longer.
	NotifyWait time.Duration
	// NotifyMaxAttempts bounds the tries of one notification. Default
	// DefaultNotifyMaxAttempts.
	NotifyMaxAttempts int
	// NotifyRetryBase is the wait before a notification's first retry.
	// Default DefaultNotifyRetryBase.
	NotifyRetryBase time.Duration
}

// WithDefaults returns c with its zero values replaced by their defaults.
// Derived defaults follow what they derive from: the heartbeat interval
// from OwnerTimeout, RescueAfter from JobTimeout.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.OwnerTimeout = cmp.Or(c.OwnerTimeout, executor.DefaultOwnerTimeout)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.OwnerTimeout/HeartbeatsPerOwnerTimeout)
	c.MaintenanceInterval = cmp.Or(c.MaintenanceInterval, DefaultMaintenanceInterval)
	c.JobTimeout = cmp.Or(c.JobTimeout, DefaultJobTimeout)
	c.RescueAfter = cmp.Or(c.RescueAfter, c.JobTimeout+DefaultRescueMargin)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.WorkersPerQueue = cmp.Or(c.WorkersPerQueue, DefaultWorkersPerQueue)
	c.PausedSnooze = cmp.Or(c.PausedSnooze, executor.DefaultPausedSnooze)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, DefaultFetchCooldown)
	c.QuotaBackoffStart = cmp.Or(c.QuotaBackoffStart, DefaultQuotaBackoffStart)
	c.QuotaBackoffMax = cmp.Or(c.QuotaBackoffMax, DefaultQuotaBackoffMax)
	c.NotifyWindow = cmp.Or(c.NotifyWindow, notify.DefaultWindow)
	c.NotifyWait = cmp.Or(c.NotifyWait, c.NotifyWindow/notify.WaitPerWindow)
	c.NotifyMaxAttempts = cmp.Or(c.NotifyMaxAttempts, DefaultNotifyMaxAttempts)
	c.NotifyRetryBase = cmp.Or(c.NotifyRetryBase, DefaultNotifyRetryBase)
	return c
}

// Validate refuses a Config, defaults applied (WithDefaults), that cannot
// work: a duration that is not positive, a heartbeat no more frequent than
// the owner timeout, a rescue that could cut off a job within its
// timeout, a number of workers or attempts out of range. The error is a
// *ConfigError naming the first field at fault.
func (c Config) Validate() error {
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"OwnerTimeout", c.OwnerTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"MaintenanceInterval", c.MaintenanceInterval},
		{"JobTimeout", c.JobTimeout},
		{"RescueAfter", c.RescueAfter},
		{"PausedSnooze", c.PausedSnooze},
		{"QuotaBackoffStart", c.QuotaBackoffStart},
		{"QuotaBackoffMax", c.QuotaBackoffMax},
		{"NotifyWindow", c.NotifyWindow},
		{"NotifyWait", c.NotifyWait},
		{"NotifyRetryBase", c.NotifyRetryBase},
	} {
		if d.value <= 0 {
			return &ConfigError{Field: d.field, Value: d.value, Want: "a positive duration"}
		}
	}
	switch {
	case c.HeartbeatInterval >= c.OwnerTimeout:
		return &ConfigError{Field: "HeartbeatInterval", Value: c.HeartbeatInterval, Want: "less than %s", Other: "OwnerTimeout", OtherValue: c.OwnerTimeout}
	case c.QuotaBackoffMax < c.QuotaBackoffStart:
		return &ConfigError{Field: "QuotaBackoffMax", Value: c.QuotaBackoffMax, Want: "at least %s", Other: "QuotaBackoffStart", OtherValue: c.QuotaBackoffStart}
	case c.RescueAfter <= c.JobTimeout:
		return &ConfigError{Field: "RescueAfter", Value: c.RescueAfter, Want: "more than %s", Other: "JobTimeout", OtherValue: c.JobTimeout}
	case c.MaxAttempts < 1:
		return &ConfigError{Field: "MaxAttempts", Value: c.MaxAttempts, Want: "a positive number"}
	case c.NotifyMaxAttempts < 1:
		return &ConfigError{Field: "NotifyMaxAttempts", Value: c.NotifyMaxAttempts, Want: "a positive number"}
	case c.WorkersPerQueue < 1 || c.WorkersPerQueue > MaxWorkersPerQueue:
		return &ConfigError{Field: "WorkersPerQueue", Value: c.WorkersPerQueue, Want: fmt.Sprintf("a number from 1 to %d", MaxWorkersPerQueue)}
	case c.FetchCooldown < river.FetchCooldownMin || c.FetchCooldown > fetchPollInterval:
		return &ConfigError{Field: "FetchCooldown", Value: c.FetchCooldown, Want: fmt.Sprintf("a duration from %s to %s", river.FetchCooldownMin, fetchPollInterval)}
	}
	return nil
}

// ConfigError is Validate's refusal: a Config field whose value cannot work.
type ConfigError struct {
	// Field is the Config field at fault, such as "RescueAfter".
	Field string
	// Value is its value, defaults applied.
	Value any
	// Want says what would work; a %s in it stands for Other.
	Want string
	// Other is the field the value is compared with, if any, and
	// OtherValue its value.
	Other      string
	OtherValue any
}

// Error names the fields as Config does.
func (e *ConfigError) Error() string {
	return "jobs: " + e.Message(func(field string) string { return field })
}

// Message is the refusal in one sentence, each field called name(field):
// a command line names its flags.
func (e *ConfigError) Message(name func(field string) string) string {
	want := e.Want
	if e.Other != "" {
		want = fmt.Sprintf(e.Want, fmt.Sprintf("%s %v", name(e.Other), e.OtherValue))
	}
	return fmt.Sprintf("%s %v: want %s", name(e.Field), e.Value, want)
}
