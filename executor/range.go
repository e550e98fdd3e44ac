package executor

import (
	"context"
	"time"
)

// Progress is what PerformRange did with a job's targets.
type Progress struct {
	// Next is the first target the job has not finished: the ordinal
	// after its last when it finished them all.
	Next int
	// Rest is what the queue should do with the targets from Next on
	// (Snooze, or Retry with its error); Complete when none are left.
	Rest Result
	// Split lists the targets that failed with a temporary error on the
	// way, in order. Each is to be retried on a job of its own, so the
	// job's other targets neither wait for its backoff nor use up its
	// retries: the bound on retries stays per target.
	Split []int
}

// PerformRange executes the consecutive targets of a job (Job.Count of
// them, from Job.Ordinal on), one after the other, each as Perform does
// (DESIGN §4: its pending row is committed right before its own call,
// never ahead, so a crash leaves at most the one call in flight in doubt).
// Reading the targets and finding the plan happen once for the range.
//
// It stops at the first target that must wait (a paused campaign, a busy
// or paused provider: Rest is that Snooze, Next that target), and once it
// has worked for budget, so that a job stays well inside its timeout
// (Rest is a Snooze of 0: go on at once, Next the first target not
// started). A target that fails temporarily is split off (Split) and the
// job goes on with the next (with a provider that is down, every target
// ends up on a job of its own, retried as a one-target job is). An error
// leaves Next at the target it happened on: retrying from there finds the
// targets before settled.
func (e *Executor) PerformRange(ctx context.Context, j Job, budget time.Duration) (Progress, error) {
	started := time.Now()
	end := j.Ordinal + max(j.Count, 1)
	prog := Progress{Next: j.Ordinal}
	cp, prov, res, err := e.prepare(ctx, j)
	if err != nil || prov == nil {
		prog.Rest = res
		return prog, err
	}
	ts, err := e.batch.targets(ctx, cp.plan.ListID, j.Ordinal, end-j.Ordinal)
	if err != nil {
		return prog, err
	}
	for i, t := range ts {
		o := j.Ordinal + i
		prog.Next = o
		if i > 0 && time.Since(started) >= budget {
			prog.Rest = Result{Action: Snooze, Outcome: "time budget used: the rest goes on at once"}
			return prog, nil
		}
		req, key, err := e.render(ctx, cp, o, t, "", 0)
		if err != nil {
			return prog, err
		}
		one := j
		one.Ordinal, one.Count = o, 1
		res, err := e.perform(ctx, one, cp, prov, req, key)
		if err != nil {
			return prog, err
		}
		switch res.Action {
		case Snooze:
			prog.Rest = res
			return prog, nil
		case Retry:
			// Its retries are its own job's; the others go on.
			prog.Split = append(prog.Split, o)
		}
	}
	prog.Next, prog.Rest = end, Result{Action: Complete}
	return prog, nil
}
