package approval

import (
	"context"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Counts are a campaign's targets by their current state: package audit's
// read model (audit.ListCounts), which the status shows.
type Counts = audit.Counts

// ListOf is the target list a campaign's status reads, and its size: the
// frozen plan's once approved, the current draft's before.
func ListOf(ctx context.Context, db onceplan.DB, c Campaign) (int64, int, error) {
	if c.PlanID != 0 {
		p, err := plan.GetPlan(ctx, db, c.PlanID)
		return p.ListID, p.TargetCount, err
	}
	d, err := GetDraft(ctx, db, c.ID, c.Version)
	return d.ListID, d.TargetCount, err
}

// CampaignCounts counts a campaign's targets by state. A draft's targets
// are all not started.
func CampaignCounts(ctx context.Context, db onceplan.DB, c Campaign) (Counts, error) {
	listID, n, err := ListOf(ctx, db, c)
	if err != nil || listID == 0 {
		return Counts{}, err
	}
	if c.PlanID == 0 {
		return Counts{Planned: n, NotStarted: n}, nil
	}
	return audit.ListCounts(ctx, db, listID, n)
}
