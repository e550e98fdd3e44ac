package approval

// The per-target table of a campaign, as the UI's run page and the API's
// target list read it: one index-backed query shape per filter, so a page
// costs the same at a million targets as at ten.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// blockingStates is the SQL list of states that hold a key.
const blockingStates = ledger.BlockingStates

// StateOutside is the state of a target whose key is held, at its current
// epoch, by an attempt that is not the campaign's own: made outside any
// plan, or for another campaign's (DESIGN §3 rule 7; migration 0014). Such
// an attempt never counts as the target's effect (the audit counts the
// target missing), and while it holds the key the target cannot get one.
const StateOutside = "outside"

// ownAttempt is the SQL condition that attempt x (at target t's key) is
// the campaign's own: made by a plan of the campaign whose list t is in.
// Keys do not depend on the text, so any version's plan counts.
const ownAttempt = `x.plan_id IN (SELECT op.id FROM plan op WHERE op.campaign_id = (SELECT ol.campaign_id FROM target_list ol WHERE ol.id = t.list_id))`

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
	// Vars are the target's merge variables as JSON.
	Vars string `json:"-"`
}

// targetRowSQL selects one target's row with its current state; it
// expects a target row aliased t. Two index lookups per target: the key's
// bumps (primary key) and its attempts at that epoch (effect_key_history).
const targetRowSQL = `
	SELECT t.ordinal, t.target, t.key, cur.epoch, coalesce(e.state, 'not_started'), coalesce(e.attempts, 0)::int,
	       coalesce(e.receipt, ''), e.updated_at, t.vars::text
	FROM %s
	CROSS JOIN LATERAL (SELECT coalesce(max(b.epoch), 0) AS epoch FROM effect_bump b WHERE b.key = t.key) cur
	LEFT JOIN LATERAL (
		SELECT CASE WHEN ` + ownAttempt + ` THEN x.state::text ELSE '` + StateOutside + `' END AS state,
		       x.receipt, x.updated_at, count(*) OVER () AS attempts
		FROM effect x WHERE x.key = t.key AND x.epoch = cur.epoch
		  AND (x.state IN ` + blockingStates + ` OR ` + ownAttempt + `)
		ORDER BY (x.state IN ` + blockingStates + `) DESC, x.id DESC
		LIMIT 1
	) e ON true
	WHERE %s
	ORDER BY %s
	LIMIT %s`

func targetRowQuery(from, where, order, limit string) string {
	return fmt.Sprintf(targetRowSQL, from, where, order, limit)
}

func scanTargetRows(rows pgx.Rows) ([]TargetRow, error) {
	var out []TargetRow
	var r TargetRow
	_, err := pgx.ForEachRow(rows, []any{&r.Ordinal, &r.Target, &r.Key, &r.Epoch, &r.State, &r.Attempts, &r.Receipt, &r.UpdatedAt, &r.Vars}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// TargetByOrdinal reads one target of a list with its current state.
func TargetByOrdinal(ctx context.Context, db plan.DB, listID int64, ordinal int) (TargetRow, error) {
	rows, err := db.Query(ctx, targetRowQuery("target t", "t.list_id = $1 AND t.ordinal = $2", "t.ordinal", "1"), listID, ordinal)
	if err != nil {
		return TargetRow{}, err
	}
	rs, err := scanTargetRows(rows)
	if err != nil {
		return TargetRow{}, err
	}
	if len(rs) == 0 {
		return TargetRow{}, fmt.Errorf("%w: the plan has no target #%d", plan.ErrNotFound, ordinal)
	}
	return rs[0], nil
}

// TargetQuery selects a page of a plan's targets.
type TargetQuery struct {
	ListID int64
	// Count is the list's size (the end of an ordinal scan).
	Count int
	// State filters by current state ("" for all).
	State string
	// Prefix searches by address prefix (normalised addresses are lower
	// case); results are then in address order.
	Prefix string
	// After is the cursor: an ordinal, or with Prefix an address.
	After string
	Limit int
	// Budget bounds the time a filtered scan may take for one page; the
	// page then ends early with a cursor to continue from.
	Budget time.Duration
	// StateCount, when known (>= 0), is how many targets are in State: it
	// chooses the plan for a state filter — a rare state is found from the
	// ledger's side, a common one by scanning. -1 (or 0 with no counts at
	// hand: use -1) means unknown.
	StateCount int
}

// TargetPage is one page of targets and the cursor of the next.
type TargetPage struct {
	Rows []TargetRow
	// Next is the cursor of the next page, "" at the end.
	Next string
	// ScannedTo is set when a filtered scan stopped early: the ordinal up
	// to which the list was searched.
	ScannedTo int
}

// scanWindow is how many ordinals one filtered-scan query covers.
const scanWindow = 5000

// QueryTargets returns one page of a list's targets with their ledger
// state. Every shape is index-backed so a page
// costs the same at a million targets as at ten:
//   - no filter: the list's primary key (list_id, ordinal) from the cursor;
//   - pending or unknown: the ledger's partial indexes on those states
//     (in doubt is rare), joined to the list by (list_id, key);
//   - another state that is rare in this plan (under 5% by its counts):
//     the ledger's rows in that state, joined the same way;
//   - a common state: ordinal windows of the primary key, filtered, until
//     the page is full or the time budget is spent (matches are dense);
//   - an address prefix: the (list_id, target) index from the cursor.
func QueryTargets(ctx context.Context, db plan.DB, q TargetQuery) (TargetPage, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Budget <= 0 {
		q.Budget = 300 * time.Millisecond
	}
	// $4 is the state filter in every shape that takes one ('' for all).
	const stateCond = "($4::text = '' OR coalesce(e.state, 'not_started') = $4::text)"
	var page TargetPage
	switch {
	case q.Prefix != "":
		after := q.After
		if after < q.Prefix {
			after = ""
		}
		// C.UTF-8 collation: code point order, so the prefix range is
		// [prefix, prefix || U+10FFFF).
		rows, err := db.Query(ctx, targetRowQuery("target t",
			"t.list_id = $1 AND t.target >= $2 AND t.target < $2 || chr(1114111) AND t.target > $3 AND "+stateCond,
			"t.target", "$5"), q.ListID, q.Prefix, after, q.State, q.Limit+1)
		if err != nil {
			return page, err
		}
		if page.Rows, err = scanTargetRows(rows); err != nil {
			return page, err
		}
		if len(page.Rows) > q.Limit {
			page.Rows = page.Rows[:q.Limit]
			page.Next = page.Rows[q.Limit-1].Target
		}
		return page, nil
	case q.State == "pending" || q.State == "unknown" ||
		(q.State != "" && q.State != "not_started" && q.State != StateOutside && q.StateCount >= 0 && q.StateCount*20 < q.Count):
		after, _ := strconv.Atoi(q.After)
		rows, err := db.Query(ctx, targetRowQuery(`(
				SELECT DISTINCT t0.* FROM effect d JOIN target t0 ON t0.list_id = $1 AND t0.key = d.key
				WHERE d.state = $2::text::effect_state AND t0.ordinal > $3
			) t`, "coalesce(e.state, 'not_started') = $2::text", "t.ordinal", "$4"), q.ListID, q.State, after, q.Limit+1)
		if err != nil {
			return page, err
		}
		if page.Rows, err = scanTargetRows(rows); err != nil {
			return page, err
		}
		if len(page.Rows) > q.Limit {
			page.Rows = page.Rows[:q.Limit]
			page.Next = strconv.Itoa(page.Rows[q.Limit-1].Ordinal)
		}
		return page, nil
	case q.State == "":
		after, _ := strconv.Atoi(q.After)
		rows, err := db.Query(ctx, targetRowQuery("target t", "t.list_id = $1 AND t.ordinal > $2",
			"t.ordinal", "$3"), q.ListID, after, q.Limit+1)
		if err != nil {
			return page, err
		}
		if page.Rows, err = scanTargetRows(rows); err != nil {
			return page, err
		}
		if len(page.Rows) > q.Limit {
			page.Rows = page.Rows[:q.Limit]
			page.Next = strconv.Itoa(page.Rows[q.Limit-1].Ordinal)
		}
		return page, nil
	}
	// A state without an index of its own: scan ordinal windows.
	after, _ := strconv.Atoi(q.After)
	deadline := time.Now().Add(q.Budget)
	var window time.Duration // how long the last window's query took
	for after < q.Count {
		started := time.Now()
		need := q.Limit + 1 - len(page.Rows)
		end := min(after+scanWindow, q.Count)
		rows, err := db.Query(ctx, targetRowQuery("target t",
			"t.list_id = $1 AND t.ordinal > $2 AND t.ordinal <= $3 AND "+stateCond, "t.ordinal", "$5"),
			q.ListID, after, end, q.State, need)
		if err != nil {
			return page, err
		}
		got, err := scanTargetRows(rows)
		if err != nil {
			return page, err
		}
		page.Rows = append(page.Rows, got...)
		if len(page.Rows) > q.Limit {
			page.Rows = page.Rows[:q.Limit]
			page.Next = strconv.Itoa(page.Rows[q.Limit-1].Ordinal)
			return page, nil
		}
		after = end
		window = time.Since(started)
		// Stop before a window that would likely end past the budget, not
		// only once past it: the budget bounds the whole page (issue 8:
		// p95 ≤ 50 ms with a 40 ms budget; checking only after each
		// window overshot by up to a window, p95 56 ms at 1,000,000).
		if after < q.Count && time.Now().Add(window).After(deadline) {
			page.Next = strconv.Itoa(after)
			page.ScannedTo = after
			return page, nil
		}
	}
	return page, nil
}
