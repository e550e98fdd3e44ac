package web

// The read queries the pages need beyond what the domain packages offer:
// counts per state, the per-target table with keyset pagination, names of
// users. They read the tables of plan, ledger and approval and write
// nothing; writes go through those packages.

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/web/view"
)

// queryCounts is audit.ListCounts (view.Counts is audit.Counts).
func queryCounts(ctx context.Context, db onceplan.DB, listID int64, planned int) (view.Counts, error) {
	return audit.ListCounts(ctx, db, listID, planned)
}

// targetRow is a view row plus the target's variables.
type targetRow struct {
	view.TargetRow
	Vars string
}

func toView(rs []audit.TargetRow) []targetRow {
	out := make([]targetRow, len(rs))
	for i, r := range rs {
		out[i] = targetRow{TargetRow: view.TargetRow{Ordinal: r.Ordinal, Target: r.Target, Key: r.Key, Epoch: r.Epoch,
			State: r.State, Attempts: r.Attempts, Receipt: r.Receipt}, Vars: r.Vars}
		if r.State == audit.StateSuppressed {
			out[i].Suppressed = r.Reason
		}
		if r.LastAt != nil {
			out[i].Changed = *r.LastAt
		}
	}
	return out
}

// targetByOrdinal reads one target of a list with its current state.
func targetByOrdinal(ctx context.Context, db onceplan.DB, listID int64, ordinal int) (targetRow, error) {
	r, err := audit.TargetByOrdinal(ctx, db, listID, ordinal)
	if err != nil {
		return targetRow{}, err
	}
	return toView([]audit.TargetRow{r})[0], nil
}

// TargetPage is one page of targets and the cursor of the next.
type TargetPage struct {
	Rows      []targetRow
	Next      string
	ScannedTo int
}

// queryTargets reads a page of a plan's targets (audit.QueryTargets) in
// the view's shape. counts, when known, let a rare state be found from the
// ledger's side (they set q.StateCount).
func queryTargets(ctx context.Context, db onceplan.DB, q audit.TargetQuery, counts *view.Counts) (TargetPage, error) {
	q.StateCount = -1
	if counts != nil && q.State != "" {
		q.StateCount = counts.Get(q.State)
	}
	p, err := audit.QueryTargets(ctx, db, q)
	return TargetPage{Rows: toView(p.Rows), Next: p.Next, ScannedTo: p.ScannedTo}, err
}

// draftTargets lists a list's targets with their variables, by ordinal.
func draftTargets(ctx context.Context, db onceplan.DB, listID int64, after, limit int) ([]view.DraftTarget, error) {
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

// userEmails maps user ids to emails.
func userEmails(ctx context.Context, db onceplan.DB, ids []int64) (map[int64]string, error) {
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

// lastActivity returns each campaign's latest audit event time.
func lastActivity(ctx context.Context, db onceplan.DB, ids []string) (map[string]time.Time, error) {
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
func bumps(ctx context.Context, db onceplan.DB, key string) ([]view.Bump, error) {
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

// normalizePrefix turns a search box's text into an address prefix.
func normalizePrefix(q string) string {
	return strings.ToLower(strings.TrimSpace(q))
}
