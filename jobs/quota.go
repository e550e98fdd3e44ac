package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs/riverdb"
)

// A provider over quota: its queue is paused for every process until a
// time, and a job resumes it then (so a restart does not forget it).
//
// When the provider names its wait (Retry-After, Resend's
// ratelimit-reset), the pause lasts exactly that. When it names none
// (Postmark's 429: a quota verdict whose RetryAfter is 0), the pause
// backs off: QuotaBackoffStart first, then twice the previous pause while
// quota answers keep coming, at most QuotaBackoffMax, and from the start
// again once the provider accepted a message after the previous pause.
//
// The sequence needs no table of its own: its state is the pauses. Each
// resume job records its pause's length and the ledger's newest effect id
// when the pause began (ResumeQueueArgs); the next pause, in whichever
// worker process meets the next 429, reads the queue's latest resume job
// and asks the ledger whether an attempt begun since then went done.
// Pausing and resuming a queue take one advisory lock, so that the
// processes decide one at a time.

// Defaults of Config.QuotaBackoffStart and QuotaBackoffMax: a second,
// and never longer than the flat pause the backoff replaces.
const (
	DefaultQuotaBackoffStart = time.Second
	DefaultQuotaBackoffMax   = provider.DefaultQuotaRetryAfter
)

// quotaLock is the first key of the advisory lock (with the queue's
// hash as the second) under which a queue is paused or resumed.
const quotaLock = 0x6f6e7175 // "onqu"

// ResumeQueueArgs resumes a provider's queue that a quota answer paused.
// It is a job, so the resume survives any process restart. It is
// inserted to run at once and waits for Until by snoozing: River makes a
// job scheduled for later available only on its scheduler's rounds
// (every 5 s, on the elected leader), which would stretch a one-second
// pause to five, while a snoozed job is fetched once its time has come
// (within the producers' one-second poll).
type ResumeQueueArgs struct {
	Queue string `json:"queue"`
	// Until is when the pause ends. Zero (a job inserted before Until
	// was recorded): when the job runs.
	Until time.Time `json:"until,omitzero"`
	// BackoffMS is the pause's length in milliseconds when the provider
	// named no wait and the pause backed off; 0 for a wait the provider
	// named.
	BackoffMS int64 `json:"backoff_ms,omitempty"`
	// EffectMark is the ledger's newest effect id when the pause began:
	// an attempt after it that went done is a message the provider
	// accepted since, and the next backoff starts short again.
	EffectMark int64 `json:"effect_mark,omitempty"`
}

// Kind is River's name for the job kind.
func (ResumeQueueArgs) Kind() string { return riverdb.ResumeQueueKind }

// InsertOpts puts the resume on the maintenance queue (never paused).
func (ResumeQueueArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue}
}

// PauseProvider pauses a provider's queue for every process until until,
// and inserts the job that resumes it. An until that is not in the future
// says the provider named no wait: the pause then backs off (see above).
func (r *Runner) PauseProvider(ctx context.Context, name string, until time.Time) error {
	queue := QueueFor(name)
	var args ResumeQueueArgs
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if err := lockQueue(ctx, tx, queue); err != nil {
			return err
		}
		now := time.Now()
		if until.After(now) {
			args = ResumeQueueArgs{Queue: queue, Until: until}
		} else {
			var err error
			if args, err = r.backoff(ctx, tx, name, queue, now); err != nil {
				return err
			}
		}
		if err := r.client.QueuePauseTx(ctx, tx, queue, nil); err != nil {
			return err
		}
		if args.Queue == "" {
			return nil
		}
		_, err := r.client.InsertTx(ctx, tx, args, nil)
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case args.Queue == "":
		r.cfg.Logger.Warn("provider over quota again while its queue is paused: the pause stands", "provider", name)
	case args.BackoffMS > 0:
		r.cfg.Logger.Warn("provider over quota, no wait named: its queue is paused, backing off", "provider", name,
			"until", args.Until, "pause", time.Duration(args.BackoffMS)*time.Millisecond)
	default:
		r.cfg.Logger.Warn("provider over quota: its queue is paused", "provider", name, "until", args.Until)
	}
	return nil
}

// backoff chooses the pause for a quota answer that named no wait. It
// returns zero args when the queue is paused already (another answer of
// the same burst, from a call that left before the pause): that pause
// stands, and growing it once per call in flight would make a burst of
// four calls a pause sixteen times as long.
func (r *Runner) backoff(ctx context.Context, tx pgx.Tx, name, queue string, now time.Time) (ResumeQueueArgs, error) {
	var pending bool
	if err := tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM river_job WHERE kind = $1 AND args ->> 'queue' = $2
		               AND state NOT IN ('completed', 'cancelled', 'discarded'))`,
		riverdb.ResumeQueueKind, queue).Scan(&pending); err != nil || pending {
		return ResumeQueueArgs{}, err
	}
	d := r.cfg.QuotaBackoffStart
	var prevMS, mark int64
	err := tx.QueryRow(ctx, `
		SELECT coalesce((args ->> 'backoff_ms')::bigint, 0), coalesce((args ->> 'effect_mark')::bigint, 0)
		FROM river_job WHERE kind = $1 AND args ->> 'queue' = $2 AND state = 'completed'
		ORDER BY id DESC LIMIT 1`, riverdb.ResumeQueueKind, queue).Scan(&prevMS, &mark)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ResumeQueueArgs{}, err
	}
	if prevMS > 0 {
		// Only attempts begun after the previous pause began can say the
		// provider took messages again; they are few while it refuses
		// (the queue is paused, or its calls get 429s), and the search
		// stops at the first.
		var accepted bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM effect_attempt() e JOIN frozen_plan() p ON p.id = e.plan_id
			               WHERE e.id > $1 AND e.state = 'done' AND p.provider = $2)`, mark, name).Scan(&accepted); err != nil {
			return ResumeQueueArgs{}, err
		}
		if !accepted {
			d = 2 * time.Duration(prevMS) * time.Millisecond
		}
	}
	d = min(max(d, r.cfg.QuotaBackoffStart), r.cfg.QuotaBackoffMax)
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(e.id), 0) FROM effect_attempt() e`).Scan(&mark); err != nil {
		return ResumeQueueArgs{}, err
	}
	return ResumeQueueArgs{Queue: queue, Until: now.Add(d), BackoffMS: d.Milliseconds(), EffectMark: mark}, nil
}

// lockQueue takes the advisory lock of queue's pauses until tx ends.
func lockQueue(ctx context.Context, tx pgx.Tx, queue string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, quotaLock, queue)
	return err
}

type resumeQueueWorker struct {
	river.WorkerDefaults[ResumeQueueArgs]
	pool *pgxpool.Pool
}

// Work waits for the pause's end, then resumes the queue — unless a later
// pause of it (a wait named meanwhile that ends after this one) has a
// resume of its own still to run: that one ends the pause. The job is
// completed in the resume's transaction, so that a quota answer right
// after the resume never takes it for a pause still to end (which would
// leave the queue paused with nothing to resume it).
func (w *resumeQueueWorker) Work(ctx context.Context, job *river.Job[ResumeQueueArgs]) error {
	until := job.Args.Until
	if until.IsZero() {
		until = job.ScheduledAt
	}
	if wait := time.Until(until); wait > 0 {
		return river.JobSnooze(wait)
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := lockQueue(ctx, tx, job.Args.Queue); err != nil {
			return err
		}
		var later bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM river_job WHERE kind = $1 AND args ->> 'queue' = $2 AND id <> $3
			               AND state NOT IN ('completed', 'cancelled', 'discarded')
			               AND coalesce((args ->> 'until')::timestamptz, scheduled_at) > $4)`,
			riverdb.ResumeQueueKind, job.Args.Queue, job.ID, until).Scan(&later); err != nil {
			return err
		}
		if !later {
			if err := client.QueueResumeTx(ctx, tx, job.Args.Queue, nil); err != nil {
				return err
			}
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}
