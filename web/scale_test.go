package web

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTargetPagesStayFastAtAMillion builds a million-target list with a
// ledger behind it and times every shape of the run page's query. It takes
// a minute of database work, so it runs only with ONCEPLAN_SCALE_TEST=1.
func TestTargetPagesStayFastAtAMillion(t *testing.T) {
	if os.Getenv("ONCEPLAN_SCALE_TEST") == "" {
		t.Skip("set ONCEPLAN_SCALE_TEST=1 to run (about a minute)")
	}
	b := setup(t)
	ctx := context.Background()
	c := b.draft(campaignOpts{Targets: csvOf(1)})
	const n = 1_000_000
	var listID int64
	start := time.Now()
	// A list's rows are written by the transaction that makes the list.
	require.NoError(t, b.pool.QueryRow(ctx, `
		WITH l AS (
			INSERT INTO target_list (campaign_id, target_count, digest, created_by)
			VALUES ($1, $2, repeat('0', 64), $3) RETURNING id
		), t AS (
			INSERT INTO target (list_id, ordinal, target, key, vars, line)
			SELECT l.id, i, 'user' || lpad(i::text, 7, '0') || '@example.com',
			       'v1:' || encode(sha256(('k' || i)::bytea), 'hex'), '{}', i + 1
			FROM l, generate_series(1, $2) i
		)
		SELECT id FROM l`, c.ID, n, b.as["proposer"].actor.UserID).Scan(&listID))
	// 300,000 done, 2,000 failed (spread out), 5 unknown near the end.
	_, err := b.pool.Exec(ctx, `
		INSERT INTO effect (key, owner)
		SELECT key, 'scale' FROM target WHERE list_id = $1 AND (ordinal <= 300000 OR ordinal % 500 = 7 OR ordinal > 999995)`, listID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', '\x00' FROM effect WHERE owner = 'scale'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `
		UPDATE effect e SET state = CASE WHEN t.ordinal > 999995 THEN 'unknown'::effect_state
		                                 WHEN t.ordinal <= 300000 THEN 'done'::effect_state ELSE 'failed'::effect_state END,
		       receipt = CASE WHEN t.ordinal <= 300000 THEN 'r' END,
		       reason = CASE WHEN t.ordinal > 300000 THEN 'x' END
		FROM target t WHERE t.list_id = $1 AND t.key = e.key AND e.owner = 'scale'`, listID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE target; ANALYZE effect; ANALYZE effect_bump`)
	require.NoError(t, err)
	t.Logf("built %d targets and their ledger in %s", n, time.Since(start).Round(time.Second))

	counts, err := queryCounts(ctx, b.pool, listID, n)
	require.NoError(t, err)
	for _, q := range []TargetQuery{
		{},
		{After: "999900"},
		{State: "done", After: "250000"},
		{State: "failed"},
		{State: "failed", After: "900000"},
		{State: "unknown"},
		{State: "not_started", After: "500000"},
		{Prefix: "user09999"},
		{Prefix: "user05", State: "failed"},
	} {
		q.ListID, q.Count, q.Limit, q.Counts = listID, n, 50, &counts
		start := time.Now()
		page, err := queryTargets(ctx, b.pool, q)
		took := time.Since(start)
		require.NoError(t, err)
		t.Logf("state=%-11q prefix=%-10q after=%-7s: %2d rows, next %q, %s", q.State, q.Prefix, q.After, len(page.Rows), page.Next, took.Round(time.Millisecond))
		require.Less(t, took, 2*time.Second, "%+v", q)
		require.NotEmpty(t, page.Rows, "%+v", q)
	}
	start = time.Now()
	counts, err = queryCounts(ctx, b.pool, listID, n)
	require.NoError(t, err)
	t.Logf("counts %+v in %s", counts, time.Since(start).Round(time.Millisecond))
	require.Equal(t, 300000, counts.Done)
	require.Equal(t, 5, counts.Unknown)
}
