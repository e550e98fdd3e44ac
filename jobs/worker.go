package jobs

import (
	"context"
	"github.com/onceplan/onceplan/jobs/riverdb"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/executor"
)

// effectWorker runs one planned target through the executor. The job
// completes through River's batched completer: the ledger, not the job's
// state, is what makes the effect happen once, so completion need not share
// the settle's transaction.
type effectWorker struct {
	river.WorkerDefaults[EffectArgs]
	exec    *executor.Executor
	timeout time.Duration
}

func (w *effectWorker) Timeout(*river.Job[EffectArgs]) time.Duration { return w.timeout }

func (w *effectWorker) Work(ctx context.Context, job *river.Job[EffectArgs]) error {
	res, err := w.exec.Perform(ctx, executor.Job{
		PlanID:  job.Args.PlanID,
		Ordinal: job.Args.Ordinal,
		JobID:   job.ID,
	})
	if err != nil {
		return err
	}
	switch res.Action {
	case executor.Snooze:
		return river.JobSnooze(res.After)
	case executor.Retry:
		return res.Err
	default:
		return nil
	}
}

// ResumeQueueArgs resumes a provider's queue that a quota answer paused.
// It is a scheduled job, so the resume survives any process restart.
type ResumeQueueArgs struct {
	Queue string `json:"queue"`
}

// Kind is River's name for the job kind.
func (ResumeQueueArgs) Kind() string { return riverdb.ResumeQueueKind }

// InsertOpts puts the resume on the maintenance queue (never paused).
func (ResumeQueueArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue}
}

type resumeQueueWorker struct {
	river.WorkerDefaults[ResumeQueueArgs]
}

func (w *resumeQueueWorker) Work(ctx context.Context, job *river.Job[ResumeQueueArgs]) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	return client.QueueResume(ctx, job.Args.Queue, nil)
}
