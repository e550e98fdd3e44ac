package web

// The reads the pages need, in the view's shape: counts per state, the
// per-target table with keyset pagination, names of users. Each asks the
// package that owns the table (audit's read model, plan, ledger, auth);
// web runs no SQL of its own over them.

import (
	"context"
	"strings"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
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
	ts, err := plan.ListTargets(ctx, db, listID, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]view.DraftTarget, len(ts))
	for i, t := range ts {
		out[i] = view.DraftTarget{Ordinal: t.Ordinal, Line: t.Line, Target: t.Target, Vars: t.Vars}
	}
	return out, nil
}

// bumps lists a key's recorded epoch bumps.
func bumps(ctx context.Context, store *ledger.Store, key string) ([]view.Bump, error) {
	bs, err := store.Bumps(ctx, ledger.Key(key))
	if err != nil {
		return nil, err
	}
	out := make([]view.Bump, len(bs))
	for i, b := range bs {
		out[i] = view.Bump{Epoch: b.Epoch, Actor: string(b.ActorKind) + ":" + b.Actor, Reason: b.Reason, At: b.CreatedAt}
	}
	return out, nil
}

// normalizePrefix turns a search box's text into an address prefix.
func normalizePrefix(q string) string {
	return strings.ToLower(strings.TrimSpace(q))
}
