package audit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx context.Context
	f   *audittest.Fixture
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: context.Background(), f: audittest.NewFixture(t, pgtest.Pool(t))}
}

// everyState builds a 14-target campaign whose ledger holds every state the
// metric counts, and returns it with the state each target must export as.
func (b *bundle) everyState(t *testing.T) (audittest.Campaign, map[int]string) {
	t.Helper()
	f := b.f
	c := f.Campaign("every state", audittest.Addresses(14))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }

	f.Attempt(tg(1), ledger.StateDone)
	f.Attempt(tg(2), ledger.StateFailed)
	f.Attempt(tg(2), ledger.StateDone) // a retry that worked
	f.Attempt(tg(3), ledger.StatePending)
	f.Attempt(tg(4), ledger.StateUnknown)
	f.Attempt(tg(5), ledger.StateFailed)
	f.Attempt(tg(6), ledger.StateStranded)
	f.Attempt(tg(7), ledger.StateDone)
	f.Revoke(tg(7))
	// 8: never started.
	f.Attempt(tg(9), ledger.StateDone)
	require.Equal(t, 1, f.Bump(tg(9))) // a second effect asked for, not yet sent
	f.Attempt(tg(10), ledger.StateDone)
	require.Equal(t, 1, f.Bump(tg(10)))
	f.Attempt(tg(10), ledger.StateDone) // and sent
	f.Attempt(tg(11), ledger.StateUnknown)
	f.Resolve(tg(11), ledger.Delivered)
	f.Attempt(tg(12), ledger.StateUnknown)
	f.Resolve(tg(12), ledger.NotDelivered)
	f.Attempt(tg(13), ledger.StateDone)
	f.Revoke(tg(13))
	f.Attempt(tg(13), ledger.StateDone) // revoked, then sent again at the same epoch
	f.Attempt(tg(14), ledger.StateFailed)
	f.Attempt(tg(14), ledger.StatePending) // a retry in flight

	return c, map[int]string{
		1: "done", 2: "done", 3: "pending", 4: "unknown", 5: "failed", 6: "stranded", 7: "revoked",
		8: "not_started", 9: "not_started", 10: "done", 11: "done", 12: "failed", 13: "done", 14: "pending",
	}
}

func TestMetricEveryState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.everyState(t)

	m, err := audit.ForPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	p, err := plan.GetPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, audit.Metric{
		CampaignID: c.ID, PlanID: c.PlanID, PlanVersion: 1,
		Approved: 14, ExactlyOnce: 5, Missing: 2, InDoubt: 3, Pending: 2, Unknown: 1,
		Failed: 2, Stranded: 1, Revoked: 1, Evidence: []string{}, Holds: false,
		// The frozen rows, read again, are the approved ones.
		PlanIntact: true,
		Integrity:  audit.Integrity{Rows: 14, PlanHash: p.Hash, ApprovedHash: p.Hash, Approvals: 1, RequiredApprovals: 1},
		// Neither failure is final: each target is to be sent again.
		Failures: []audit.FailureGroup{
			{Failure: "retry", Reason: "audittest: failed", Count: 1, Sample: []string{"person5@example.com"}},
			{Failure: "retry", Reason: "audittest: unknown", Count: 1, Sample: []string{"person12@example.com"}},
		},
		UngatedRows: []audit.Ungated{},
		Reasons: []string{
			"2 targets have no effect of their own at their current epoch: not started yet (a running campaign starts them; resume a paused or completed one).",
			"1 target is unknown (the call may or may not have landed): check the provider, then resolve each as delivered or not delivered.",
			"2 targets are pending: a call is in flight, or its worker died and recovery settles it after the owner timeout.",
			`1 target failed and is to be sent again, not sent yet (resume a paused or completed campaign): "audittest: failed" (person5@example.com).`,
			`1 target failed and is to be sent again, not sent yet (resume a paused or completed campaign): "audittest: unknown" (person12@example.com).`,
		},
	}, m)
	require.Equal(t, "5/14 exactly once; does not hold: 2 missing, 3 in doubt, 2 failed, to be sent again", m.Headline())

	byCampaign, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, m, byCampaign)
}

func TestMetricHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("holds", audittest.Addresses(3))
	b.f.Attempt(c.Targets[0], ledger.StateDone)
	b.f.Attempt(c.Targets[1], ledger.StateDone)
	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.Holds, "a target never started is missing")
	require.Equal(t, 1, m.Missing)

	// A definitive rejection is the plan's outcome for its target: named,
	// but it breaks nothing (nobody got two, nobody is forgotten silently).
	b.f.Reject(c.Targets[2], "550 5.1.1 no such user")
	m, err = audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.True(t, m.Holds)
	require.Equal(t, 2, m.ExactlyOnce)
	require.Equal(t, []int{1, 1}, []int{m.Failed, m.Rejected})
	require.Equal(t, "2/3 exactly once; holds", m.Headline())
	require.Equal(t, []string{`1 target was refused by the provider for good, with this answer (a definitive rejection: the audit holds with it): "550 5.1.1 no such user" (person3@example.com).`},
		m.Reasons)
}

// TestMetricAFailureThatIsNotFinalDoesNotHold: a target that failed
// temporarily is not sent: whether its retries ran out or it is still to
// be sent, the audit does not hold and says which, with the reason.
func TestMetricAFailureThatIsNotFinalDoesNotHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("temporary", audittest.Addresses(2))
	b.f.Attempt(c.Targets[0], ledger.StateDone)
	e := b.f.Claim(c.Targets[1])
	_, err := b.f.Ledger.RecordResponse(b.ctx, e.ID, ledger.ResponseSend, []byte("HTTP/1.1 503"))
	require.NoError(t, err)
	_, err = b.f.Ledger.Settle(b.ctx, ledger.SettleParams{EffectID: e.ID, State: ledger.StateFailed,
		Reason: "Postmark answered HTTP 503 (no retries left after 8 attempts)", Failure: ledger.FailureExhausted})
	require.NoError(t, err)
	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.Holds)
	require.Equal(t, []int{1, 0}, []int{m.Failed, m.Rejected})
	require.Equal(t, "1/2 exactly once; does not hold: 1 given up after their tries", m.Headline())
	require.Equal(t, []string{`1 target was given up after its tries ran out, the last with this error (resume to try once more): "Postmark answered HTTP 503 (no retries left after 8 attempts)" (person2@example.com).`},
		m.Reasons)
}

// Keys do not depend on the text: a target done under version 1 is done
// for version 2, whether version 2 kept the list (a text edit) or imported
// a new one.
func TestMetricLaterVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.f
	c := f.Campaign("versions", audittest.Addresses(4))
	v1 := c.PlanID
	f.Attempt(c.Targets[0], ledger.StateDone)
	f.Attempt(c.Targets[1], ledger.StateUnknown)
	f.Attempt(c.Targets[2], ledger.StateFailed)

	f.Edit(&c, "Your invoice is overdue.")
	require.NotEqual(t, v1, c.PlanID)
	m, err := audit.ForCampaign(b.ctx, f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, c.PlanID, m.PlanID)
	require.Equal(t, 2, m.PlanVersion)
	require.Equal(t, []int{4, 1, 1, 1, 1}, []int{m.Approved, m.ExactlyOnce, m.Unknown, m.Failed, m.Missing})

	// Version 2 sends the failed one again.
	f.Attempt(c.Targets[2], ledger.StateDone)
	// Version 3 drops person4 and adds person5 and person6: a new list,
	// matched to the ledger by key.
	v2 := c.PlanID
	f.Reimport(&c, []string{"person1@example.com", "person5@example.com", "person2@example.com", "person3@example.com", "person6@example.com"})
	require.NotEqual(t, v2, c.PlanID)
	f.Attempt(c.Targets[1], ledger.StateDone) // person5, under version 3
	m, err = audit.ForCampaign(b.ctx, f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, 3, m.PlanVersion)
	require.Equal(t, []int{5, 3, 1, 0, 1}, []int{m.Approved, m.ExactlyOnce, m.Unknown, m.Failed, m.Missing})

	// The earlier plans are still auditable on their own.
	m, err = audit.ForPlan(b.ctx, f.Pool, v1)
	require.NoError(t, err)
	require.Equal(t, []int{4, 2, 1, 0, 1}, []int{m.Approved, m.ExactlyOnce, m.Unknown, m.Failed, m.Missing})
}

func TestMetricErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := audit.ForPlan(b.ctx, b.f.Pool, 424242)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = audit.ForCampaign(b.ctx, b.f.Pool, "not-a-uuid")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = audit.ForCampaign(b.ctx, b.f.Pool, "0b6f6f0e-0000-4000-8000-000000000000")
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	res, err := b.f.Service.Create(b.ctx, b.f.Proposer, approval.CreateParams{
		Name: "draft only", Provider: "outbox", Payload: plan.Payload{From: "a@example.com", Subject: "S", Text: "T"},
	})
	require.NoError(t, err)
	_, err = audit.ForCampaign(b.ctx, b.f.Pool, res.Campaign.ID)
	require.ErrorIs(t, err, audit.ErrNoPlan)
	require.Contains(t, err.Error(), "has not been approved yet")
}

func TestFindCampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("November invoices", audittest.Addresses(1))

	got, err := audit.FindCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, audit.Campaign{ID: c.ID, Name: "November invoices", PlanID: c.PlanID}, got)
	got, err = audit.FindCampaign(b.ctx, b.f.Pool, strings.ToUpper(c.ID))
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ID)
	got, err = audit.FindCampaign(b.ctx, b.f.Pool, "November invoices")
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ID)

	_, err = audit.FindCampaign(b.ctx, b.f.Pool, "December")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	require.EqualError(t, err, `not found: there is no campaign with the id or name "December"`)

	b.f.Campaign("November invoices", audittest.Addresses(1))
	_, err = audit.FindCampaign(b.ctx, b.f.Pool, "November invoices")
	require.ErrorIs(t, err, audit.ErrAmbiguous)
	require.Contains(t, err.Error(), `more than one campaign is named "November invoices"`)
	// The id still works.
	got, err = audit.FindCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, c.ID, got.ID)
}

// The metric's own-plan branch must be a range scan of effect_plan_target
// (migration 0007; index-only once the table is vacuumed), or a
// million-target audit reads the whole ledger. Sequential scans are
// switched off so that the tiny test tables do not hide which index the
// statement can use.
func TestMetricUsesThePlanIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("explain", audittest.Addresses(3))
	b.f.Attempt(c.Targets[0], ledger.StateDone)
	var plan []string
	err := pgx.BeginFunc(b.ctx, b.f.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		rows, err := tx.Query(b.ctx, "EXPLAIN "+audit.MetricSQL, pgx.NamedArgs{"plan": c.PlanID, "plans": []int64{c.PlanID}, "other": false})
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	text := strings.Join(plan, "\n")
	require.Regexp(t, `(?:on|using) effect_plan_target[^\n]*\n\s+Index Cond: \(plan_id = ANY`, text, text)
}

// TestMetricSkipsOtherListsWhenThereAreNone: the metric's branches for
// attempts and suppressions recorded under another version's target list
// must not be in the plan at all when the campaign has no such version,
// whatever join the planner would pick: run, the attempts' branch could
// read every attempt of every other campaign (4.2 s at 1,000,000 targets
// in `make bench`, against 0.6 s), and planned behind a false one-time
// filter it still launched parallel workers beside a long history. Each
// branch reads the campaign's plans (plan o); the rest of the metric reads
// the plan table once, for the plan itself (p).
// explainMetric is the metric's EXPLAIN ANALYZE for plan, alone on its
// campaign's list, planned for its values, under settings.
func (b *bundle) explainMetric(t *testing.T, plan int64, settings string) []byte {
	t.Helper()
	var out []byte
	err := pgx.BeginFunc(b.ctx, b.f.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = force_custom_plan; "+settings); err != nil {
			return err
		}
		return tx.QueryRow(b.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+audit.MetricSQL,
			pgx.NamedArgs{"plan": plan, "plans": []int64{plan}, "other": false}).Scan(&out)
	})
	require.NoError(t, err, settings)
	return out
}

func TestMetricSkipsOtherListsWhenThereAreNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("audited", audittest.Addresses(3))
	b.f.Attempt(c.Targets[0], ledger.StateDone)
	other := b.f.Campaign("another campaign", audittest.Addresses(5))
	for _, tg := range other.Targets {
		b.f.Attempt(tg, ledger.StateDone)
	}
	for _, settings := range []string{
		"",
		"SET LOCAL enable_hashjoin = off",
		"SET LOCAL enable_mergejoin = off",
		"SET LOCAL enable_nestloop = off",
		"SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off",
		"SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = off",
		"SET LOCAL enable_seqscan = off",
		"SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; SET LOCAL min_parallel_table_scan_size = 0; SET LOCAL min_parallel_index_scan_size = 0",
	} {
		out := b.explainMetric(t, c.PlanID, settings)
		// The tables are read through their owners' inlined functions,
		// so a scan carries the function's alias, not the query's.
		seen := map[string]int{}
		pgtest.ParsePlan(t, out).Walk(func(n pgtest.PlanNode) {
			if n.Relation != "" {
				seen[n.Relation]++
			}
		})
		require.Equal(t, 1, seen["plan"], "%q: the plan table is read %d times: a branch for another version's list is planned, with no such version", settings, seen["plan"])
		require.Positive(t, seen["effect"], "%q: the metric read no attempt", settings)
	}
}

// TestMetricReadsTheBumpsOnce: the current epochs of the ledger's bumped
// keys are computed once per audit, whatever join the planner picks for
// the plan's attempts — not again for each attempt, as a nested loop did
// when the statistics did not know the plan's attempts yet.
func TestMetricReadsTheBumpsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("audited", audittest.Addresses(20))
	other := b.f.Campaign("another campaign", audittest.Addresses(200))
	for _, tg := range other.Targets {
		b.f.Attempt(tg, ledger.StateDone)
		b.f.Bump(tg)
	}
	// The statistics know the history, not the audited plan's attempts:
	// an audit right after its campaign ran.
	_, err := b.f.Pool.Exec(b.ctx, `ANALYZE`)
	require.NoError(t, err)
	for _, tg := range c.Targets {
		b.f.Attempt(tg, ledger.StateDone)
	}
	for _, settings := range []string{
		"",
		"SET LOCAL enable_hashjoin = off",
		"SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off",
	} {
		out := b.explainMetric(t, c.PlanID, settings)
		// Each node over a scan of the bumps (their aggregate) runs at
		// most once: a rescan of a hashed aggregate does not read the
		// table again, but it goes through all of its groups again.
		scans := 0
		pgtest.ParsePlan(t, out).Walk(func(n pgtest.PlanNode) {
			for _, c := range n.Plans {
				if c.Relation == "effect_bump" {
					scans++
					require.LessOrEqual(t, n.Loops, 1, "%q: the bumps are gone through %d times in one audit", settings, n.Loops)
				}
			}
		})
		require.Positive(t, scans, "%q: the metric read no bump", settings)
	}
	m, err := audit.ForPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, 20, m.ExactlyOnce)
}
