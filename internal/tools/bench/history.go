package main

// Scenario "history": what a deployment's history costs its next
// campaign. One database holds the ledgers of many finished campaigns
// (audittest.Seed and Finish, one plan each: every attempt, raw answer and
// state of a real ledger, written through the ledger's triggers), another
// is empty; the same new campaign runs on each (the executor through an
// in-process no-op provider, as the exec scenario), alternating, and its
// audit is timed on each: once beside the history as it is, then with
// every finished campaign archived (onceplan archive) once, and with the
// hot tables' indexes rebuilt after it (onceplan compact), every round. The
// figures are the ratios history ÷ empty.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

// historyRounds is how many times the new campaign runs on each side,
// alternating; the medians are reported.
const historyRounds = 3

func benchHistory(ctx context.Context, pool *pgxpool.Pool, dbURL string, effects, campaigns, n int) error {
	if campaigns < 1 || effects < campaigns {
		return fmt.Errorf("history: %d effects across %d campaigns", effects, campaigns)
	}
	empty, drop, err := freshDatabase(ctx, pool, dbURL)
	if err != nil {
		return err
	}
	defer drop()

	fmt.Printf("history: filling the ledger with %s effects across %d finished campaigns\n", thousands(effects), campaigns)
	t := time.Now()
	per := effects / campaigns
	var finished []string
	for i := range campaigns {
		seeded, err := audittest.Seed(ctx, pool, per)
		if err != nil {
			return fmt.Errorf("history: campaign %d: %w", i+1, err)
		}
		// Finished: a running campaign would be in every gate's view, and
		// only a finished one is archived.
		if err := audittest.Finish(ctx, pool, seeded); err != nil {
			return fmt.Errorf("history: finishing campaign %d: %w", i+1, err)
		}
		finished = append(finished, seeded.CampaignID)
		if (i+1)%10 == 0 {
			fmt.Printf("  %d campaigns (%s)\n", i+1, time.Since(t).Round(time.Second))
		}
	}
	for _, p := range []*pgxpool.Pool{pool, empty} {
		if _, err := p.Exec(ctx, `VACUUM ANALYZE`); err != nil {
			return err
		}
	}
	var rows, bytes int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effect), pg_database_size(current_database())`).Scan(&rows, &bytes); err != nil {
		return err
	}
	fmt.Printf("  %s ledger rows, database %s MB, filled in %s\n", thousands(int(rows)), thousands(int(bytes>>20)), time.Since(t).Round(time.Second))
	var indexes int64
	var buffers string
	if err := pool.QueryRow(ctx, `SELECT pg_indexes_size('effect'), current_setting('shared_buffers')`).Scan(&indexes, &buffers); err != nil {
		return err
	}
	fmt.Printf("  the ledger's indexes (effect) %s MB; shared_buffers %s\n", thousands(int(indexes>>20)), buffers)

	type run struct {
		perSec float64
		audit  time.Duration
	}
	runs := map[string][]run{}
	type side struct {
		name string
		pool *pgxpool.Pool
	}
	measure := func(round string, sides ...side) error {
		for _, side := range sides {
			read0, hit0, err := blockReads(ctx, side.pool)
			if err != nil {
				return err
			}
			r, err := onceplanExec(ctx, side.pool, n, 16)
			if err != nil {
				return fmt.Errorf("history: %s side: %w", side.name, err)
			}
			read1, hit1, err := blockReads(ctx, side.pool)
			if err != nil {
				return err
			}
			auditTime, err := bestOf(3, func() error { _, err := audit.ForPlan(ctx, side.pool, r.planID); return err })
			if err != nil {
				return err
			}
			fmt.Printf("  %s, %-8s: %s effects/s (blocks read from outside shared buffers: %s of %s, %.1f per effect), audit of the new plan %s\n",
				round, side.name, thousands(int(r.perSec)), thousands(int(read1-read0)), thousands(int(read1-read0+hit1-hit0)),
				float64(read1-read0)/float64(n), auditTime.Round(time.Millisecond))
			runs[side.name] = append(runs[side.name], run{r.perSec, auditTime})
		}
		return nil
	}
	// First beside the history as it is, once; then archived
	// (onceplan archive, ledger.Store.ArchiveCampaign), every round.
	if err := measure("round 0", side{"empty", empty}, side{"unarchived", pool}); err != nil {
		return err
	}
	t = time.Now()
	var moved int64
	store := ledger.NewStore(pool)
	for _, id := range finished {
		a, err := store.ArchiveCampaign(ctx, id, "bench")
		if err != nil {
			return fmt.Errorf("history: archiving campaign %s: %w", id, err)
		}
		moved += a.Attempts
	}
	archiveTime := time.Since(t)
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT pg_indexes_size('effect')`).Scan(&indexes); err != nil {
		return err
	}
	fmt.Printf("  archived %d campaigns (%s attempts) in %s, then VACUUM ANALYZE in %s; the hot table's indexes now %s MB\n",
		len(finished), thousands(int(moved)), archiveTime.Round(time.Second), (time.Since(t) - archiveTime).Round(time.Second), thousands(int(indexes>>20)))
	// Once archived as they are, then with their indexes rebuilt (onceplan
	// compact), every round.
	if err := measure("archived, not compacted", side{"empty", empty}, side{"archived", pool}); err != nil {
		return err
	}
	t = time.Now()
	compacted, err := store.CompactHotTables(ctx)
	if err != nil {
		return fmt.Errorf("history: compacting: %w", err)
	}
	compactTime := time.Since(t)
	for _, tb := range compacted.Tables {
		if tb.Table == "effect" {
			indexes = tb.After
		}
	}
	fmt.Printf("  compacted (the hot tables' indexes rebuilt) in %s; the hot table's indexes now %s MB\n", compactTime.Round(time.Second), thousands(int(indexes>>20)))
	for round := range historyRounds {
		if err := measure(fmt.Sprintf("round %d", round+1), side{"empty", empty}, side{"history", pool}); err != nil {
			return err
		}
	}
	median := func(side string, f func(run) float64) float64 {
		v := make([]float64, 0, len(runs[side]))
		for _, r := range runs[side][len(runs[side])-historyRounds:] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	perSec := func(r run) float64 { return r.perSec }
	auditSec := func(r run) float64 { return r.audit.Seconds() }
	throughput := median("history", perSec) / median("empty", perSec)
	auditRatio := median("history", auditSec) / median("empty", auditSec)
	fmt.Printf("  medians: throughput %.2f× of the empty ledger's, audit %.2f×\n", throughput, auditRatio)
	// Round 0's runs, one each: the empty side's first and second beside
	// the unarchived and the archived but not compacted history.
	ratio := func(side string, i int, f func(run) float64) float64 {
		return f(runs[side][0]) / f(runs["empty"][i])
	}
	unarchived, unarchivedAudit := ratio("unarchived", 0, perSec), ratio("unarchived", 0, auditSec)
	archived, archivedAudit := ratio("archived", 1, perSec), ratio("archived", 1, auditSec)
	fmt.Printf("  before the archive (round 0): throughput %.2f×, audit %.2f×; archived, not compacted: %.2f×, %.2f×\n", unarchived, unarchivedAudit, archived, archivedAudit)
	record("12. history", fmt.Sprintf("a new %s-target campaign beside %s ledger rows of %d finished campaigns, archived and compacted (%s to archive, %s to compact): %s effects/s against %s on an empty ledger (**%.2f×**); its audit %s against %s (**%.2f×**); medians of %d alternating runs. One run each before the archive: %.2f× and %.2f×; archived, not compacted: %.2f× and %.2f×",
		thousands(n), thousands(int(rows)), campaigns, archiveTime.Round(time.Second), compactTime.Round(time.Second), thousands(int(median("history", perSec))), thousands(int(median("empty", perSec))), throughput,
		time.Duration(median("history", auditSec)*float64(time.Second)).Round(time.Millisecond),
		time.Duration(median("empty", auditSec)*float64(time.Second)).Round(time.Millisecond), auditRatio, historyRounds, unarchived, unarchivedAudit, archived, archivedAudit),
		"throughput ≥ 0.9×, audit ≤ 1.2×", throughput >= 0.9 && auditRatio <= 1.2)
	return nil
}

// blockReads is how many blocks the pool's database has read from outside
// PostgreSQL's shared buffers so far (the operating system's cache or the
// disk), and how many it found in them: where a ledger larger than the
// buffers costs a campaign.
func blockReads(ctx context.Context, pool *pgxpool.Pool) (read, hit int64, err error) {
	err = pool.QueryRow(ctx, `SELECT blks_read, blks_hit FROM pg_stat_database WHERE datname = current_database()`).Scan(&read, &hit)
	return read, hit, err
}

// bestOf is f's best time of n runs.
func bestOf(n int, f func() error) (time.Duration, error) {
	var best time.Duration
	for range n {
		t := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if d := time.Since(t); best == 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// freshDatabase creates a database beside the one pool connects to,
// migrated, and returns a pool on it and a function that drops it.
func freshDatabase(ctx context.Context, pool *pgxpool.Pool, dbURL string) (*pgxpool.Pool, func(), error) {
	name := fmt.Sprintf("onceplan_bench_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, nil, fmt.Errorf("creating the empty side's database: %w", err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, nil, err
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = pool.Config().MaxConns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	drop := func() {
		p.Close()
		_, _ = pool.Exec(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	}
	if _, err := migrations.Up(ctx, p); err != nil {
		drop()
		return nil, nil, err
	}
	return p, drop, nil
}
