package web

// The read queries the pages need beyond what the domain packages offer:
// counts per state, the per-target table with keyset pagination, names of
// users. They read the tables of plan, ledger and approval and write
// nothing; writes go through those packages.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// blockingStates is the SQL list of states that hold a key.
const blockingStates = `('pending', 'done', 'unknown', 'stranded')`

// queryCounts counts a list's targets by the state of their effect at the
// key's current epoch: the blocking row when there is one (at most one, by
// the ledger's unique index), else the latest failed or revoked attempt,
// else not started. Keys, not plan ids, join the ledger, so a target done
// under an earlier version of the campaign counts as done.
func queryCounts(ctx context.Context, db plan.DB, listID int64, planned int) (view.Counts, error) {
	rows, err := db.Query(ctx, `
		WITH cur AS (
			SELECT DISTINCT ON (e.key) e.state
			FROM target t
			JOIN effect e ON e.key = t.key
			LEFT JOIN (SELECT key, max(epoch) AS epoch FROM effect_bump GROUP BY key) b ON b.key = t.key
			WHERE t.list_id = $1 AND e.epoch = coalesce(b.epoch, 0)
			ORDER BY e.key, (e.state IN `+blockingStates+`) DESC, e.id DESC
		)
		SELECT state::text, count(*) FROM cur GROUP BY state`, listID)
	if err != nil {
		return view.Counts{}, err
	}
	c := view.Counts{Planned: planned}
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
		}
		return nil
	})
	c.NotStarted = planned - c.Pending - c.Done - c.Unknown - c.Failed - c.Stranded - c.Revoked
	return c, err
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
		SELECT x.state::text AS state, x.receipt, x.updated_at, count(*) OVER () AS attempts
		FROM effect x WHERE x.key = t.key AND x.epoch = cur.epoch
		ORDER BY (x.state IN ` + blockingStates + `) DESC, x.id DESC
		LIMIT 1
	) e ON true
	WHERE %s
	ORDER BY %s
	LIMIT %s`

func targetRowQuery(from, where, order, limit string) string {
	return fmt.Sprintf(targetRowSQL, from, where, order, limit)
}

// targetRow is a view row plus the target's variables.
type targetRow struct {
	view.TargetRow
	Vars string
}

func scanTargetRows(rows pgx.Rows) ([]targetRow, error) {
	var out []targetRow
	var r targetRow
	var changed *time.Time
	_, err := pgx.ForEachRow(rows, []any{&r.Ordinal, &r.Target, &r.Key, &r.Epoch, &r.State, &r.Attempts, &r.Receipt, &changed, &r.Vars}, func() error {
		r.Changed = time.Time{}
		if changed != nil {
			r.Changed = *changed
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// targetByOrdinal reads one target of a list with its current state.
func targetByOrdinal(ctx context.Context, db plan.DB, listID int64, ordinal int) (targetRow, error) {
	rows, err := db.Query(ctx, targetRowQuery("target t", "t.list_id = $1 AND t.ordinal = $2", "t.ordinal", "1"), listID, ordinal)
	if err != nil {
		return targetRow{}, err
	}
	rs, err := scanTargetRows(rows)
	if err != nil {
		return targetRow{}, err
	}
	if len(rs) == 0 {
		return targetRow{}, fmt.Errorf("%w: the plan has no target #%d", plan.ErrNotFound, ordinal)
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
	// Counts, when known, choose the plan for a state filter: a rare
	// state is found from the ledger's side, a common one by scanning.
	Counts *view.Counts
}

// TargetPage is one page of targets and the cursor of the next.
type TargetPage struct {
	Rows []targetRow
	// Next is the cursor of the next page, "" at the end.
	Next string
	// ScannedTo is set when a filtered scan stopped early: the ordinal up
	// to which the list was searched.
	ScannedTo int
}

// scanWindow is how many ordinals one filtered-scan query covers.
const scanWindow = 5000

// queryTargets returns one page. Every shape is index-backed so a page
// costs the same at a million targets as at ten:
//   - no filter: the list's primary key (list_id, ordinal) from the cursor;
//   - pending or unknown: the ledger's partial indexes on those states
//     (in doubt is rare), joined to the list by (list_id, key);
//   - another state that is rare in this plan (under 5% by its counts):
//     the ledger's rows in that state, joined the same way;
//   - a common state: ordinal windows of the primary key, filtered, until
//     the page is full or the time budget is spent (matches are dense);
//   - an address prefix: the (list_id, target) index from the cursor.
func queryTargets(ctx context.Context, db plan.DB, q TargetQuery) (TargetPage, error) {
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
		(q.State != "" && q.State != "not_started" && q.Counts != nil && q.Counts.Get(q.State)*20 < q.Count):
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
	for after < q.Count {
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
		if after < q.Count && time.Now().After(deadline) {
			page.Next = strconv.Itoa(after)
			page.ScannedTo = after
			return page, nil
		}
	}
	return page, nil
}

// draftTargets lists a list's targets with their variables, by ordinal.
func draftTargets(ctx context.Context, db plan.DB, listID int64, after, limit int) ([]view.DraftTarget, error) {
	if listID == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
		SELECT ordinal, line, target, vars::text FROM target
		WHERE list_id = $1 AND ordinal > $2 ORDER BY ordinal LIMIT $3`, listID, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (view.DraftTarget, error) {
		var t view.DraftTarget
		err := r.Scan(&t.Ordinal, &t.Line, &t.Target, &t.Vars)
		return t, err
	})
}

// approverEmails lists who approved a version's hash, in order.
func approverEmails(ctx context.Context, db plan.DB, campaignID string, version int, hash string) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT u.email FROM approval a JOIN app_user u ON u.id = a.approver_id
		WHERE a.campaign_id = $1 AND a.version = $2 AND a.plan_hash = $3 ORDER BY a.id`, campaignID, version, hash)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// userEmails maps user ids to emails.
func userEmails(ctx context.Context, db plan.DB, ids []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id, email FROM app_user WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	var id int64
	var email string
	_, err = pgx.ForEachRow(rows, []any{&id, &email}, func() error {
		out[id] = email
		return nil
	})
	return out, err
}

// previousPlan returns the campaign's latest plan frozen before version,
// or ok false.
func previousPlan(ctx context.Context, db plan.DB, campaignID string, version int) (plan.Plan, bool, error) {
	var id int64
	err := db.QueryRow(ctx, `SELECT id FROM plan WHERE campaign_id = $1 AND version < $2 ORDER BY version DESC LIMIT 1`,
		campaignID, version).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return plan.Plan{}, false, nil
	}
	if err != nil {
		return plan.Plan{}, false, err
	}
	p, err := plan.GetPlan(ctx, db, id)
	return p, err == nil, err
}

// lastActivity returns each campaign's latest audit event time.
func lastActivity(ctx context.Context, db plan.DB, ids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT c.id::text, (SELECT e.created_at FROM campaign_event e WHERE e.campaign_id = c.id ORDER BY e.id DESC LIMIT 1)
		FROM campaign c WHERE c.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	var id string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		if at != nil {
			out[id] = *at
		}
		return nil
	})
	return out, err
}

// bumps lists a key's recorded epoch bumps.
func bumps(ctx context.Context, db plan.DB, key string) ([]view.Bump, error) {
	rows, err := db.Query(ctx, `SELECT epoch, actor_kind || ':' || actor, reason, created_at FROM effect_bump WHERE key = $1 ORDER BY epoch`, key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (view.Bump, error) {
		var b view.Bump
		err := r.Scan(&b.Epoch, &b.Actor, &b.Reason, &b.At)
		return b, err
	})
}

// queueState is a River queue's state as the admin page shows it.
type queueState struct {
	Paused      bool
	PausedUntil time.Time
	Available   int
	Running     int
	Retryable   int
}

// queueStates reads River's queues: paused or not, until when (the
// scheduled resume a quota answer left), and jobs waiting, running and
// retrying. Read-only; River owns these tables.
func queueStates(ctx context.Context, db plan.DB) (map[string]queueState, error) {
	out := map[string]queueState{}
	rows, err := db.Query(ctx, `
		SELECT q.name, q.paused_at IS NOT NULL,
		       (SELECT min(j.scheduled_at) FROM river_job j
		        WHERE j.kind = 'onceplan_resume_queue' AND j.args ->> 'queue' = q.name
		          AND j.state IN ('scheduled', 'available', 'retryable'))
		FROM river_queue q`)
	if err != nil {
		return nil, err
	}
	var name string
	var paused bool
	var until *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &paused, &until}, func() error {
		st := out[name]
		st.Paused = paused
		if until != nil && paused {
			st.PausedUntil = *until
		}
		out[name] = st
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, `
		SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'running', 'retryable') GROUP BY queue, state`)
	if err != nil {
		return nil, err
	}
	var state string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&name, &state, &n}, func() error {
		st := out[name]
		switch state {
		case "available":
			st.Available = n
		case "running":
			st.Running = n
		case "retryable":
			st.Retryable = n
		}
		out[name] = st
		return nil
	})
	return out, err
}

// normalizePrefix turns a search box's text into an address prefix.
func normalizePrefix(q string) string {
	return strings.ToLower(strings.TrimSpace(q))
}
