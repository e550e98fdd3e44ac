package migrations_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestHostileLeaseMovedBackwards: the application role moves a live
// dedupe lease into the past (or just shortens it) to take the call over
// while its holder still performs it: two performers of one key.
// PostgreSQL refuses it at every isolation level; only the holder's
// extension and expiry by time exist, and a takeover still works once the
// lease has really ended.
func TestHostileLeaseMovedBackwards(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	_, err := h.owner.Exec(h.ctx, `INSERT INTO tool_policy (tool, recovery, first_use, registered_by) VALUES ('crm.set', 'dedupe', false, 'admin')`)
	require.NoError(t, err)
	key, identity, err := toolcall.KeyOf(h.mallory.UserID, ledger.KeyInput{Event: "run-1", Tool: "crm.set", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}})
	require.NoError(t, err)
	h.commit(t, holdKey("crm.set", "run-1", string(key), string(identity))[1:]...)
	q := quote(string(key))
	takeover := `UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = 'agent:mallory@example.com',
		lease_until = now() + interval '1 minute', takeovers = takeovers + 1 WHERE key = ` + q
	for _, back := range []string{
		`UPDATE tool_attempt SET lease_until = now() - interval '1 second' WHERE key = ` + q,
		`UPDATE tool_attempt SET lease_until = lease_until - interval '1 second' WHERE key = ` + q,
		`UPDATE tool_attempt SET lease_until = now() WHERE key = ` + q,
		`UPDATE tool_attempt SET lease_until = '-infinity' WHERE key = ` + q,
	} {
		h.refused(t, []string{"OP007"}, back)
		h.refused(t, []string{"OP007"}, back, takeover)
	}
	h.refused(t, []string{"OP007"}, takeover)
	// Nor held for ever.
	h.refused(t, []string{"OP007"}, `UPDATE tool_attempt SET lease_until = 'infinity' WHERE key = `+q)
	h.refused(t, []string{"OP007"}, `UPDATE tool_attempt SET lease_until = now() + interval '2 hours' WHERE key = `+q)

	// The holder's heartbeat extends it.
	_, err = h.app.Exec(h.ctx, `UPDATE tool_attempt SET lease_until = now() + interval '2 minutes' WHERE key = $1`, string(key))
	require.NoError(t, err)

	// A lease that really ended: no heartbeat revives it, and a takeover
	// (a new lease that counts) is allowed.
	short, shortIdentity, err := toolcall.KeyOf(h.mallory.UserID, ledger.KeyInput{Event: "run-2", Tool: "crm.set", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}})
	require.NoError(t, err)
	stmts := holdKey("crm.set", "run-2", string(short), string(shortIdentity))[1:]
	stmts[2] = strings.Replace(stmts[2], "interval '1 minute'", "interval '200 milliseconds'", 1)
	h.commit(t, stmts...)
	await.Until(t, 10*time.Second, "the short lease to end by the database's clock", func() bool {
		var ended bool
		return h.app.QueryRow(h.ctx, `SELECT lease_until < now() FROM tool_attempt WHERE key = $1`, string(short)).Scan(&ended) == nil && ended
	})
	qs := quote(string(short))
	h.refused(t, []string{"OP007"}, `UPDATE tool_attempt SET lease_until = now() + interval '1 minute' WHERE key = `+qs)
	h.refused(t, []string{"OP007"}, `UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = 'agent:b', lease_until = now() - interval '1 second', takeovers = takeovers + 1 WHERE key = `+qs)
	_, err = h.app.Exec(h.ctx, strings.ReplaceAll(takeover, q, qs))
	require.NoError(t, err, "a takeover of a lease that ended")
}
