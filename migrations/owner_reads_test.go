package migrations_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
)

// TestOwnerReadsAreInlined: every set-returning SQL function an owner
// states a read or a rule in (migrations 0027, 0029, 0030;
// docs/ARCHITECTURE.md, "Where each rule lives") is one PostgreSQL inlines
// — called in FROM, the plan reads the tables themselves, with no function
// scan — and is PARALLEL SAFE, so a statement that names it keeps the plan
// it had with the table named, parallel plans included (migration 0027's
// three gate functions aside: only the claim's writes, never parallel,
// name them). A function
// declared STRICT, SECURITY DEFINER, VOLATILE or with a SET clause would
// be called as a black box instead, once per outer row.
func TestOwnerReadsAreInlined(t *testing.T) {
	gateOnly := map[string]bool{"campaign_running_plan": true, "onceplan_paused_queue": true, "target_suppression": true}
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	rows, err := pool.Query(ctx, `
		SELECT p.proname, p.proparallel::text,
		       coalesce((SELECT array_agg(format_type(a, NULL) ORDER BY n) FROM unnest(p.proargtypes) WITH ORDINALITY x(a, n)), '{}')
		FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		WHERE p.pronamespace = current_schema()::regnamespace AND p.proretset AND l.lanname = 'sql'
		ORDER BY 1`)
	require.NoError(t, err)
	type fn struct {
		name, parallel string
		args           []string
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		err := r.Scan(&f.name, &f.parallel, &f.args)
		return f, err
	})
	require.NoError(t, err)
	var names []string
	for _, f := range fns {
		names = append(names, f.name)
		args := make([]string, len(f.args))
		for i, a := range f.args {
			args[i] = "NULL::" + a
		}
		call := fmt.Sprintf("%s(%s)", f.name, strings.Join(args, ", "))
		if !gateOnly[f.name] {
			require.Equal(t, "s", f.parallel, "%s is not PARALLEL SAFE", call)
		}
		var out []byte
		require.NoError(t, pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT * FROM `+call).Scan(&out), call)
		pgtest.ParsePlan(t, out).Walk(func(n pgtest.PlanNode) {
			require.NotEqual(t, "Function Scan", n.Type, "%s is not inlined: %s", call, out)
		})
	}
	// The owners' reads of migration 0030 are among them.
	for _, want := range []string{"effect_attempt", "effect_latest_response", "target_suppressed_record", "frozen_plan",
		"target_list_summary", "list_target", "campaign_record", "campaign_draft", "campaign_submission",
		"campaign_approval", "campaign_run", "campaign_trail", "suppression_entry", "suppression_removed",
		"worker_heartbeat"} {
		require.Contains(t, names, want)
	}
}
