package audit_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
)

// TestAuditNamesRowsTheGateWouldHaveRefused: a database upgraded to the
// gate (migration 0024) may hold older rows that PostgreSQL now refuses —
// an attempt made after the campaign was cancelled, one made while the
// address was suppressed, a suppressed outcome citing another address's
// entry. The audit names each in a sentence and does not hold, though
// every attempt is done.
func TestAuditNamesRowsTheGateWouldHaveRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.f
	c := f.Campaign("legacy", audittest.Addresses(4))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }
	f.Attempt(tg(1), ledger.StateDone)
	other, _, err := suppression.Add(b.ctx, f.Pool, suppression.AddParams{Address: "someone-else@example.com",
		Reason: suppression.Complaint, Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	_, _, err = suppression.Add(b.ctx, f.Pool, suppression.AddParams{Address: tg(3).Address,
		Reason: suppression.Unsubscribed, Source: suppression.FromUnsubscribe})
	require.NoError(t, err)
	_, err = f.Service.Cancel(b.ctx, f.Operator, c.ID, "wrong list")
	require.NoError(t, err)

	// What the database accepted before the gate: this database "was
	// upgraded" an hour from now, and the rows are written with the
	// gate's checks switched off, as they then were.
	err = pgx.BeginFunc(b.ctx, f.Pool, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`UPDATE onceplan_migration SET applied_at = now() + interval '1 hour' WHERE version = 24`,
			`ALTER TABLE effect DISABLE TRIGGER effect_insert_gate`,
			`ALTER TABLE target_suppressed DISABLE TRIGGER target_suppressed_insert`,
		} {
			if _, err := tx.Exec(b.ctx, sql); err != nil {
				return err
			}
		}
		for _, o := range []int{2, 3} {
			var id int64
			if err := tx.QueryRow(b.ctx, `INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ($1, 'x', $2, $3) RETURNING id`,
				string(tg(o).Key), c.PlanID, o).Scan(&id); err != nil {
				return err
			}
			if _, err := tx.Exec(b.ctx, `INSERT INTO effect_response (effect_id, kind, body) VALUES ($1, 'send', 'ok')`, id); err != nil {
				return err
			}
			if _, err := tx.Exec(b.ctx, `UPDATE effect SET state = 'done', receipt = 'r' WHERE id = $1`, id); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(b.ctx, `INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner) VALUES ($1, 4, $2, $3, 'x')`,
			c.PlanID, string(tg(4).Key), other.ID); err != nil {
			return err
		}
		for _, sql := range []string{
			`ALTER TABLE effect ENABLE TRIGGER effect_insert_gate`,
			`ALTER TABLE target_suppressed ENABLE TRIGGER target_suppressed_insert`,
		} {
			if _, err := tx.Exec(b.ctx, sql); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)

	m, err := audit.ForCampaign(b.ctx, f.Pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, 3, m.ExactlyOnce, "every attempt is done")
	require.Equal(t, 1, m.Suppressed)
	require.Equal(t, 3, m.Ungated)
	require.False(t, m.Holds)
	require.Contains(t, m.Headline(), "3 decided by a row the gate refuses")
	var kinds []string
	for _, u := range m.UngatedRows {
		kinds = append(kinds, u.Kind)
	}
	require.ElementsMatch(t, []string{audit.UngatedClosed, audit.UngatedClosed, audit.UngatedSuppressed, audit.UngatedNotItsOwn}, kinds)
	require.Contains(t, m.Reasons, "2 targets have attempts made while the campaign was not running that plan (its last decision before: cancel)"+
		": rows that decided a target's fate without a person or the plan, written before PostgreSQL refused them: "+
		"#2 "+tg(2).Address+" at "+m.UngatedRows[0].At.UTC().Format("2006-01-02T15:04:05Z07:00")+", "+
		"#3 "+tg(3).Address+" at "+m.UngatedRows[1].At.UTC().Format("2006-01-02T15:04:05Z07:00")+
		"; find out who wrote it, and resolve or resend those targets.")
}
