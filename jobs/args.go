package jobs

import (
	"strconv"

	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/plan"
)

// EffectArgs is one planned target's job: perform the plan's effect on the
// target at Ordinal, exactly once.
//
// Only what finds the target is stored: the plan and the ordinal. River
// writes a job's arguments into a GIN index on every change of its state,
// twice per effect, so every field stored costs index entries on every
// effect; the campaign and the provider follow from the plan, and the
// executor reads the target's key from the frozen plan rather than from
// the queue, where anyone who may update River's jobs could change it.
// Jobs enqueued before this change carry campaign_id, key and provider
// too; they run the same (TestJobsEnqueuedWithTheOldArgumentsRun).
type EffectArgs struct {
	PlanID  int64 `json:"plan_id"`
	Ordinal int   `json:"ordinal"`
	// Count is how many consecutive targets of the plan the job carries,
	// from Ordinal on, at most MaxTargetsPerJob; 0 (omitted, as every job
	// enqueued before ranges) is one. The job works through them in order,
	// each in the order of one effect (docs/ARCHITECTURE.md, "Executing one
	// effect"): a target's pending row is committed right before its own
	// call, never ahead.
	Count int `json:"count,omitempty"`
	// Provider routes the job to its queue when it is inserted; it is not
	// stored.
	Provider string `json:"-"`
}

// Kind is River's name for the job kind.
func (EffectArgs) Kind() string { return "onceplan_effect" }

// InsertOpts routes the job to its provider's queue, so that a provider
// paused by a quota stops only its own jobs.
func (a EffectArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueFor(a.Provider)}
}

// QueueFor names the River queue of a provider.
func QueueFor(provider string) string { return "provider_" + provider }

// MaxTargetsPerJob bounds the targets one effect job carries. River's
// fetch, completion and argument index cost the same for a job of one
// target as for a job of a hundred: a range shares them
// (docs/BENCHMARKS.md). The bound keeps a job's work inside its time budget
// at ordinary provider speeds (a longer one hands the rest on, see
// effectWorker) and the live-job lookup (jobCovers) a short index range.
const MaxTargetsPerJob = 100

// jobFirst and jobEnd are the SQL expressions for the first ordinal effect
// job j carries and the ordinal after its last.
const (
	jobFirst = `(j.args ->> 'ordinal')::int`
	jobEnd   = `((j.args ->> 'ordinal')::int + coalesce((j.args ->> 'count')::int, 1))`
)

// jobCovers is the SQL condition that effect job j carries the target of
// its plan at the SQL expression ordinal. The first bound repeats what
// MaxTargetsPerJob implies, so the lookup is a short range of the live-job
// index (plan, first ordinal) rather than every job before the target.
func jobCovers(ordinal string) string {
	return jobFirst + ` BETWEEN ` + ordinal + ` - ` + strconv.Itoa(MaxTargetsPerJob-1) + ` AND ` + ordinal + ` AND ` + jobEnd + ` > ` + ordinal
}

// targetsPerJob is how many targets the jobs of a plan of n targets carry
// when its provider's queue has workers workers: enough jobs for every
// worker to have several (a plan of a few targets still runs them side by
// side), at most MaxTargetsPerJob.
func targetsPerJob(n, workers int) int {
	return min(max(n/(4*max(workers, 1)), 1), MaxTargetsPerJob)
}

// ranges groups ordinals (ascending) into jobs of at most size
// consecutive targets: a gap (a target done, held or suppressed) ends a
// job, so a job never carries a target it should not.
func ranges(p plan.Plan, ordinals []int, size int) []river.InsertManyParams {
	var params []river.InsertManyParams
	for i := 0; i < len(ordinals); {
		n := 1
		for i+n < len(ordinals) && n < size && ordinals[i+n] == ordinals[i]+n {
			n++
		}
		a := EffectArgs{PlanID: p.ID, Ordinal: ordinals[i], Provider: p.Provider}
		if n > 1 {
			a.Count = n
		}
		params = append(params, river.InsertManyParams{Args: a})
		i += n
	}
	return params
}
