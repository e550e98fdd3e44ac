package approval

import (
	"context"

	"github.com/onceplan/onceplan/plan"
)

// Counts are a campaign's targets by the ledger state of their latest
// attempt at the key's current epoch. Planned = NotStarted + the rest.
type Counts struct {
	Planned    int `json:"planned"`
	NotStarted int `json:"not_started"`
	Pending    int `json:"pending"`
	Done       int `json:"done"`
	Unknown    int `json:"unknown"`
	Failed     int `json:"failed"`
	Stranded   int `json:"stranded"`
	Revoked    int `json:"revoked"`
}

// latestAtEpoch is the lateral subquery giving a target's latest attempt
// at its key's current epoch (NULL state: never attempted).
const latestAtEpoch = `LEFT JOIN LATERAL (
		SELECT f.state, f.epoch
		FROM effect f
		WHERE f.key = t.key AND f.epoch = (SELECT coalesce(max(b.epoch), 0) FROM effect_bump b WHERE b.key = t.key)
		ORDER BY f.id DESC LIMIT 1) f ON true`

// ValidStates are the states a target filter accepts.
var ValidStates = []string{"not_started", "pending", "done", "unknown", "failed", "stranded", "revoked"}

// ListOf is the target list a campaign's status reads, and its size: the
// frozen plan's once approved, the current draft's before.
func ListOf(ctx context.Context, db plan.DB, c plan.Campaign) (int64, int, error) {
	return listOf(ctx, db, c)
}

func listOf(ctx context.Context, db plan.DB, c plan.Campaign) (int64, int, error) {
	if c.PlanID != 0 {
		p, err := plan.GetPlan(ctx, db, c.PlanID)
		return p.ListID, p.TargetCount, err
	}
	d, err := plan.GetDraft(ctx, db, c.ID, c.Version)
	return d.ListID, d.TargetCount, err
}

// CampaignCounts counts a campaign's targets by state. A draft's targets
// are all not started.
func CampaignCounts(ctx context.Context, db plan.DB, c plan.Campaign) (Counts, error) {
	listID, n, err := listOf(ctx, db, c)
	if err != nil || listID == 0 {
		return Counts{}, err
	}
	if c.PlanID == 0 {
		return Counts{Planned: n, NotStarted: n}, nil
	}
	var k Counts
	err = db.QueryRow(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE f.state IS NULL),
		       count(*) FILTER (WHERE f.state = 'pending'),
		       count(*) FILTER (WHERE f.state = 'done'),
		       count(*) FILTER (WHERE f.state = 'unknown'),
		       count(*) FILTER (WHERE f.state = 'failed'),
		       count(*) FILTER (WHERE f.state = 'stranded'),
		       count(*) FILTER (WHERE f.state = 'revoked')
		FROM target t `+latestAtEpoch+`
		WHERE t.list_id = $1`, listID).Scan(&k.Planned, &k.NotStarted, &k.Pending, &k.Done, &k.Unknown, &k.Failed, &k.Stranded, &k.Revoked)
	return k, err
}
