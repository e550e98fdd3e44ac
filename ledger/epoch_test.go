package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/ledger"
)

// TestBumpedEpochIsTheCurrentEpoch: the set form of the current epoch
// (effect_bumped_epoch, joined and 0 where it has no row) gives every key
// the epoch the per-key form (effect_current_epoch) and Store.CurrentEpoch
// do — 0 for a key never bumped, the latest bump's for the others.
func TestBumpedEpochIsTheCurrentEpoch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys := []ledger.Key{newKey(t), newKey(t), newKey(t)}
	for i, k := range keys {
		for range i {
			_, err := b.store.Bump(b.ctx, ledger.BumpParams{Key: k, ActorKind: ledger.ActorHuman, Actor: "user:op", Reason: "asked again"})
			require.NoError(t, err)
		}
	}
	rows, err := b.pool.Query(b.ctx, `SELECT v.key, one.epoch, coalesce(bumped.epoch, 0)
		FROM unnest($1::text[]) WITH ORDINALITY v(key, n)
		CROSS JOIN LATERAL effect_current_epoch(v.key) one
		LEFT JOIN effect_bumped_epoch() bumped ON bumped.key = v.key
		ORDER BY v.n`,
		[]string{string(keys[0]), string(keys[1]), string(keys[2])})
	require.NoError(t, err)
	var got [][3]int
	var (
		key      string
		one, set int
	)
	for rows.Next() {
		require.NoError(t, rows.Scan(&key, &one, &set))
		store, err := b.store.CurrentEpoch(b.ctx, ledger.Key(key))
		require.NoError(t, err)
		got = append(got, [3]int{one, set, store})
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][3]int{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}}, got)
}

// TestSuppressedInPlanIsTheDatabases: the claim's own condition that a
// plan's target was recorded as suppressed (suppressedInPlan) and the
// database's target_suppressed_in, which other packages ask, agree on
// every target of a plan with one recorded and of a plan with none.
func TestSuppressedInPlanIsTheDatabases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seeded, err := audittest.Seed(b.ctx, b.pool, 4)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `
		WITH s AS (INSERT INTO suppression (address, reason, source, actor) VALUES ('person2@example.com', 'manual', 'actor', 'user:op') RETURNING id)
		INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner)
		SELECT p.id, t.ordinal, t.key, s.id, 'test' FROM plan p JOIN target t ON t.list_id = p.list_id AND t.ordinal = 2, s
		WHERE p.id = $1`, seeded.PlanID)
	require.NoError(t, err)
	rows, err := b.pool.Query(b.ctx, `
		SELECT p.id, o, `+ledger.SuppressedInPlan("p.id", "o")+`,
		       EXISTS (SELECT 1 FROM target_suppressed_in(p.id) ts WHERE ts.ordinal = o)
		FROM unnest(ARRAY[$1::bigint, $1 + 1000000]) p(id), generate_series(1, 4) o ORDER BY 1, 2`, seeded.PlanID)
	require.NoError(t, err)
	var suppressed []int
	for rows.Next() {
		var (
			planID          int64
			ordinal         int
			claim, function bool
		)
		require.NoError(t, rows.Scan(&planID, &ordinal, &claim, &function))
		require.Equal(t, claim, function, "plan %d, target %d", planID, ordinal)
		if claim {
			require.Equal(t, seeded.PlanID, planID)
			suppressed = append(suppressed, ordinal)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{2}, suppressed)
}
