package audit_test

// What the server's role could still forge when it wrote a plan — or what a
// database frozen before migration 0014 may hold — the audit finds from the
// frozen rows themselves (docs/ARCHITECTURE.md, "The audit"). Each test
// tampers as the owner would have to now, with the triggers that refuse it
// switched off, and requires the audit to say the plan is not intact, why,
// and never to count a target twice or a missing one below zero.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// tamper runs sql with target's user triggers off, as the owner of an old
// database could have.
func (b *bundle) tamper(t *testing.T, sql string, args ...any) {
	t.Helper()
	err := pgx.BeginFunc(b.ctx, b.f.Pool, func(tx pgx.Tx) error {
		for _, s := range []string{`ALTER TABLE target DISABLE TRIGGER USER`} {
			if _, err := tx.Exec(b.ctx, s); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(b.ctx, sql, args...); err != nil {
			return err
		}
		_, err := tx.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE; ALTER TABLE target ENABLE TRIGGER USER`)
		return err
	})
	require.NoError(t, err)
}

// listOf is the target list the campaign's plan froze.
func (b *bundle) listOf(t *testing.T, c audittest.Campaign) int64 {
	t.Helper()
	var list int64
	require.NoError(t, b.f.Pool.QueryRow(b.ctx, `SELECT list_id FROM plan WHERE id = $1`, c.PlanID).Scan(&list))
	return list
}

func (b *bundle) doneAll(c audittest.Campaign) {
	for _, tg := range c.Targets {
		b.f.Attempt(tg, ledger.StateDone)
	}
}

func TestIntactPlanHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("intact", audittest.Addresses(3))
	b.doneAll(c)
	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	p, err := plan.GetPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	require.True(t, m.PlanIntact)
	require.True(t, m.Holds)
	require.Empty(t, m.Reasons)
	require.Equal(t, audit.Integrity{Rows: 3, PlanHash: p.Hash, ApprovedHash: p.Hash, Approvals: 1, RequiredApprovals: 1}, m.Integrity)
}

// Finding 1 as an old database may hold it: a fourth target added to a
// three-target plan, sent by an ordinary resume. The counts never go
// below zero, and the verdict says what happened.
func TestAuditFindsAnAddedTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("added", audittest.Addresses(3))
	b.doneAll(c)
	list := b.listOf(t, c)
	_, key, err := plan.TargetKey(c.ID, "email.send", "mallory@example.com")
	require.NoError(t, err)
	b.tamper(t, `INSERT INTO target (list_id, list_xact, ordinal, target, key, line)
		SELECT id, created_xact, 4, 'mallory@example.com', $2, 5 FROM target_list WHERE id = $1`, list, string(key))
	b.f.Attempt(audittest.Target{PlanID: c.PlanID, Ordinal: 4, Address: "mallory@example.com", Key: key}, ledger.StateDone)

	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.PlanIntact)
	require.False(t, m.Holds)
	require.Equal(t, 4, m.Integrity.Rows)
	require.NotEqual(t, m.Integrity.ApprovedHash, m.Integrity.PlanHash)
	require.Equal(t, 3, m.Approved)
	require.Zero(t, m.Missing, "never negative")
	require.Contains(t, m.Reasons[0], "The plan is not intact: its frozen rows hash to")
	require.Contains(t, m.Reasons[0], "its list holds 4 target rows where 3 were approved")
	require.Contains(t, strings.Join(m.Reasons, " "), "the ledger counts 1 effect more for it than it has approved targets")
	require.Equal(t, "4/3 exactly once; does not hold: plan not intact", m.Headline())
}

// A row whose address was swapped: the digest covers keys, not addresses,
// so only the key check sees that it sends to one address and counts as
// another.
func TestAuditFindsASwappedAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("swapped", audittest.Addresses(3))
	list := b.listOf(t, c)
	b.tamper(t, `UPDATE target SET target = 'mallory@example.com' WHERE list_id = $1 AND ordinal = 2`, list)
	b.doneAll(c)

	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.PlanIntact)
	require.Equal(t, m.Integrity.ApprovedHash, m.Integrity.PlanHash, "the digest does not cover addresses")
	require.Equal(t, 1, m.Integrity.WrongKeys)
	require.Equal(t, 2, m.Integrity.FirstWrongKey)
	require.Equal(t, []string{"The plan is not intact: 1 target row carries a key that is not its address's (first: target #2); " +
		"such a row sends to one address and is counted as another."}, m.Reasons)
}

// Finding 2 as an old database may hold it: two frozen targets deleted.
func TestAuditFindsDeletedTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("deleted", audittest.Addresses(5))
	list := b.listOf(t, c)
	b.tamper(t, `DELETE FROM target WHERE list_id = $1 AND ordinal IN (2, 4)`, list)
	for _, tg := range c.Targets {
		if tg.Ordinal != 2 && tg.Ordinal != 4 {
			b.f.Attempt(tg, ledger.StateDone)
		}
	}
	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.PlanIntact)
	require.Equal(t, []int{5, 3, 2, 3}, []int{m.Approved, m.ExactlyOnce, m.Missing, m.Integrity.Rows})
	require.Contains(t, m.Reasons[0], "its list holds 3 target rows where 5 were approved")
	require.Contains(t, m.Reasons[1], "2 targets have no effect of their own")
}

// The variables of a frozen row changed: the digest covers them.
func TestAuditFindsChangedVariables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("vars", audittest.Addresses(2))
	b.doneAll(c)
	list := b.listOf(t, c)
	b.tamper(t, `UPDATE target SET vars = '{"first_name": "Mallory"}' WHERE list_id = $1 AND ordinal = 1`, list)
	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.PlanIntact)
	require.False(t, m.Holds)
	require.Equal(t, 2, m.Integrity.Rows)
	require.Contains(t, m.Reasons[0], "rows were added, removed or changed since it was approved")
}

// The audit reads the rows and counts the targets in one snapshot, also
// when it runs them on two connections at once.
func TestAuditReadsOneSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("snapshot", audittest.Addresses(50))
	b.doneAll(c)
	// A pool too small to split the work runs it in one transaction; the
	// answer is the same.
	m1, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	err = pgx.BeginFunc(b.ctx, b.f.Pool, func(tx pgx.Tx) error {
		m2, err := audit.ForCampaign(context.Background(), tx, c.ID)
		require.Equal(t, m1, m2)
		return err
	})
	require.NoError(t, err)
	require.True(t, m1.Holds, fmt.Sprint(m1.Reasons))
}
