package executor

import (
	"context"
	"time"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
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

// PerformRange executes the consecutive targets of a job (Job.Count of them,
// from Job.Ordinal on), one after the other, each as Perform does
// (docs/ARCHITECTURE.md, "Executing one effect": its pending row is
// committed right before its own call, never ahead, so a crash leaves at
// most the one call in flight in doubt). Reading the targets and finding the
// plan happen once for the range, and a target's claim goes into the commit
// of the previous target's answer when the provider lets that call's slot be
// kept for it (call's next): one commit per effect, and no wait for a claim
// of its own.
//
// It stops at the first target that must wait (a paused campaign, a busy
// or paused provider: Rest is that Snooze, Next that target), and once it
// has worked for budget, so that a job stays well inside its timeout, or
// when the process is stopping (Drain) (Rest is a Snooze of 0: go on at
// once, here or in another process; Next the first target not started).
// A target that fails temporarily is split off (Split) and the job goes on
// with the next (with a provider that is down, every target ends up on a
// job of its own, retried as a one-target job is). An error leaves Next
// at the target it happened on: retrying from there finds the targets
// before settled.
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
	if b, ok := prov.(provider.Batcher); ok && b.BatchSize() > 1 {
		return e.performCalls(ctx, j, cp, b, ts, budget)
	}
	one := func(o int) Job {
		one := j
		one.Ordinal, one.Count = o, 1
		return one
	}
	req, key, err := e.render(ctx, cp, j.Ordinal, ts[0], "", 0)
	if err != nil {
		return prog, err
	}
	// pre is the target claimed in the previous target's answer commit
	// (handover): it is called before anything else happens, budget or
	// not — a claim is never left without its call.
	var pre *handover
	for i := range ts {
		o := j.Ordinal + i
		prog.Next = o
		if i > 0 && pre == nil && !e.goOn(started, budget) {
			prog.Rest = Result{Action: Snooze, Outcome: "time budget used, or the process is stopping: the rest goes on at once"}
			return prog, nil
		}
		// The next target is rendered before it may be claimed with this
		// one's answer, so that nothing can fail between its claim and
		// its call.
		var next *nextTarget
		var nextReq provider.Request
		var nextKey ledger.Key
		if i+1 < len(ts) && e.goOn(started, budget) {
			if nextReq, nextKey, err = e.render(ctx, cp, o+1, ts[i+1], "", 0); err == nil {
				next = &nextTarget{cr: e.claimRequest(one(o+1), cp, prov, nextKey), started: started, budget: budget}
			}
		}
		res, err := e.perform(ctx, one(o), cp, prov, req, key, pre, next)
		pre = nil
		if next != nil {
			pre = next.got
		}
		if err != nil {
			if pre != nil {
				// Not reached: call hands over only on a verdict.
				pre.release()
			}
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
		if i+1 < len(ts) {
			if next == nil {
				if req, key, err = e.render(ctx, cp, o+1, ts[i+1], "", 0); err != nil {
					prog.Next = o + 1
					return prog, err
				}
			} else {
				req, key = nextReq, nextKey
			}
		}
	}
	prog.Next, prog.Rest = end, Result{Action: Complete}
	return prog, nil
}

// goOn says whether a job that started at started may start another of its
// targets: inside its budget, and while the process is not stopping.
func (e *Executor) goOn(started time.Time, budget time.Duration) bool {
	return time.Since(started) < budget && !e.draining.Load()
}
