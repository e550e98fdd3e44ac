package main

// Scenario "audit": the exactly-once metric of a plan of N targets whose
// ledger holds one done effect per target plus failed attempts and a few
// of every other state (audit/audittest.Seed, as BenchmarkAuditMillion),
// against a count(*) of the ledger in the same run.

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
)

func benchAudit(ctx context.Context, pool *pgxpool.Pool, n int) error {
	t := time.Now()
	seeded, err := audittest.Seed(ctx, pool, n)
	if err != nil {
		return err
	}
	seeding := time.Since(t)
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE effect`); err != nil {
		return err
	}
	var rows int64
	countTime, err := bestOf(5, func() error { return pool.QueryRow(ctx, `SELECT count(*) FROM effect`).Scan(&rows) })
	if err != nil {
		return err
	}
	var m audit.Metric
	metricTime, err := bestOf(5, func() error { m, err = audit.ForPlan(ctx, pool, seeded.PlanID); return err })
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(m, seeded.Want) {
		return fmt.Errorf("the audit of the seeded plan says %+v, want %+v", m, seeded.Want)
	}
	fmt.Printf("audit: a %d-target plan, %d ledger rows (seeded in %s), best of 5\n", n, rows, seeding.Round(time.Second))
	fmt.Printf("  audit.ForPlan (rows read again + counted):   %s\n", metricTime.Round(time.Millisecond))
	fmt.Printf("  baseline SELECT count(*) FROM effect:        %s (%.1fx)\n", countTime.Round(time.Millisecond), metricTime.Seconds()/countTime.Seconds())
	record("5. audit", fmt.Sprintf("%s-target plan, %s ledger rows: `audit.ForPlan` (every frozen row read again and checked against the approved hash, every target counted, one snapshot) **%s**; `count(*)` of the ledger %s (%.1f×)",
		thousands(n), thousands(int(rows)), metricTime.Round(time.Millisecond), countTime.Round(time.Millisecond), metricTime.Seconds()/countTime.Seconds()),
		"≤ 1 s, or ≤ 0.2× count(*)", metricTime <= time.Second || metricTime <= countTime/5)
	return nil
}
