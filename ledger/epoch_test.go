package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestCurrentEpochsJoinAgreesWithCurrentEpochOf: the set form of the
// current epoch gives every key the epoch the per-key form does — 0 for a
// key never bumped, the latest bump's for the others.
func TestCurrentEpochsJoinAgreesWithCurrentEpochOf(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys := []ledger.Key{newKey(t), newKey(t), newKey(t)}
	for i, k := range keys {
		for range i {
			_, err := b.store.Bump(b.ctx, ledger.BumpParams{Key: k, ActorKind: ledger.ActorHuman, Actor: "user:op", Reason: "asked again"})
			require.NoError(t, err)
		}
	}
	join, epoch := ledger.CurrentEpochsJoin("v.key", "cur")
	rows, err := b.pool.Query(b.ctx, `SELECT `+ledger.CurrentEpochOf("v.key")+`, `+epoch+`
		FROM unnest($1::text[]) WITH ORDINALITY v(key, n) `+join+` ORDER BY v.n`,
		[]string{string(keys[0]), string(keys[1]), string(keys[2])})
	require.NoError(t, err)
	var got [][2]int
	var one, set int
	for rows.Next() {
		require.NoError(t, rows.Scan(&one, &set))
		got = append(got, [2]int{one, set})
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][2]int{{0, 0}, {1, 1}, {2, 2}}, got)
}
