package approval_test

// Rule 4 of docs/ARCHITECTURE.md, "The ledger: exactly-once lives in
// PostgreSQL": plans, plan targets, approvals and the audit trail are
// write-once. Each statement below is what a buggy program or a person at
// psql might try; PostgreSQL must refuse every one.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/plan"
)

func TestRuleFrozenRecordsAreWriteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 5)
	id := created.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	app, err := b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	_, err = b.svc.Start(b.ctx, b.operator, id)
	require.NoError(t, err)
	planID := app.Campaign.PlanID

	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE plan SET subject = 'changed after approval' WHERE id = $1`, []any{planID}},
		{`UPDATE plan SET plan_hash = repeat('0', 64) WHERE id = $1`, []any{planID}},
		{`DELETE FROM plan WHERE id = $1`, []any{planID}},
		{`TRUNCATE plan CASCADE`, nil},
		{`UPDATE target SET vars = '{"first_name": "Mallory"}' WHERE list_id = (SELECT list_id FROM plan WHERE id = $1)`, []any{planID}},
		{`UPDATE target SET target = 'attacker@example.com' WHERE list_id = (SELECT list_id FROM plan WHERE id = $1) AND ordinal = 1`, []any{planID}},
		{`DELETE FROM target WHERE list_id = (SELECT list_id FROM plan WHERE id = $1) AND ordinal = 5`, []any{planID}},
		{`TRUNCATE target`, nil},
		{`UPDATE target_list SET target_count = 4 WHERE id = (SELECT list_id FROM plan WHERE id = $1)`, []any{planID}},
		{`DELETE FROM target_list WHERE id = (SELECT list_id FROM plan WHERE id = $1)`, []any{planID}},
		{`UPDATE approval SET approver_id = approver_id WHERE campaign_id = $1`, []any{id}},
		{`DELETE FROM approval WHERE campaign_id = $1`, []any{id}},
		{`TRUNCATE approval`, nil},
		{`UPDATE campaign_event SET reason = 'rewritten history' WHERE campaign_id = $1`, []any{id}},
		{`DELETE FROM campaign_event WHERE campaign_id = $1`, []any{id}},
		{`TRUNCATE campaign_event CASCADE`, nil}, // notifications name their trail entries
		{`UPDATE run SET job_count = 0 WHERE plan_id = $1`, []any{planID}},
		{`DELETE FROM run WHERE plan_id = $1`, []any{planID}},
		{`DELETE FROM campaign WHERE id = $1`, []any{id}},
	} {
		_, err := b.pool.Exec(b.ctx, stmt.sql, stmt.args...)
		requireSQLState(t, err, "OP001")
	}

	// Everything is as it was frozen.
	p, err := plan.GetPlan(b.ctx, b.pool, planID)
	require.NoError(t, err)
	require.Equal(t, sub.PlanHash, p.Hash)
	require.Equal(t, payload, p.Payload)
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM plan_target WHERE plan_id = $1 AND vars->>'first_name' <> 'Mallory'`, planID))
}

// A draft's list that no plan froze may be replaced, and the old one is
// cleared away; a frozen one stays.
func TestReplacedDraftListIsRemovedButFrozenListStays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 5)
	id := created.Campaign.ID
	first := created.Draft.ListID

	res, err := b.svc.ImportTargets(b.ctx, b.proposer, id, csvTargets(7))
	require.NoError(t, err)
	require.Equal(t, 7, res.Draft.TargetCount)
	require.Zero(t, b.count(t, `SELECT count(*) FROM target WHERE list_id = $1`, first))

	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	frozen := res.Draft.ListID

	// Importing into the approved campaign makes version 2 with a new list.
	res2, err := b.svc.ImportTargets(b.ctx, b.proposer, id, csvTargets(9))
	require.NoError(t, err)
	require.Equal(t, 2, res2.Campaign.Version)
	require.Equal(t, 7, b.count(t, `SELECT count(*) FROM target WHERE list_id = $1`, frozen))
}
