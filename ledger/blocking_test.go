package ledger

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
)

// TestBlockingStatesAreTheDatabases: the ledger's own statements name the
// states that hold a key (blockingStates) as the unique index
// effect_one_blocking does, and every other package asks the database's
// effect_blocks: the three agree on every state.
func TestBlockingStatesAreTheDatabases(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rows, err := pool.Query(t.Context(), `
		SELECT s::text, s IN `+blockingStates+`, effect_blocks(s),
		       strpos((SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i WHERE i.indexrelid = 'effect_one_blocking'::regclass),
		              quote_literal(s) || '::effect_state') > 0
		FROM unnest(enum_range(NULL::effect_state)) s`)
	require.NoError(t, err)
	var blocking []string
	for rows.Next() {
		var state string
		var here, function, index bool
		require.NoError(t, rows.Scan(&state, &here, &function, &index))
		require.Equal(t, here, function, "effect_blocks(%s)", state)
		require.Equal(t, here, index, "effect_one_blocking's predicate names %s", state)
		if here {
			blocking = append(blocking, state)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"pending", "done", "unknown", "stranded"}, blocking)
}
