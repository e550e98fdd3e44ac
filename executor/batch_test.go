package executor_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// TestWritePlansUseIndexesOnly: the sessions the write batches run on keep
// the plan each statement gets at its first flush for the connection's
// whole life (newWritePool). Made on an empty ledger, as on a fresh
// install, every plan must still be right once the ledger holds millions
// of rows: no sequential scan, and no index read from end to end (every
// index node has a condition).
//
// Twice: on tables never analyzed (a fresh install), and after a campaign
// ran and VACUUM ANALYZE saw the tables that stay empty for long
// (suppressions and their removals, suppressed targets, bumps) empty —
// where every index of those is as cheap as any other, and a plan once
// walked every suppression entry in id order looking for the address.
func TestWritePlansUseIndexesOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t) // a fresh, empty database
	pool := pgtest.NewPool(t, urls.App)
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			admin := pgtest.NewPool(t, urls.Admin)
			_, err := audittest.Seed(ctx, admin, 2000)
			require.NoError(t, err)
			_, err = admin.Exec(ctx, `VACUUM ANALYZE`)
			require.NoError(t, err)
		}
		writes := executor.NewWritePool(pool) // new sessions: plans made now
		conn, err := writes.Acquire(ctx)
		require.NoError(t, err)
		for _, st := range ledger.BatchStatements(executor.ClaimGate) {
			_, err := conn.Exec(ctx, "PREPARE "+st.Name+" AS "+st.SQL)
			require.NoError(t, err, st.Name)
			var out []byte
			require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+st.Name+st.EmptyArgs).Scan(&out), st.Name)
			var nodes []string
			pgtest.ParsePlan(t, out).Walk(func(n pgtest.PlanNode) {
				nodes = append(nodes, n.Type+" "+n.Relation+" "+n.Index)
				switch n.Type {
				case "Seq Scan":
					t.Errorf("%s (analyzed %v): the plan made on an empty ledger scans %s from start to end", st.Name, analyzed, n.Relation)
				case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
					// "x IS NOT NULL" alone is no condition: min(x) rewritten
					// as a walk of the whole index.
					whole := n.IndexCond == "" || strings.HasSuffix(n.IndexCond, "IS NOT NULL)") && !strings.Contains(n.IndexCond, " = ")
					// Analyzed while nearly empty, campaign, plan and
					// target_suppressed are still read whole by this plan
					// (every index of a one-row table is as cheap as any
					// other): left for now (docs/BENCHMARKS.md). The
					// suppression tables, which grow with every bounce and
					// unsubscribe, must never be.
					if whole && (!analyzed || strings.HasPrefix(n.Index, "suppression")) {
						t.Errorf("%s (analyzed %v): the plan made on an empty ledger reads all of index %s (%s)", st.Name, analyzed, n.Index, n.IndexCond)
					}
				}
			})
			t.Logf("%s (analyzed %v): %v", st.Name, analyzed, nodes)
		}
		conn.Release()
		writes.Close()
	}
}
