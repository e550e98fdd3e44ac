package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/provider"
)

// MaintenanceQueue runs recovery, scheduled starts, completion and queue
// resumes. It is never paused by a provider's quota.
const MaintenanceQueue = "onceplan_maintenance"

// Config configures a Runner. Zero durations take the defaults shown.
type Config struct {
	Pool      *pgxpool.Pool
	Providers *provider.Registry
	Approval  *approval.Service
	Logger    *slog.Logger

	// OwnerTimeout: a process silent this long is dead; its pending
	// attempts are recovered and its targets requeued. Default 30s.
	OwnerTimeout time.Duration
	// HeartbeatInterval: how often this process says it is alive.
	// Default OwnerTimeout/6.
	HeartbeatInterval time.Duration
	// MaintenanceInterval: how often recovery, completion and scheduled
	// starts run. Default 10s.
	MaintenanceInterval time.Duration
	// JobTimeout bounds one effect job (render, wait, call, record). A
	// call cut off by it is recorded as what it is (unknown when the
	// request had left). Default 2m.
	JobTimeout time.Duration
	// RescueAfter: River rescues a job still "running" after this long
	// (its process died). River's default is an hour, far too long to
	// leave a campaign stuck; too short and a slow but live job runs a
	// second time — harmless here, because the second run's claim finds
	// the first run's ledger row. It must exceed JobTimeout. Our own
	// recovery does not wait for it: a dead owner's targets are requeued
	// after OwnerTimeout. Default JobTimeout + 1m.
	RescueAfter time.Duration
	// MaxAttempts bounds retries of a temporary failure; a target that
	// exhausts them stays failed and visible. Default 8.
	MaxAttempts int
	// Workers per provider queue. Default 16; the provider's own
	// concurrency setting (4 by default) still bounds calls in flight, so
	// more workers than that mostly wait for the provider. They are not
	// free either: the ledger's group commits get bigger and cheaper per
	// effect with more workers, at the price of latency (docs/BENCHMARKS.md:
	// 16 → 0.13×, 100 → ≈ 0.25×, 1,000 → ≈ 0.4× bare River with a no-op
	// provider), so raise it with a fast provider and a high concurrency.
	WorkersPerQueue int
	// PausedSnooze: how long a paused campaign's job waits before it
	// looks again. Default 5s.
	PausedSnooze time.Duration
	// FetchCooldown is River's minimum time between fetches of one queue.
	// River's default (100ms) caps a queue at WorkersPerQueue/0.1s jobs
	// per second whatever the machine; LISTEN/NOTIFY wakes producers at
	// once, so a short cooldown costs little when idle. Default 10ms.
	FetchCooldown time.Duration
	// InsertOnly makes a client that only enqueues (serve with --no-workers).
	InsertOnly bool
}

// Runner is this process's River client with Onceplan's workers.
type Runner struct {
	cfg       Config
	client    *river.Client[pgx.Tx]
	exec      *executor.Executor
	enqueuer  *Enqueuer
	stopBeat  context.CancelFunc
	beatDone  chan struct{}
	maintDone chan struct{}
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OwnerTimeout == 0 {
		c.OwnerTimeout = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.OwnerTimeout / 6
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = 10 * time.Second
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = 2 * time.Minute
	}
	if c.RescueAfter == 0 {
		c.RescueAfter = c.JobTimeout + time.Minute
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 8
	}
	if c.WorkersPerQueue == 0 {
		c.WorkersPerQueue = 16
	}
	if c.FetchCooldown == 0 {
		c.FetchCooldown = 10 * time.Millisecond
	}
}

// NewRunner builds the River client, the executor and the workers.
func NewRunner(cfg Config) (*Runner, error) {
	cfg.defaults()
	if cfg.RescueAfter <= cfg.JobTimeout {
		return nil, fmt.Errorf("the rescue delay (%s) must exceed the job timeout (%s)", cfg.RescueAfter, cfg.JobTimeout)
	}
	r := &Runner{cfg: cfg}
	rc := &river.Config{
		Logger: cfg.Logger.With("component", "river"),
		// Onceplan does not rely on River's retention for correctness: the
		// ledger, not job uniqueness, makes each effect happen once.
		CompletedJobRetentionPeriod: 24 * time.Hour,
		// River's nightly REINDEX CONCURRENTLY needs the table's owner
		// before PostgreSQL 17, and Onceplan's processes run as an
		// application role that owns nothing (least privilege): leave
		// reindexing to the operator's maintenance, as the README says.
		ReindexerIndexNames: []string{},
	}
	if !cfg.InsertOnly {
		exec, err := executor.New(executor.Config{
			Pool: cfg.Pool, Providers: cfg.Providers, Logger: cfg.Logger,
			OwnerTimeout: cfg.OwnerTimeout, PausedSnooze: cfg.PausedSnooze, Pauser: r, Requeuer: r, QueueOf: QueueFor,
		})
		if err != nil {
			return nil, err
		}
		r.exec = exec
		workers := river.NewWorkers()
		river.AddWorker(workers, &effectWorker{exec: exec, timeout: cfg.JobTimeout})
		river.AddWorker(workers, &resumeQueueWorker{})
		queues := map[string]river.QueueConfig{MaintenanceQueue: {MaxWorkers: 2}}
		for _, name := range cfg.Providers.Names() {
			queues[QueueFor(name)] = river.QueueConfig{MaxWorkers: cfg.WorkersPerQueue}
		}
		rc.ID = exec.Owner() // River records it in attempted_by: how recovery tells a dead process's jobs
		rc.Workers = workers
		rc.Queues = queues
		rc.JobTimeout = cfg.JobTimeout
		rc.RescueStuckJobsAfter = cfg.RescueAfter
		rc.MaxAttempts = cfg.MaxAttempts
		rc.RetryPolicy = &retryPolicy{}
		rc.FetchCooldown = cfg.FetchCooldown
		// A fallback only: River's producers are woken by LISTEN/NOTIFY
		// when jobs are inserted or a queue changes, so polling every
		// second costs one cheap query per queue and catches a missed
		// notification within a second.
		rc.FetchPollInterval = time.Second
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, err
	}
	r.client = client
	r.enqueuer = NewEnqueuer(client)
	r.enqueuer.OwnerTimeout = cfg.OwnerTimeout
	return r, nil
}

// Client is the River client (for enqueueing and River's UI).
func (r *Runner) Client() *river.Client[pgx.Tx] { return r.client }

// Enqueuer enqueues plans' jobs on this client.
func (r *Runner) Enqueuer() *Enqueuer { return r.enqueuer }

// Executor is this process's executor (nil for an insert-only runner).
func (r *Runner) Executor() *executor.Executor { return r.exec }

// Start says this process is alive, then starts working jobs.
func (r *Runner) Start(ctx context.Context) error {
	if r.exec == nil {
		return nil
	}
	if err := r.exec.Heartbeat(ctx); err != nil {
		return fmt.Errorf("registering this worker: %w", err)
	}
	beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stopBeat, r.beatDone = cancel, make(chan struct{})
	go func() {
		defer close(r.beatDone)
		t := time.NewTicker(r.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
				if err := r.exec.Heartbeat(beatCtx); err != nil && beatCtx.Err() == nil {
					r.cfg.Logger.Warn("heartbeat failed", "err", err)
				}
			}
		}
	}()
	r.maintDone = make(chan struct{})
	go r.maintainLoop(beatCtx)
	return r.client.Start(ctx)
}

// maintainLoop runs a maintenance round every MaintenanceInterval in every
// worker process, one process at a time (an advisory lock). It does not
// use River's periodic jobs: those run on River's elected leader, and after
// the leader is killed a new one is elected only when its lease expires —
// recovery would wait on that.
func (r *Runner) maintainLoop(ctx context.Context) {
	defer close(r.maintDone)
	t := time.NewTicker(r.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		if err := r.maintainOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("maintenance", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maintenanceLock serialises maintenance rounds across processes.
const maintenanceLock = 0x6f6e63656d61696e // "oncemain"

func (r *Runner) maintainOnce(ctx context.Context) error {
	conn, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(maintenanceLock)).Scan(&got); err != nil || !got {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(maintenanceLock))
	return r.Maintain(ctx)
}

// Stop lets jobs in flight finish (soft stop), cancels them if ctx ends
// first (hard stop), then retires this process.
func (r *Runner) Stop(ctx context.Context) error {
	if r.exec == nil {
		return nil
	}
	err := r.client.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		hard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = r.client.StopAndCancel(hard)
	}
	r.stopBeat()
	<-r.beatDone
	<-r.maintDone
	r.exec.Close()
	if err == nil {
		err = r.exec.Retire(context.WithoutCancel(ctx))
	}
	return err
}

// PauseProvider pauses a provider's queue for every process until until,
// and schedules its resume as a job (so a restart does not forget it).
func (r *Runner) PauseProvider(ctx context.Context, name string, until time.Time) error {
	queue := QueueFor(name)
	if err := r.client.QueuePause(ctx, queue, nil); err != nil {
		return err
	}
	r.cfg.Logger.Warn("provider over quota: its queue is paused", "provider", name, "until", until)
	_, err := r.client.Insert(ctx, ResumeQueueArgs{Queue: queue}, &river.InsertOpts{ScheduledAt: until})
	return err
}

// RequeueTarget enqueues one plan target again, unless a live job has it
// (recovery freed its key). A campaign that completed in the meantime runs
// again, or its gate would turn the new job away and the target would be
// forgotten.
func (r *Runner) RequeueTarget(ctx context.Context, p plan.Plan, ordinal int, key string) error {
	return pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		c, err := plan.LockCampaign(ctx, tx, p.CampaignID)
		if err != nil {
			return err
		}
		if c.PlanID != p.ID {
			return nil // a newer version runs its own jobs
		}
		n, err := r.enqueuer.EnqueueTargets(ctx, tx, p, []int{ordinal})
		if err != nil || n == 0 || c.State != plan.StateCompleted {
			return err
		}
		return plan.SetState(ctx, tx, c.ID, plan.StateRunning)
	})
}

// retryPolicy backs off 1s, 2s, 4s … capped at 5 minutes: River's default
// (attempt^4 seconds) leaves a temporarily failing target waiting hours.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	d := time.Second << min(job.Attempt, 9)
	return time.Now().Add(min(d, 5*time.Minute))
}

// SetApproval gives maintenance the approval service (built after the
// runner, since it enqueues through the runner's client).
func (r *Runner) SetApproval(s *approval.Service) { r.cfg.Approval = s }
