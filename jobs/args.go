package jobs

import "github.com/riverqueue/river"

// EffectArgs is one planned target's job: perform the plan's effect on the
// target at Ordinal, exactly once.
//
// Only what finds the target is stored: the plan, the ordinal and the key
// (Onceplan's index on River's jobs looks them up by plan and key). River
// writes a job's arguments into a GIN index on every change of its state,
// twice per effect, so each field stored costs two index entries per
// effect; the campaign and the provider follow from the plan. Jobs
// enqueued before this change carry campaign_id and provider too, which
// is harmless.
type EffectArgs struct {
	CampaignID string `json:"campaign_id,omitempty"` // old jobs only; the executor takes it from the plan
	PlanID     int64  `json:"plan_id"`
	Ordinal    int    `json:"ordinal"`
	Key        string `json:"key"`
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
