package approval_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestHostileSuppressionHistoryIsWriteOnce: the application role may add
// to the suppression list and take an address off with a removal of its
// own, but never rewrite or delete an entry, a removal or a suppressed
// target's outcome — so a compromised server cannot quietly mail someone
// who unsubscribed by erasing the record — and it may not record a
// suppressed outcome for a target with another target's key.
func TestHostileSuppressionHistoryIsWriteOnce(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	_, p := h.approved(t, 1, 2)
	var first string
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT target FROM target WHERE list_id = $1 AND ordinal = 1`, p.ListID).Scan(&first))
	e, _, err := suppression.Add(h.ctx, h.app, suppression.AddParams{
		Address: first, Reason: suppression.Complaint, Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	_, err = h.app.Exec(h.ctx, `INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner)
		SELECT $1, t.ordinal, t.key, $2, 'test' FROM target t WHERE t.list_id = $3 AND t.ordinal = 1`, p.ID, e.ID, p.ListID)
	require.NoError(t, err, "the claim's record, as the claim writes it")
	_, err = suppression.Remove(h.ctx, h.admin, first, "admin@example.com", "asked to be mailed again")
	require.NoError(t, err)

	for _, stmt := range []string{
		`UPDATE suppression SET reason = 'manual'`,
		`UPDATE suppression SET address = 'someone@example.com'`,
		`DELETE FROM suppression`,
		`TRUNCATE suppression CASCADE`,
		`UPDATE suppression_removal SET reason = 'x'`,
		`DELETE FROM suppression_removal`,
		`UPDATE target_suppressed SET ordinal = 2`,
		`DELETE FROM target_suppressed`,
	} {
		h.refusedSuppression(t, []string{insufficientPrivilege, writeOnce}, stmt)
	}
	// A suppressed outcome naming a plan target with the other target's key.
	h.refusedSuppression(t, []string{notApproved}, fmt.Sprintf(`INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner)
		SELECT %d, 2, t.key, %d, 'x' FROM target t WHERE t.list_id = %d AND t.ordinal = 1`, p.ID, e.ID, p.ListID))
}

// refusedSuppression is refused over the suppression tables: PostgreSQL
// refuses stmts as the application role at every isolation level, and
// nothing in them changes.
func (h *hostile) refusedSuppression(t *testing.T, codes []string, stmts ...string) {
	t.Helper()
	snapshot := func() string {
		var s string
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT
			(SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM suppression x) || '|' ||
			(SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM suppression_removal x) || '|' ||
			(SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM target_suppressed x)`).Scan(&s))
		return s
	}
	before := snapshot()
	for _, iso := range isolationLevels {
		pgErr := h.attack(t, iso, stmts...)
		require.Containsf(t, codes, pgErr.Code, "%v at %s: refused with %s (%s)", stmts, iso, pgErr.Code, pgErr.Message)
	}
	require.Equal(t, before, snapshot(), "a refused attack changes nothing")
}
