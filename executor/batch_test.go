package executor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// TestWritePlansUseIndexesOnly: the sessions the write batches run on keep
// the plan each statement gets at its first flush for the connection's
// whole life (newWritePool). Made on an empty ledger, as on a fresh
// install, every plan must still be right once the ledger holds millions
// of rows: no sequential scan, and no index read from end to end (every
// index node has a condition).
func TestWritePlansUseIndexesOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.AppPool(t) // a fresh, empty database
	writes := newWritePool(pool)
	t.Cleanup(writes.Close)
	conn, err := writes.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	for _, st := range ledger.BatchStatements(gate) {
		_, err := conn.Exec(ctx, "PREPARE "+st.Name+" AS "+st.SQL)
		require.NoError(t, err, st.Name)
		var out []byte
		require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+st.Name+st.EmptyArgs).Scan(&out), st.Name)
		var nodes []string
		pgtest.ParsePlan(t, out).Walk(func(n pgtest.PlanNode) {
			nodes = append(nodes, n.Type+" "+n.Relation+" "+n.Index)
			switch n.Type {
			case "Seq Scan":
				t.Errorf("%s: the plan made on an empty ledger scans %s from start to end", st.Name, n.Relation)
			case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
				if n.IndexCond == "" {
					t.Errorf("%s: the plan made on an empty ledger reads all of index %s", st.Name, n.Index)
				}
			}
		})
		t.Logf("%s: %v", st.Name, nodes)
	}
}
