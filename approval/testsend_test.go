package approval_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestHostileTestMessageToASuppressedAddress: whether a reviewer gets a
// test message is decided where its row is written, for the server's own
// role too (migration 0039). As onceplan_app, in plain SQL, the server's
// write — a message to an address the suppression list does not hold, at
// READ COMMITTED, then the trail's entry naming it — is taken; PostgreSQL
// refuses, at every isolation level, the row of a suppressed address (in
// capitals too), any row at REPEATABLE READ or SERIALIZABLE (a snapshot
// that may predate an unsubscribe), a change to a recorded message, and
// a trail entry of a test send naming a message not recorded before it
// (another address, another campaign's, none at all).
func TestHostileTestMessageToASuppressedAddress(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	id := h.create(t, 1, 2).Campaign.ID
	other := h.create(t, 1, 2).Campaign.ID
	_, _, err := suppression.Add(h.ctx, h.app, suppression.AddParams{Address: "gone@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)

	key := func(n int) string { return fmt.Sprintf("v1:%064x", n) }
	message := func(k, campaign, addr string) string {
		return fmt.Sprintf(`INSERT INTO test_send_message (key, campaign_id, address, actor_id) VALUES ('%s', '%s', '%s', %d)`,
			k, campaign, addr, h.proposer.UserID)
	}
	trail := func(campaign, detail string) string {
		return fmt.Sprintf(`INSERT INTO campaign_event (campaign_id, action, actor_id, reason, detail) VALUES ('%s', 'test_send', %d, 'test send', '%s')`,
			campaign, h.proposer.UserID, detail)
	}
	delivery := func(addr, k string) string {
		return fmt.Sprintf(`{"deliveries":[{"to":"%s","key":"%s","outcome":"done"}]}`, addr, k)
	}

	// What the server writes: the message before the send, the trail after.
	_, err = h.app.Exec(h.ctx, message(key(1), id, "amy@example.com"))
	require.NoError(t, err, "a test message to an address nobody suppressed")
	_, err = h.app.Exec(h.ctx, trail(id, delivery("amy@example.com", key(1))))
	require.NoError(t, err, "the trail's entry naming it")

	snapshot := func() string {
		var s string
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT
			(SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM test_send_message x) || '|' ||
			(SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM campaign_event x)`).Scan(&s))
		return s
	}
	refused := func(levels []pgx.TxIsoLevel, codes []string, stmt string) {
		t.Helper()
		before := snapshot()
		for _, iso := range levels {
			pgErr := h.attack(t, iso, stmt)
			require.Containsf(t, codes, pgErr.Code, "%s at %s: refused with %s (%s)", stmt, iso, pgErr.Code, pgErr.Message)
		}
		require.Equal(t, before, snapshot(), "a refused attack changes nothing")
	}
	const gateClosed, checkViolation = "OP008", "23514"

	refused(isolationLevels, []string{gateClosed}, message(key(2), id, "gone@example.com"))
	refused(isolationLevels, []string{checkViolation, gateClosed}, message(key(3), id, "Gone@Example.com"))
	refused(isolationLevels[1:], []string{gateClosed}, message(key(4), id, "abe@example.com"))
	refused(isolationLevels, []string{insufficientPrivilege, writeOnce}, `UPDATE test_send_message SET address = 'gone@example.com'`)
	refused(isolationLevels, []string{insufficientPrivilege, writeOnce}, `DELETE FROM test_send_message`)
	refused(isolationLevels, []string{insufficientPrivilege, writeOnce}, `TRUNCATE test_send_message`)
	refused(isolationLevels, []string{gateClosed}, trail(id, delivery("gone@example.com", key(5))))
	refused(isolationLevels, []string{gateClosed}, trail(id, delivery("gone@example.com", key(1))))
	refused(isolationLevels, []string{gateClosed}, trail(other, delivery("amy@example.com", key(1))))
	refused(isolationLevels, []string{gateClosed}, trail(id, `{"to":["gone@example.com"]}`))
}
