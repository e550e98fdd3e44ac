package audit_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// outsideTargets adds, after everyState's 14 targets' campaign, attempts
// made outside any plan on four more targets' keys, and returns the states
// those targets must read as.
func (b *bundle) outsideTargets(t *testing.T) (audittest.Campaign, plan.Plan, map[int]string, map[int]int) {
	t.Helper()
	f := b.f
	c := f.Campaign("outside", audittest.Addresses(6))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }
	outside := func(o int, state ledger.State) ledger.Effect {
		cl, err := f.Ledger.Claim(b.ctx, ledger.ClaimParams{Key: tg(o).Key, Owner: "mallory"})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimWon, cl.Outcome)
		if state == ledger.StatePending {
			return cl.Effect
		}
		return f.Settle(cl.Effect, state)
	}
	f.Attempt(tg(1), ledger.StateDone)   // the campaign's own
	outside(2, ledger.StateDone)         // holds the key: outside
	outside(3, ledger.StateFailed)       // freed the key: not the target's business
	outside(4, ledger.StateFailed)       // the same, then
	f.Attempt(tg(4), ledger.StateDone)   // the campaign's own effect
	outside(5, ledger.StateUnknown)      // in doubt, but not the campaign's
	f.Attempt(tg(6), ledger.StateFailed) // the campaign's own failure
	p, err := plan.GetPlan(b.ctx, f.Pool, c.PlanID)
	require.NoError(t, err)
	states := map[int]string{1: "done", 2: audit.StateOutside, 3: audit.StateNotStarted, 4: "done", 5: audit.StateOutside, 6: "failed"}
	attempts := map[int]int{1: 1, 2: 1, 3: 0, 4: 1, 5: 1, 6: 1}
	return c, p, states, attempts
}

// An attempt that is not the campaign's own never counts as the target's
// effect; while it holds the key the target is outside — in the single
// target, every page shape, the counts and both export formats alike.
func TestTargetStateOutside(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p, states, attempts := b.outsideTargets(t)

	for o, want := range states {
		r, err := audit.TargetByOrdinal(b.ctx, b.f.Pool, p.ListID, o)
		require.NoError(t, err)
		require.Equal(t, []any{want, attempts[o]}, []any{r.State, r.Attempts}, "target %d", o)
	}
	_, err := audit.TargetByOrdinal(b.ctx, b.f.Pool, p.ListID, 7)
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	// Every page shape reads the same state.
	base := audit.TargetQuery{ListID: p.ListID, Count: p.TargetCount, StateCount: -1}
	all, err := audit.QueryTargets(b.ctx, b.f.Pool, base)
	require.NoError(t, err)
	require.Len(t, all.Rows, 6)
	for _, r := range all.Rows {
		require.Equal(t, states[r.Ordinal], r.State, "target %d", r.Ordinal)
	}
	for _, tc := range []struct {
		name string
		q    audit.TargetQuery
		want []int
	}{
		{"outside, by scanning", audit.TargetQuery{State: audit.StateOutside}, []int{2, 5}},
		{"done, by scanning", audit.TargetQuery{State: "done"}, []int{1, 4}},
		{"done, from the ledger", audit.TargetQuery{State: "done", StateCount: 0, Count: 1000}, []int{1, 4}},
		{"unknown, from the ledger", audit.TargetQuery{State: "unknown"}, nil},
		{"failed, from the ledger", audit.TargetQuery{State: "failed", StateCount: 0, Count: 1000}, []int{6}},
		{"not started", audit.TargetQuery{State: audit.StateNotStarted}, []int{3}},
		{"prefix", audit.TargetQuery{Prefix: "person5"}, []int{5}},
		{"prefix and outside", audit.TargetQuery{Prefix: "person", State: audit.StateOutside}, []int{2, 5}},
	} {
		q := tc.q
		q.ListID = p.ListID
		if q.Count == 0 {
			q.Count, q.StateCount = p.TargetCount, -1
		}
		page, err := audit.QueryTargets(b.ctx, b.f.Pool, q)
		require.NoError(t, err, tc.name)
		var got []int
		for _, r := range page.Rows {
			got = append(got, r.Ordinal)
		}
		require.Equal(t, tc.want, got, tc.name)
	}

	// The counts agree with the rows.
	counts, err := audit.ListCounts(b.ctx, b.f.Pool, p.ListID, p.TargetCount)
	require.NoError(t, err)
	require.Equal(t, tally(p.TargetCount, all.Rows), counts)
	require.Equal(t, audit.Counts{Planned: 6, NotStarted: 1, Done: 2, Failed: 1, Outside: 2}, counts)

	// Both export formats carry the same states.
	var out bytes.Buffer
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportCSV, &out))
	recs, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	for _, rec := range recs[1:] {
		o, _ := strconv.Atoi(rec[0])
		require.Equal(t, states[o], rec[4], "target %d", o)
		require.Equal(t, strconv.Itoa(attempts[o]), rec[5], "target %d", o)
	}
	out.Reset()
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportJSON, &out))
	var rows []audit.TargetRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows))
	for i := range all.Rows {
		all.Rows[i].Vars = "" // not exported
	}
	require.Equal(t, all.Rows, rows, "the export is the pages' rows")

	// The reconciliation sees the held target as outside: evidence of the
	// outside effect is accounted for (not a stray), and it is neither
	// "done without evidence" nor "evidence, not done".
	log := "message_id,recipient,timestamp\n" +
		string(c.Targets[0].Key) + ":0,person1@example.com,2026-03-01T10:00:00Z\n" +
		string(c.Targets[1].Key) + ":0,person2@example.com,2026-03-01T10:00:01Z\n" +
		string(c.Targets[3].Key) + ":0,person4@example.com,2026-03-01T10:00:02Z\n"
	ev := audit.NewEvidence()
	require.NoError(t, ev.ImportLog(strings.NewReader(log), "deliveries.csv"))
	rep, err := audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Evidence: ev})
	require.NoError(t, err)
	require.Zero(t, rep.DoneWithoutEvidence.Count)
	require.Zero(t, rep.EvidenceNotDone.Count)
	require.Zero(t, rep.Strays.Count)
	require.Equal(t, []int{6, 2, 3, 2}, []int{rep.Metric.Approved, rep.Metric.ExactlyOnce, rep.Metric.Missing, rep.Metric.Outside}) // 2, 3 and 5 missing, 6 failed
}

// The counts are the rows' states counted, for every state the ledger can
// hold (everyState), bumped keys included.
func TestListCountsAgreeWithTheRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, states := b.everyState(t)
	p, err := plan.GetPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	var rows []audit.TargetRow
	q := audit.TargetQuery{ListID: p.ListID, Count: p.TargetCount, Limit: 3, StateCount: -1}
	for {
		page, err := audit.QueryTargets(b.ctx, b.f.Pool, q)
		require.NoError(t, err)
		rows = append(rows, page.Rows...)
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	require.Len(t, rows, len(states))
	for _, r := range rows {
		require.Equal(t, states[r.Ordinal], r.State, "target %d", r.Ordinal)
	}
	counts, err := audit.ListCounts(b.ctx, b.f.Pool, p.ListID, p.TargetCount)
	require.NoError(t, err)
	require.Equal(t, tally(p.TargetCount, rows), counts)
}

// tally counts rows by state as ListCounts does; the targets of the list
// that rows leaves out are not started.
func tally(planned int, rows []audit.TargetRow) audit.Counts {
	c := audit.Counts{Planned: planned, NotStarted: planned - len(rows)}
	for _, r := range rows {
		c.Add(r.State, 1)
	}
	return c
}
