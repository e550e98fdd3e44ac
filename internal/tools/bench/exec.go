package main

// Scenario "exec": executor throughput with full guarantees (pending
// committed before the call, raw answer committed before parsing, settle
// committed) through an in-process no-op provider, against bare River
// running no-op jobs with the same settings on the same database, in the
// same run.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
)

// River settings shared by both sides, so the ratio measures the ledger
// (the workers per queue too: see execWorkers). FetchCooldown 2 ms rather
// than River's 100 ms, which would cap a queue at workers ÷ 0.1 s;
// FetchPollInterval 20 ms as the baseline measurements used.
const (
	benchFetchCooldown = 2 * time.Millisecond
	benchFetchPoll     = 20 * time.Millisecond
)

// execWorkers lists the workers per queue of the exec scenario, one run
// each of bare River and of the executor with that many. An effect waits
// on four group commits (target read, claim, raw answer, settle), so a
// worker is mostly waiting; more workers make bigger batches, and a
// statement's fixed cost (round trip, planning, commit) is shared by more
// effects, at the price of latency. Production keeps 16 per queue
// (jobs.Config.WorkersPerQueue, --workers-per-queue): a real provider's
// concurrency, not the ledger, bounds it there.
var execWorkers = "16,100"

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// bareRiver runs n no-op jobs with workers workers and returns jobs per
// second. The exec scenario runs it with the executor's worker count, so
// that each ratio compares the same River settings: bare River too is
// faster with more workers (docs/BENCHMARKS.md).
func bareRiver(ctx context.Context, pool *pgxpool.Pool, n, workers int) (float64, cpuSample, error) {
	var done atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     benchFetchCooldown,
		FetchPollInterval: benchFetchPoll,
	})
	if err != nil {
		return 0, cpuSample{}, err
	}
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i += 1000 {
		params = params[:0]
		for j := i; j < min(i+1000, n); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: j}, InsertOpts: &river.InsertOpts{Queue: "bench"}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, cpuSample{}, err
		}
	}
	if err := quiesce(ctx, pool); err != nil {
		return 0, cpuSample{}, err
	}
	start, cpu0 := time.Now(), sampleCPU()
	if err := client.Start(ctx); err != nil {
		return 0, cpuSample{}, err
	}
	for done.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), sampleCPU().sub(cpu0)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return 0, cpuSample{}, err
	}
	return float64(n) / elapsed.Seconds(), cpu, nil
}

// noopProvider accepts every effect at once: what is left is Onceplan.
type noopProvider struct {
	calls atomic.Int64
}

func (p *noopProvider) Name() string   { return "noop" }
func (p *noopProvider) Kind() string   { return "noop" }
func (p *noopProvider) String() string { return "noop=in-process" }
func (p *noopProvider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Dedupe: true}
}
func (p *noopProvider) Acquire(context.Context) (func(), error) {
	return func() {}, nil
}

// Renew: no limit, so a job's next target always goes on with the slot.
func (p *noopProvider) Renew() bool { return true }

func (p *noopProvider) Send(_ context.Context, r provider.Request) ([]byte, error) {
	n := p.calls.Add(1)
	return []byte(fmt.Sprintf("ok %d", n)), nil
}

func (p *noopProvider) Classify(raw []byte) provider.Verdict {
	if s := string(raw); strings.HasPrefix(s, "ok ") {
		return provider.Verdict{Outcome: provider.OutcomeDone, Receipt: s[3:]}
	}
	return provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unexpected"}
}

func (p *noopProvider) Probe(context.Context, string, int) (provider.ProbeResult, error) {
	return provider.ProbeResult{}, provider.ErrNoProbe
}
func (p *noopProvider) Close() error { return nil }

type execResult struct {
	planID   int64
	perSec   float64
	p50, p99 time.Duration
	cpu      cpuSample
}

// onceplanExec runs a started campaign of n targets through the real
// runner and executor and returns effects per second and claim-to-settle
// latency percentiles (from the ledger's own timestamps).
func onceplanExec(ctx context.Context, pool *pgxpool.Pool, n, workers int) (execResult, error) {
	prov := &noopProvider{}
	reg, err := provider.NewRegistry(prov)
	if err != nil {
		return execResult{}, err
	}
	r, err := jobs.NewRunner(jobs.Config{
		Pool: pool, Providers: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkersPerQueue: workers, FetchCooldown: benchFetchCooldown,
		MaintenanceInterval: time.Hour,
	})
	if err != nil {
		return execResult{}, err
	}
	svc := approval.NewService(pool, r.Enqueuer())
	_, planID, err := startCampaign(ctx, pool, svc, "exec bench", "noop", n)
	if err != nil {
		return execResult{}, err
	}
	if err := quiesce(ctx, pool); err != nil {
		return execResult{}, err
	}
	start, cpu0 := time.Now(), sampleCPU()
	if err := r.Start(ctx, svc); err != nil {
		return execResult{}, err
	}
	for prov.calls.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	// Every call is settled before its job ends; wait for the last settles.
	for {
		settled, err := doneCount(ctx, pool, planID)
		if err != nil {
			return execResult{}, err
		}
		if settled >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), sampleCPU().sub(cpu0)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return execResult{}, err
	}
	rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM updated_at - created_at) * 1e6)::bigint FROM effect WHERE plan_id = $1 AND state = 'done'`, planID)
	if err != nil {
		return execResult{}, err
	}
	var lat []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return execResult{}, err
		}
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return execResult{}, err
	}
	slices.Sort(lat)
	out := execResult{planID: planID, perSec: float64(n) / elapsed.Seconds(), cpu: cpu}
	if len(lat) > 0 {
		out.p50, out.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return out, nil
}

// execDurability lists the durability settings the exec scenario runs
// under, one round of every worker count each: "on" is what `onceplan
// serve` runs with (fsync, synchronous_commit and full_page_writes on),
// "off" what the throw-away test clusters run with.
var execDurability = flag.String("exec-durability", "on,off", "durability settings of the exec scenario's rounds: on (fsync, synchronous_commit, full_page_writes on, as `onceplan serve` runs), off (as the test clusters)")

// setDurability switches the cluster's fsync, synchronous_commit and
// full_page_writes on ("on") or back to the cluster's own settings
// ("off" resets them to the throw-away cluster's, which are off), and
// reloads the configuration: the three take effect on a reload.
func setDurability(ctx context.Context, pool *pgxpool.Pool, setting string) error {
	var stmts []string
	switch setting {
	case "on":
		stmts = []string{`ALTER SYSTEM SET fsync = on`, `ALTER SYSTEM SET synchronous_commit = on`, `ALTER SYSTEM SET full_page_writes = on`}
	case "off", "reset":
		stmts = []string{`ALTER SYSTEM RESET fsync`, `ALTER SYSTEM RESET synchronous_commit`, `ALTER SYSTEM RESET full_page_writes`}
	default:
		return fmt.Errorf("-exec-durability: %q is not on or off", setting)
	}
	for _, q := range append(stmts, `SELECT pg_reload_conf()`) {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// A reload reaches every backend at its next command; give the
	// postmaster a moment to signal them.
	time.Sleep(200 * time.Millisecond)
	var fsync string
	if err := pool.QueryRow(ctx, `SHOW fsync`).Scan(&fsync); err != nil {
		return err
	}
	if setting == "on" && fsync != "on" {
		return fmt.Errorf("fsync is still %s after the reload", fsync)
	}
	return nil
}

// execRounds is how many times each side runs per worker count and
// durability, alternating (bare River, executor, bare River, …): the
// figures are the medians, so one slow moment of a shared machine moves
// neither side.
var execRounds = flag.Int("exec-rounds", 3, "runs of each side per worker count and durability in the exec scenario, alternating; the medians are reported")

// medianBy returns the run whose key is the median (the lower middle of an
// even count).
func medianBy[T any](runs []T, key func(T) float64) T {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return runs[(len(runs)-1)/2]
}

type bareResult struct {
	perSec float64
	cpu    cpuSample
}

func benchExec(ctx context.Context, pool *pgxpool.Pool, n int) error {
	workers, err := counts(execWorkers, "worker count")
	if err != nil {
		return err
	}
	rounds := max(*execRounds, 1)
	fmt.Printf("exec: %d effects; River: FetchCooldown %s, FetchPollInterval %s, pool of %d; bare River and the executor with the same workers per queue, %d runs each, alternating, medians\n",
		n, benchFetchCooldown, benchFetchPoll, pool.Config().MaxConns, rounds)
	defer setDurability(context.WithoutCancel(ctx), pool, "reset")
	var figures []string
	met, measured := true, 0
	for _, durability := range strings.Split(*execDurability, ",") {
		durability = strings.TrimSpace(durability)
		if err := setDurability(ctx, pool, durability); err != nil {
			return err
		}
		fmt.Printf("  fsync, synchronous_commit, full_page_writes %s:\n", durability)
		for _, w := range workers {
			var (
				bares  []bareResult
				ourses []execResult
				ratios []float64
			)
			for range rounds {
				perSec, cpu, err := bareRiver(ctx, pool, n, w)
				if err != nil {
					return fmt.Errorf("bare River: %w", err)
				}
				ours, err := onceplanExec(ctx, pool, n, w)
				if err != nil {
					return fmt.Errorf("executor: %w", err)
				}
				bares, ourses = append(bares, bareResult{perSec, cpu}), append(ourses, ours)
				ratios = append(ratios, ours.perSec/perSec)
			}
			bare := medianBy(bares, func(r bareResult) float64 { return r.perSec })
			ours := medianBy(ourses, func(r execResult) float64 { return r.perSec })
			ratio := ours.perSec / bare.perSec
			if durability == "on" {
				met, measured = met && ratio >= 0.6, measured+1
			}
			slices.Sort(ratios)
			fmt.Printf("  %4d workers: bare River no-op jobs %.0f jobs/s (CPU per 1,000: %s Go + %s PostgreSQL)\n", w, bare.perSec,
				per1000(bare.cpu.self, n).Round(time.Millisecond), per1000(bare.cpu.postgres, n).Round(time.Millisecond))
			fmt.Printf("                executor, no-op provider %.0f effects/s = %.2fx (runs' ratios %.2f–%.2f); claim-to-settle p50 / p99 %s / %s\n",
				ours.perSec, ratio, ratios[0], ratios[len(ratios)-1], ours.p50.Round(100*time.Microsecond), ours.p99.Round(100*time.Microsecond))
			fmt.Printf("                executor CPU per 1,000: %s Go + %s PostgreSQL (of which autovacuum workers still running at the end: %s)\n",
				per1000(ours.cpu.self, n).Round(time.Millisecond), per1000(ours.cpu.postgres, n).Round(time.Millisecond),
				per1000(max(ours.cpu.autovacuum, 0), n).Round(time.Millisecond))
			figures = append(figures, fmt.Sprintf("fsync %s, %d workers: bare River %.0f jobs/s (CPU per 1,000 %s Go + %s PostgreSQL), executor %.0f effects/s = **%.2f×** (runs %.2f–%.2f; %s Go + %s PostgreSQL), p50/p99 %s/%s",
				durability, w, bare.perSec, per1000(bare.cpu.self, n).Round(time.Millisecond), per1000(bare.cpu.postgres, n).Round(time.Millisecond),
				ours.perSec, ratio, ratios[0], ratios[len(ratios)-1], per1000(ours.cpu.self, n).Round(time.Millisecond), per1000(ours.cpu.postgres, n).Round(time.Millisecond),
				ours.p50.Round(100*time.Microsecond), ours.p99.Round(100*time.Microsecond)))
		}
	}
	record("1. executor throughput", fmt.Sprintf("%s effects, no-op provider, every guarantee, River's settings the same on both sides, medians of %d alternating runs; %s",
		thousands(n), rounds, strings.Join(figures, "; ")),
		"≥ 0.6× bare River at every worker count, fsync on", met && measured > 0)
	return nil
}

// counts parses a comma-separated list of positive counts of what (for the
// error: "worker count", "process count").
func counts(list, what string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("%q is not a %s", f, what)
		}
		out = append(out, k)
	}
	return out, nil
}
