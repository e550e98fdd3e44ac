package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/jobs/riverdb"
)

// A provider over quota: its queue is paused for every process until a
// time, and a job resumes it then (so a restart does not forget it).
// Pausing and resuming a queue take one advisory lock, so that the
// processes decide one at a time.

// quotaLock is the first key of the advisory lock (with the queue's
// hash as the second) under which a queue is paused or resumed.
const quotaLock = 0x6f6e7175 // "onqu"

// ResumeQueueArgs resumes a provider's queue that a quota answer paused.
// It is a job, so the resume survives any process restart. It is
// inserted to run at once and waits for Until by snoozing: River makes a
// job scheduled for later available only on its scheduler's rounds
// (every 5 s, on the elected leader), which would stretch a one-second
// pause to five, while a snooze comes back at its time.
type ResumeQueueArgs struct {
	Queue string `json:"queue"`
	// Until is when the pause ends. Zero (a job inserted before Until
	// was recorded): when the job runs.
	Until time.Time `json:"until,omitzero"`
}

// Kind is River's name for the job kind.
func (ResumeQueueArgs) Kind() string { return riverdb.ResumeQueueKind }

// InsertOpts puts the resume on the maintenance queue (never paused).
func (ResumeQueueArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue}
}

// PauseProvider pauses a provider's queue for every process until until,
// and inserts the job that resumes it.
func (r *Runner) PauseProvider(ctx context.Context, name string, until time.Time) error {
	queue := QueueFor(name)
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if err := lockQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := r.client.QueuePauseTx(ctx, tx, queue, nil); err != nil {
			return err
		}
		_, err := r.client.InsertTx(ctx, tx, ResumeQueueArgs{Queue: queue, Until: until}, nil)
		return err
	})
	if err != nil {
		return err
	}
	r.cfg.Logger.Warn("provider over quota: its queue is paused", "provider", name, "until", until)
	return nil
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
