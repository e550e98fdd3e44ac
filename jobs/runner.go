package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/plan"
)

// MaintenanceQueue runs recovery, scheduled starts, completion and queue
// resumes. It is never paused by a provider's quota.
const MaintenanceQueue = "onceplan_maintenance"

// Runner is this process's River client with Onceplan's workers.
type Runner struct {
	cfg Config
	// tools recovers single effects in doubt each maintenance round.
	tools *toolcall.Service
	// approval is the workflow maintenance drives (scheduled starts,
	// requeues, completion); set by Start, which a working runner needs.
	approval  *approval.Service
	client    *river.Client[pgx.Tx]
	exec      *executor.Executor
	enqueuer  *Enqueuer
	stopBeat  context.CancelFunc
	beatDone  chan struct{}
	maintDone chan struct{}
	// announcer and notify exist when notifiers are configured (notify.go);
	// attentionDone closes when the attention scan has stopped.
	announcer     *Announcer
	notify        *notify.Service
	attentionDone chan struct{}
}

// NewRunner builds the River client, the executor and the workers, on cfg
// with its defaults (Config.WithDefaults); it refuses a cfg that
// Config.Validate refuses.
func NewRunner(cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, tools: toolcall.NewService(cfg.Pool, toolcall.Options{Logger: cfg.Logger})}
	rc := &river.Config{
		Logger: cfg.Logger.With("component", "river"),
		// Onceplan does not rely on River's retention for correctness: the
		// ledger, not job uniqueness, makes each effect happen once.
		CompletedJobRetentionPeriod: 24 * time.Hour,
		// River's nightly REINDEX CONCURRENTLY needs the table's owner
		// before PostgreSQL 17, and Onceplan's processes run as an
		// application role that owns nothing (least privilege): leave
		// reindexing to the operator's maintenance (docs/guide/secure.md,
		// "River's reindexing and older databases").
		ReindexerIndexNames: []string{},
	}
	if !cfg.InsertOnly {
		exec, err := executor.New(executor.Config{
			Pool: cfg.Pool, Providers: cfg.Providers, Logger: cfg.Logger,
			OwnerTimeout: cfg.OwnerTimeout, PausedSnooze: cfg.PausedSnooze, Pauser: r, Requeuer: r, Alerter: r, QueueOf: QueueFor,
			PublicURL: cfg.PublicURL, MaxAttempts: cfg.MaxAttempts,
		})
		if err != nil {
			return nil, err
		}
		r.exec = exec
		workers := river.NewWorkers()
		river.AddWorker(workers, &effectWorker{exec: exec, pool: cfg.Pool, timeout: cfg.JobTimeout, maxAttempts: cfg.MaxAttempts})
		river.AddWorker(workers, &resumeQueueWorker{pool: cfg.Pool})
		queues := map[string]river.QueueConfig{MaintenanceQueue: {MaxWorkers: 2}}
		if cfg.Notifiers.Len() > 0 {
			r.notify, err = notify.NewService(notify.Config{DB: cfg.Pool, Notifiers: cfg.Notifiers, PublicURL: cfg.PublicURL,
				Window: cfg.NotifyWindow, Wait: cfg.NotifyWait, FailedForGood: r.failedForGood, Owner: exec.Owner(), Logger: cfg.Logger})
			if err != nil {
				return nil, err
			}
			river.AddWorker(workers, &announceWorker{svc: r.notify, maxAttempts: cfg.NotifyMaxAttempts})
			river.AddWorker(workers, &deliverWorker{svc: r.notify, retryBase: cfg.NotifyRetryBase})
			queues[NotifyQueue] = river.QueueConfig{MaxWorkers: notifyWorkers}
		}
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
		rc.FetchPollInterval = fetchPollInterval
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, err
	}
	r.client = client
	if cfg.Notifiers.Len() > 0 {
		r.announcer = &Announcer{client: client, maxAttempts: cfg.NotifyMaxAttempts}
	}
	r.enqueuer = NewEnqueuer(client)
	r.enqueuer.OwnerTimeout = cfg.OwnerTimeout
	r.enqueuer.WorkersPerQueue = cfg.WorkersPerQueue
	return r, nil
}

// failedForGood is the enqueuer's FailedForGood; the notification service
// is made before the enqueuer, and scans only once the runner started.
func (r *Runner) failedForGood(ctx context.Context, db onceplan.DB, c approval.Campaign) (int, error) {
	return r.enqueuer.FailedForGood(ctx, db, c)
}

// Client is the River client (for enqueueing and River's UI).
func (r *Runner) Client() *river.Client[pgx.Tx] { return r.client }

// Enqueuer enqueues plans' jobs on this client.
func (r *Runner) Enqueuer() *Enqueuer { return r.enqueuer }

// Executor is this process's executor (nil for an insert-only runner).
func (r *Runner) Executor() *executor.Executor { return r.exec }

// Start says this process is alive, then starts working jobs, with svc
// as the workflow its maintenance drives (svc enqueues through this
// runner's client: build it on Enqueuer).
func (r *Runner) Start(ctx context.Context, svc *approval.Service) error {
	if r.exec == nil {
		return nil
	}
	if svc == nil {
		return errors.New("jobs: a working runner needs the approval service")
	}
	r.approval = svc
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
	if r.notify != nil {
		r.attentionDone = make(chan struct{})
		go r.attentionLoop(beatCtx)
	}
	return r.client.Start(ctx)
}

// maintainLoop runs a maintenance round every MaintenanceInterval in every
// worker process, one process at a time (an advisory lock). It does not
// use River's periodic jobs: those run on River's elected leader, and after
// the leader is killed a new one is elected only when its lease expires —
// recovery would wait on that.
func (r *Runner) maintainLoop(ctx context.Context) {
	r.lockedLoop(ctx, r.maintDone, r.cfg.MaintenanceInterval, maintenanceLock, "maintenance", r.Maintain)
}

// maintenanceLock serialises maintenance rounds across processes.
const maintenanceLock = 0x6f6e63656d61696e // "oncemain"

// lockedLoop runs round every interval until ctx ends, then closes done.
// A round runs only in the process holding the session advisory lock
// lock at that moment (another process's round is skipped, not queued);
// errors are logged under what.
func (r *Runner) lockedLoop(ctx context.Context, done chan struct{}, interval time.Duration, lock int64, what string, round func(context.Context) error) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.locked(ctx, lock, round); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error(what, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// locked runs f while holding the session advisory lock lock, or skips it
// when another process holds it.
func (r *Runner) locked(ctx context.Context, lock int64, f func(context.Context) error) error {
	conn, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lock).Scan(&got); err != nil || !got {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lock)
	return f(ctx)
}

// Stop lets jobs in flight finish (soft stop), cancels them if ctx ends
// first (hard stop), then retires this process.
func (r *Runner) Stop(ctx context.Context) error {
	if r.exec == nil {
		return nil
	}
	r.exec.Drain()
	err := r.client.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		hard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = r.client.StopAndCancel(hard)
	}
	r.stopBeat()
	<-r.beatDone
	<-r.maintDone
	if r.attentionDone != nil {
		<-r.attentionDone
	}
	r.exec.Close()
	if err == nil {
		err = r.exec.Retire(context.WithoutCancel(ctx))
	}
	return err
}

// RequeueTarget enqueues one plan target again after recovery freed its
// key: the workflow's decision (approval.Service.RequeueTarget), which
// also reopens a campaign that completed meanwhile.
func (r *Runner) RequeueTarget(ctx context.Context, p plan.Plan, ordinal, attempts int) error {
	return r.approval.RequeueTarget(ctx, p, ordinal, attempts)
}

// retryPolicy backs off 1s, 2s, 4s … capped at 5 minutes: River's default
// (attempt^4 seconds) leaves a temporarily failing target waiting hours.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	d := time.Second << min(job.Attempt, 9)
	return time.Now().Add(min(d, 5*time.Minute))
}
