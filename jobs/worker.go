package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/onceplan/onceplan/executor"
)

// effectWorker runs a job's planned targets through the executor. The job
// completes through River's batched completer: the ledger, not the job's
// state, is what makes the effect happen once, so completion need not share
// the settle's transaction.
type effectWorker struct {
	river.WorkerDefaults[EffectArgs]
	exec        *executor.Executor
	pool        *pgxpool.Pool
	timeout     time.Duration
	maxAttempts int
}

func (w *effectWorker) Timeout(*river.Job[EffectArgs]) time.Duration { return w.timeout }

func (w *effectWorker) Work(ctx context.Context, job *river.Job[EffectArgs]) error {
	j := executor.Job{PlanID: job.Args.PlanID, Ordinal: job.Args.Ordinal, Count: job.Args.Count, JobID: job.ID,
		LastTry: job.Attempt >= job.MaxAttempts}
	if j.Count > 1 {
		// A range's target that fails temporarily goes on a job of its
		// own (handOn), unless there are no retries to give it.
		j.LastTry = w.maxAttempts <= 1
	}
	if j.Count <= 1 {
		res, err := w.exec.Perform(ctx, j)
		if err != nil {
			return err
		}
		return verdict(res)
	}
	// A range: half the job's time for starting targets, so that the last
	// one started still has as long as a one-target job's wait and call.
	prog, err := w.exec.PerformRange(ctx, j, w.timeout/2)
	if serr := w.handOn(context.WithoutCancel(ctx), job, prog); serr != nil {
		return errors.Join(err, serr)
	}
	if err != nil {
		return err
	}
	return verdict(prog.Rest)
}

// verdict is the River answer to an executor's Result.
func verdict(res executor.Result) error {
	switch res.Action {
	case executor.Snooze:
		return river.JobSnooze(res.After)
	case executor.Retry:
		return res.Err
	default:
		return nil
	}
}

// handOn records, in one transaction, what a range job leaves to later:
// the targets it split off, each as a job of its own whose first run is
// its first retry (so it has the retries a one-target job has left); and
// the targets it did not finish, as the job's own range from then on, so
// that its snooze or retry starts there and a target's pending row still
// belongs to the job that claimed it. A job that finished everything and
// split nothing writes nothing.
func (w *effectWorker) handOn(ctx context.Context, job *river.Job[EffectArgs], prog executor.Progress) error {
	end := job.Args.Ordinal + job.Args.Count
	moved := prog.Next > job.Args.Ordinal && prog.Next < end
	split := len(prog.Split) > 0 && w.maxAttempts > 1
	if !moved && !split {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if split {
			at := retryPolicy{}.NextRetry(&rivertype.JobRow{Attempt: 1})
			params := make([]river.InsertManyParams, len(prog.Split))
			for i, o := range prog.Split {
				params[i] = river.InsertManyParams{
					Args:       EffectArgs{PlanID: job.Args.PlanID, Ordinal: o, Provider: job.Args.Provider},
					InsertOpts: &river.InsertOpts{Queue: job.Queue, ScheduledAt: at, MaxAttempts: w.maxAttempts - 1},
				}
			}
			if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
				return err
			}
		}
		if moved {
			if _, err := tx.Exec(ctx, `UPDATE river_job SET args = args || jsonb_build_object('ordinal', $2::int, 'count', $3::int)
				WHERE id = $1 AND state = 'running'`, job.ID, prog.Next, end-prog.Next); err != nil {
				return err
			}
		}
		return nil
	})
}
