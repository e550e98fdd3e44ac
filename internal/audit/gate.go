package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ungated is a row that decided a target's fate without a person or the
// plan, written before PostgreSQL enforced the gate (migration 0024): since
// then PostgreSQL refuses every such row to every role, so only a database
// that holds older rows can have one. See docs/ARCHITECTURE.md, "The gate".
type Ungated struct {
	// Kind is UngatedClosed, UngatedSuppressed, UngatedNotItsOwn or
	// UngatedRemoved.
	Kind    string    `json:"kind"`
	Ordinal int       `json:"ordinal"`
	Target  string    `json:"target"`
	At      time.Time `json:"at"`
	// Detail is the campaign's last decision before At (UngatedClosed) or
	// the suppression entry's id (the others).
	Detail string `json:"detail"`
}

// Kinds of Ungated.
const (
	// UngatedClosed: an attempt made while the campaign was not running
	// (never started, paused, cancelled, completed, back in draft).
	UngatedClosed = "closed"
	// UngatedSuppressed: an attempt made while the address was suppressed.
	UngatedSuppressed = "suppressed"
	// UngatedNotItsOwn: a suppressed outcome citing another address's entry.
	UngatedNotItsOwn = "not_its_own"
	// UngatedRemoved: a suppressed outcome citing an entry already taken off.
	UngatedRemoved = "removed"
)

// gateVersion is the migration from which PostgreSQL enforces the gate.
const gateVersion = 24

// ungatedSQL finds the rows of the campaign of plan @plan, written before
// @since (when migration 0024 was applied), that the gate would have
// refused, by the times recorded: an attempt whose plan was not started
// yet or whose campaign's last decision before it was not a start or a
// resume, or whose address had an entry in force; a suppressed outcome
// citing an entry of another address, or one taken off before it. Only
// plans frozen before @since are read: on a database made since, nothing.
const ungatedSQL = `
WITH c AS (SELECT fp.campaign_id FROM frozen_plan() fp WHERE fp.id = @plan),
plans AS (SELECT o.id, o.list_id FROM frozen_plan() o, c WHERE o.campaign_id = c.campaign_id AND o.created_at < @since),
att AS (
  SELECT e.plan_id, e.ordinal, t.target, e.created_at
  FROM plans o JOIN effect_attempt() e ON e.plan_id = o.id JOIN list_target() t ON t.list_id = o.list_id AND t.ordinal = e.ordinal
  WHERE e.created_at < @since
)
SELECT 'closed', a.ordinal, a.target, a.created_at, coalesce(last.action, 'no decision')
FROM att a
LEFT JOIN LATERAL (
  SELECT ev.action FROM campaign_trail() ev, c
  WHERE ev.campaign_id = c.campaign_id AND ev.created_at <= a.created_at
    AND ev.action IN ('start', 'resume', 'pause', 'cancel', 'complete', 'edit', 'import')
  ORDER BY ev.created_at DESC, ev.id DESC LIMIT 1
) last ON true
WHERE NOT EXISTS (SELECT 1 FROM campaign_run() r WHERE r.plan_id = a.plan_id AND r.created_at <= a.created_at)
   OR last.action IS NULL OR last.action NOT IN ('start', 'resume')
UNION ALL
SELECT 'suppressed', a.ordinal, a.target, a.created_at, s.id::text
FROM att a
JOIN LATERAL (
  SELECT s.id FROM suppression_entry() s
  WHERE s.address = a.target AND s.created_at < a.created_at
    AND NOT EXISTS (SELECT 1 FROM suppression_removed() sr WHERE sr.suppression_id = s.id AND sr.created_at < a.created_at)
  ORDER BY s.id LIMIT 1
) s ON true
UNION ALL
SELECT CASE WHEN s.address <> t.target THEN 'not_its_own' ELSE 'removed' END, ts.ordinal, t.target, ts.created_at, s.id::text
FROM plans o
JOIN target_suppressed_record() ts ON ts.plan_id = o.id
JOIN list_target() t ON t.list_id = o.list_id AND t.ordinal = ts.ordinal
JOIN suppression_entry() s ON s.id = ts.suppression_id
WHERE ts.created_at < @since
  AND (s.address <> t.target OR EXISTS (SELECT 1 FROM suppression_removed() sr WHERE sr.suppression_id = s.id AND sr.created_at <= ts.created_at))
ORDER BY 2, 1`

// readUngated reads ungatedSQL for the plan in tx's snapshot.
func readUngated(ctx context.Context, tx pgx.Tx, planID int64) ([]Ungated, error) {
	var since time.Time
	err := tx.QueryRow(ctx, `SELECT applied_at FROM onceplan_migration WHERE version = $1`, gateVersion).Scan(&since)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	arch, err := archivedPlan(ctx, tx, planID)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, attemptsIn(ungatedSQL, arch), pgx.NamedArgs{"plan": planID, "since": since})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Ungated])
}

// ungatedReasons says, one sentence per kind, which targets' fate such rows
// decided, naming a few.
func ungatedReasons(us []Ungated) []string {
	byKind := map[string][]Ungated{}
	for _, u := range us {
		byKind[u.Kind] = append(byKind[u.Kind], u)
	}
	var out []string
	for _, k := range []struct{ kind, one, many, what string }{
		{UngatedClosed, "target has an attempt", "targets have attempts",
			" made while the campaign was not running that plan (its last decision before: %s)"},
		{UngatedSuppressed, "target has an attempt", "targets have attempts",
			" made while the address was suppressed (entry %s)"},
		{UngatedNotItsOwn, "target was", "targets were",
			" left out as suppressed by an entry of another address (entry %s)"},
		{UngatedRemoved, "target was", "targets were",
			" left out as suppressed by an entry already taken off (entry %s)"},
	} {
		rows := byKind[k.kind]
		if len(rows) == 0 {
			continue
		}
		var named []string
		for _, u := range rows[:min(len(rows), 3)] {
			named = append(named, fmt.Sprintf("#%d %s at %s", u.Ordinal, u.Target, u.At.UTC().Format(time.RFC3339)))
		}
		more := ""
		if len(rows) > 3 {
			more = fmt.Sprintf(" and %d more", len(rows)-3)
		}
		out = append(out, plural(len(rows), k.one, k.many)+fmt.Sprintf(k.what, rows[0].Detail)+
			": rows that decided a target's fate without a person or the plan, written before PostgreSQL refused them: "+
			strings.Join(named, ", ")+more+"; find out who wrote it, and resolve or resend those targets.")
	}
	return out
}
