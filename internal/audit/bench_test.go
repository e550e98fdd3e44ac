package audit_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
)

// BenchmarkAuditMillion times the metric of a 1,000,000-target plan
// (AUDIT_BENCH_TARGETS overrides the size) and reports it against a
// count(*) of the ledger measured in the same run, as x_count: the machines
// are shared, so the ratio is what to compare. Seeding takes a few
// minutes and is not timed.
//
//	go run ./internal/tools/withpg -- go test -run '^$' -bench AuditMillion -benchtime 5x ./internal/audit/
func BenchmarkAuditMillion(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("AUDIT_BENCH_TARGETS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	ctx := context.Background()
	pool := pgtest.Pool(b)
	seeded, err := audittest.Seed(ctx, pool, n)
	require.NoError(b, err)

	var count time.Duration
	for range 5 {
		start := time.Now()
		var rows int
		require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM effect`).Scan(&rows))
		if d := time.Since(start); count == 0 || d < count {
			count = d
		}
	}

	var m audit.Metric
	for b.Loop() {
		m, err = audit.ForPlan(ctx, pool, seeded.PlanID)
		require.NoError(b, err)
	}
	require.Equal(b, seeded.Want, m)
	perOp := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(count.Nanoseconds()), "count_ns")
	b.ReportMetric(float64(perOp)/float64(count), "x_count")
}
