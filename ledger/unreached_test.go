package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// TestUnreachedOnlyWhenNoAttemptReachedTheProvider: "never reached the
// provider" (failure unreached) is refused by PostgreSQL, to the server's
// own role in plain SQL, on an attempt whose key and epoch have an earlier
// attempt that is not recorded as unsent — one that may have reached the
// provider (docs/ARCHITECTURE.md, "Failures: final or not"); after only
// unsent attempts it is accepted, and OnlyUnsentBefore says the same.
func TestUnreachedOnlyWhenNoAttemptReachedTheProvider(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	owner, app := pgtest.NewPool(t, db.Admin), pgtest.NewPool(t, db.App)
	b := &bundle{ctx: context.Background(), pool: owner, store: ledger.NewStore(owner)}

	// attempt inserts an attempt at key with its raw answer (as the superuser:
	// the server's role writes attempts only for a plan or a tool call),
	// and fails it with failure as the application role.
	attempt := func(key ledger.Key, failure string) (int64, error) {
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'sql') RETURNING id`, string(key)).Scan(&id))
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect_response (effect_id, kind, body) VALUES ($1, 'send', 'transport-error wrote-request=false')`, id)
		require.NoError(t, err)
		_, err = app.Exec(b.ctx, `UPDATE effect SET state = 'failed', reason = 'not sent: connection refused', failure = $2 WHERE id = $1`, id, failure)
		return id, err
	}

	// Two tries that never left, then the last: unreached holds.
	key := newKey(t)
	for range 2 {
		_, err := attempt(key, "unsent")
		require.NoError(t, err)
	}
	id, err := attempt(key, "unreached")
	require.NoError(t, err)
	only, err := b.store.OnlyUnsentBefore(b.ctx, key, 0, id)
	require.NoError(t, err)
	require.True(t, only)

	// One earlier try reached the provider (a retry, as after a 408, or an
	// over-quota answer): the last may be exhausted, never unreached.
	for _, reached := range []string{"retry", "quota"} {
		key := newKey(t)
		_, err := attempt(key, "unsent")
		require.NoError(t, err)
		_, err = attempt(key, reached)
		require.NoError(t, err)
		id, err := attempt(key, "unreached")
		requireSQLState(t, err, "OP004", "unreached after a %s attempt", reached)
		_, err = app.Exec(b.ctx, `UPDATE effect SET state = 'failed', reason = 'not sent: connection refused', failure = 'exhausted' WHERE id = $1`, id)
		require.NoError(t, err, "the same attempt, given up")
		only, err := b.store.OnlyUnsentBefore(b.ctx, key, 0, id)
		require.NoError(t, err)
		require.False(t, only, "after a %s attempt", reached)
	}

	// A failure the ledger does not know is refused as before.
	id, err = attempt(newKey(t), "lost")
	requireSQLState(t, err, "23514")
	_, err = b.store.Settle(b.ctx, ledger.SettleParams{EffectID: id, State: ledger.StateFailed, Reason: "x", Failure: "lost"})
	require.ErrorIs(t, err, ledger.ErrMissingEvidence)
}
