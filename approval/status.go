package approval

import (
	"context"

	"github.com/jackc/pgx/v5"

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
	// Outside: held by an attempt that is not the campaign's own
	// (StateOutside).
	Outside int `json:"outside"`
}

// ValidStates are the states a target filter accepts.
var ValidStates = []string{"not_started", "pending", "done", "unknown", "failed", "stranded", "revoked", StateOutside}

// ListOf is the target list a campaign's status reads, and its size: the
// frozen plan's once approved, the current draft's before.
func ListOf(ctx context.Context, db plan.DB, c plan.Campaign) (int64, int, error) {
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
	listID, n, err := ListOf(ctx, db, c)
	if err != nil || listID == 0 {
		return Counts{}, err
	}
	if c.PlanID == 0 {
		return Counts{Planned: n, NotStarted: n}, nil
	}
	return ListCounts(ctx, db, listID, n)
}

// ListCounts counts a list's planned targets by the state of their effect
// at the key's current epoch: the blocking row when there is one (at most
// one, by the ledger's unique index), else the latest failed or revoked
// attempt, else not started. Keys, not plan ids, join the ledger, so a
// target done under an earlier version of the campaign counts as done; an
// attempt that is not the campaign's own counts only when it holds the
// key, and then as outside.
func ListCounts(ctx context.Context, db plan.DB, listID int64, planned int) (Counts, error) {
	rows, err := db.Query(ctx, `
		WITH own AS MATERIALIZED (
			SELECT p.id FROM plan p WHERE p.campaign_id = (SELECT campaign_id FROM target_list WHERE id = $1)
		), cur AS (
			SELECT DISTINCT ON (e.key) CASE WHEN e.plan_id IN (SELECT id FROM own) THEN e.state::text ELSE '`+StateOutside+`' END AS state
			FROM target t
			JOIN effect e ON e.key = t.key
			LEFT JOIN (SELECT key, max(epoch) AS epoch FROM effect_bump GROUP BY key) b ON b.key = t.key
			WHERE t.list_id = $1 AND e.epoch = coalesce(b.epoch, 0)
			  AND (e.state IN `+blockingStates+` OR e.plan_id IN (SELECT id FROM own))
			ORDER BY e.key, (e.state IN `+blockingStates+`) DESC, e.id DESC
		)
		SELECT state, count(*) FROM cur GROUP BY state`, listID)
	if err != nil {
		return Counts{}, err
	}
	c := Counts{Planned: planned}
	var state string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		switch state {
		case "pending":
			c.Pending = n
		case "done":
			c.Done = n
		case "unknown":
			c.Unknown = n
		case "failed":
			c.Failed = n
		case "stranded":
			c.Stranded = n
		case "revoked":
			c.Revoked = n
		case StateOutside:
			c.Outside = n
		}
		return nil
	})
	c.NotStarted = planned - c.Pending - c.Done - c.Unknown - c.Failed - c.Stranded - c.Revoked - c.Outside
	return c, err
}
