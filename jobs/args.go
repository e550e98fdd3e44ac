package jobs

import "github.com/riverqueue/river"

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
