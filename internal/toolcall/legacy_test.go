package toolcall_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

// TestBeginFindsCallsBegunBeforeTheKeySpace: calls begun before single
// effects had a key space of their own (migration 0026) keep their keys.
// A runtime retrying one across the upgrade finds it under its old key —
// in flight, done, or failed and free — and never performs it a second
// time; a new call gets a key of the new space.
func TestBeginFindsCallsBegunBeforeTheKeySpace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := migrations.DownTo(b.ctx, b.owner, 25)
	require.NoError(t, err)

	// Three calls as the server wrote them then: the key is the v1 key of
	// the identity without the space member.
	identity := func(event string) ledger.KeyInput {
		return ledger.KeyInput{Event: event, Tool: "crm.set", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}}
	}
	oldKey := func(event string) ledger.Key {
		k, err := ledger.NewKey(identity(event))
		require.NoError(t, err)
		return k
	}
	begunThen := func(event, state string) {
		canonical, err := ledger.CanonicalJSON(identity(event))
		require.NoError(t, err)
		stmts := []string{
			`INSERT INTO tool_policy (tool, registered_by) VALUES ('crm.set', 'agent:owner@example.com') ON CONFLICT DO NOTHING`,
			`INSERT INTO tool_call (key, identity, tool, event, args, created_by) VALUES (@key, @identity, 'crm.set', @event, '{"v":1}', 'agent:owner@example.com')`,
			`INSERT INTO effect (key, owner) VALUES (@key, 'agent:owner@example.com')`,
			`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
				SELECT id, key, 0, 'agent:owner@example.com', now() + interval '1 minute' FROM effect WHERE key = @key`,
		}
		switch state {
		case "done":
			stmts = append(stmts, `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'then' FROM effect WHERE key = @key`,
				`UPDATE effect SET state = 'done', receipt = 'op-1' WHERE key = @key`)
		case "failed":
			stmts = append(stmts, `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'no' FROM effect WHERE key = @key`,
				`UPDATE effect SET state = 'failed', reason = 'refused', failure = 'retry' WHERE key = @key`)
		}
		args := pgx.NamedArgs{"key": string(oldKey(event)), "identity": string(canonical), "event": event}
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(b.ctx, s, args); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	begunThen("in-flight", "pending")
	begunThen("done", "done")
	begunThen("failed", "failed")
	_, err = migrations.Up(b.ctx, b.owner)
	require.NoError(t, err)

	attempts := func(key ledger.Key) int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effect WHERE key = $1`, string(key)).Scan(&n))
		return n
	}
	inFlight := b.begin(t, "crm.set", "in-flight", `{"v":1}`, time.Minute)
	require.Equal(t, toolcall.InDoubt, inFlight.Outcome)
	require.Equal(t, oldKey("in-flight"), inFlight.Status.Key)
	require.Equal(t, "pending", string(inFlight.Status.State))

	done := b.begin(t, "crm.set", "done", `{"v":1}`, time.Minute)
	require.Equal(t, toolcall.AlreadyDone, done.Outcome)
	require.Equal(t, oldKey("done"), done.Status.Key)
	require.Equal(t, "op-1", done.Status.Receipt)
	_, err = b.svc.Begin(b.ctx, b.agent, toolcall.BeginParams{Identity: identity("done"), Args: []byte(`{"v":2}`)})
	require.ErrorIs(t, err, toolcall.ErrArgsMismatch, "still bound to its args")

	again := b.begin(t, "crm.set", "failed", `{"v":1}`, time.Minute)
	require.Equal(t, toolcall.Perform, again.Outcome, "failed then: nothing happened, and the key is free")
	require.Equal(t, oldKey("failed"), again.Status.Key)
	require.Equal(t, 2, attempts(oldKey("failed")))

	for _, event := range []string{"in-flight", "done", "failed"} {
		newKey, _, err := toolcall.KeyOf(b.agent.UserID, identity(event))
		require.NoError(t, err)
		require.Zero(t, attempts(newKey), "%s: nothing under the new key", event)
	}
	fresh := b.begin(t, "crm.set", "after", `{"v":1}`, time.Minute)
	want, _, err := toolcall.KeyOf(b.agent.UserID, identity("after"))
	require.NoError(t, err)
	require.Equal(t, want, fresh.Status.Key)
	require.NotEqual(t, oldKey("after"), fresh.Status.Key)
}
