package approval

import (
	"context"
	"fmt"
	"slices"
	"time"

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
}

// latestAtEpoch is the lateral subquery giving a target's latest attempt
// at its key's current epoch (NULL state: never attempted).
const latestAtEpoch = `LEFT JOIN LATERAL (
		SELECT f.state, f.epoch, f.receipt, f.updated_at,
		       (SELECT count(*) FROM effect a WHERE a.key = t.key) AS attempts
		FROM effect f
		WHERE f.key = t.key AND f.epoch = (SELECT coalesce(max(b.epoch), 0) FROM effect_bump b WHERE b.key = t.key)
		ORDER BY f.id DESC LIMIT 1) f ON true`

// listOf is the target list a campaign's status reads: the frozen plan's
// once approved, the current draft's before.
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

// TargetRow is one planned target with its ledger state.
type TargetRow struct {
	Ordinal   int        `json:"ordinal"`
	Target    string     `json:"target"`
	Key       string     `json:"key"`
	Epoch     int        `json:"epoch"`
	State     string     `json:"state"` // "not_started" when never attempted
	Attempts  int        `json:"attempts"`
	Receipt   string     `json:"receipt,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// TargetFilter selects a page of a campaign's targets, in list order.
type TargetFilter struct {
	State  string // "" for all; a ledger state or "not_started"
	Search string // a substring of the address (case-insensitive)
	After  int    // ordinal of the last row of the previous page
	Limit  int    // 1–1000; default 100
}

// ValidStates are the states a target filter accepts.
var ValidStates = []string{"not_started", "pending", "done", "unknown", "failed", "stranded", "revoked"}

// ListTargets returns a page of the campaign's targets and whether more
// follow. Pages are keyed by ordinal, so a deep page costs what the first
// does.
func ListTargets(ctx context.Context, db plan.DB, c plan.Campaign, f TargetFilter) ([]TargetRow, bool, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return nil, false, &plan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 1000, not %d", f.Limit)}
	}
	if f.After < 0 {
		return nil, false, &plan.FieldError{Field: "after", Reason: "must not be negative"}
	}
	if f.State != "" && !slices.Contains(ValidStates, f.State) {
		return nil, false, &plan.FieldError{Field: "state", Reason: fmt.Sprintf("%q is not one of %v", f.State, ValidStates)}
	}
	listID, _, err := listOf(ctx, db, c)
	if err != nil || listID == 0 {
		return nil, false, err
	}
	rows, err := db.Query(ctx, `
		SELECT t.ordinal, t.target, t.key, coalesce(f.epoch, 0), coalesce(f.state::text, 'not_started'),
		       coalesce(f.attempts, 0), coalesce(f.receipt, ''), f.updated_at
		FROM target t `+latestAtEpoch+`
		WHERE t.list_id = $1 AND t.ordinal > $2
		  AND ($3 = '' OR coalesce(f.state::text, 'not_started') = $3)
		  AND ($4 = '' OR strpos(lower(t.target), lower($4)) > 0)
		ORDER BY t.ordinal
		LIMIT $5`, listID, f.After, f.State, f.Search, f.Limit+1)
	if err != nil {
		return nil, false, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TargetRow, error) {
		var t TargetRow
		err := r.Scan(&t.Ordinal, &t.Target, &t.Key, &t.Epoch, &t.State, &t.Attempts, &t.Receipt, &t.UpdatedAt)
		return t, err
	})
	if err != nil {
		return nil, false, err
	}
	more := len(out) > f.Limit
	if more {
		out = out[:f.Limit]
	}
	return out, more, nil
}
