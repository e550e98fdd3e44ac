package jobs

import "github.com/riverqueue/river"

// EffectArgs is one planned target's job: perform the plan's effect on the
// target at Ordinal, exactly once.
type EffectArgs struct {
	CampaignID string `json:"campaign_id"`
	PlanID     int64  `json:"plan_id"`
	Ordinal    int    `json:"ordinal"`
	Key        string `json:"key"`
	Provider   string `json:"provider"`
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
