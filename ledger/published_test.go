package ledger_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestEffectAttemptIsTheLedgersRead: the attempts other packages' statements
// read (effect_attempt, migration 0030) are the ledger's own read of each,
// column for column (Store.Get), in every state.
func TestEffectAttemptIsTheLedgersRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)
	states := []ledger.State{ledger.StateFailed, ledger.StateRevoked, ledger.StateUnknown}
	var ids []int64
	for _, s := range states {
		ids = append(ids, b.effectIn(t, key, s))
	}
	ids = append(ids, b.effectIn(t, newKey(t), ledger.StateStranded), b.effectIn(t, newKey(t), ledger.StatePending))
	rows, err := b.pool.Query(b.ctx, `
		SELECT e.id, e.key, e.epoch, e.state, e.attempt, e.owner, coalesce(e.job_id, 0), coalesce(e.plan_id, 0), coalesce(e.ordinal, 0),
		       coalesce(e.receipt, ''), coalesce(e.reason, ''), coalesce(e.resolved_by, ''), coalesce(e.resolution, ''),
		       coalesce(e.revoked_by, ''), coalesce(e.revoke_reason, ''), coalesce(e.failure, ''), e.created_at, e.updated_at, e.settled_at
		FROM effect_attempt() e WHERE e.id = ANY ($1) ORDER BY e.id`, ids)
	require.NoError(t, err)
	published, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Effect, error) {
		var (
			e                   ledger.Effect
			key, state, failure string
			settled             *time.Time
		)
		err := r.Scan(&e.ID, &key, &e.Epoch, &state, &e.Attempt, &e.Owner, &e.JobID, &e.PlanID, &e.Ordinal,
			&e.Receipt, &e.Reason, &e.ResolvedBy, &e.Resolution, &e.RevokedBy, &e.RevokeReason, &failure,
			&e.CreatedAt, &e.UpdatedAt, &settled)
		e.Key, e.State, e.Failure = ledger.Key(key), ledger.State(state), ledger.Failure(failure)
		if settled != nil {
			e.SettledAt = *settled
		}
		return e, err
	})
	require.NoError(t, err)
	require.Len(t, published, len(ids))
	for i, id := range ids {
		own, err := b.store.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, own, published[i], "attempt %d", id)
	}
}

// TestLatestResponseIsTheLedgersNewest: effect_latest_response (migration
// 0030), which a single effect's status reads, is the last of the ledger's
// own list of an attempt's raw answers (Store.Responses), and nothing for
// an attempt with none.
func TestLatestResponseIsTheLedgersNewest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	answered := b.effectIn(t, newKey(t), ledger.StateUnknown)
	for _, r := range []struct {
		kind ledger.ResponseKind
		body string
	}{{ledger.ResponseSend, "first"}, {ledger.ResponseProbe, "second"}} {
		_, err := b.store.RecordResponse(b.ctx, answered, r.kind, []byte(r.body))
		require.NoError(t, err)
	}
	silent := b.effectIn(t, newKey(t), ledger.StatePending)
	for _, id := range []int64{answered, silent} {
		all, err := b.store.Responses(b.ctx, id)
		require.NoError(t, err)
		var (
			body []byte
			kind string
		)
		err = b.pool.QueryRow(b.ctx, `SELECT r.body, r.kind FROM effect_latest_response($1) r`, id).Scan(&body, &kind)
		if len(all) == 0 {
			require.ErrorIs(t, err, pgx.ErrNoRows, "attempt %d has no raw answer", id)
			continue
		}
		require.NoError(t, err)
		last := all[len(all)-1]
		require.Equal(t, string(last.Body), string(body))
		require.Equal(t, string(last.Kind), kind)
	}
}
