// Package metrics is Onceplan's Prometheus instrumentation: counters and a
// latency histogram the executor updates as it works (per process), the
// live workers per provider its heartbeat reads, and gauges read from the
// database at scrape time (shared by every process): effects by state,
// attempts in doubt, the oldest pending attempt, queue depth and paused
// queues, notifications by state. `onceplan serve` exposes them at
// /metrics.
package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/jobs/riverdb"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

var (
	// Settled counts attempts this process settled, by provider and state.
	Settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "onceplan", Name: "effects_settled_total",
		Help: "Attempts this process settled, by provider and resulting ledger state.",
	}, []string{"provider", "state"})

	// LiveWorkers is, per provider, how many live worker processes serve
	// it, across every process: 0 for one a running campaign sends through
	// that none serves. Each heartbeat of this process's executor sets it
	// (SetLiveWorkers) from the database, with the process's own
	// --owner-timeout.
	LiveWorkers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "onceplan", Name: "provider_live_workers",
		Help: "Live worker processes (across every process) that serve the provider, as of this process's last heartbeat; 0 for a provider a running campaign sends through that no live process serves: its targets wait for nothing.",
	}, []string{"provider"})

	// CallSeconds is the latency of provider calls made by this process.
	CallSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "onceplan", Name: "provider_call_seconds",
		Help:    "Latency of provider calls (send, resend, probe) made by this process.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"provider", "kind"})
)

// Registry returns a registry with the process metrics, Go's own, and the
// database gauges read through pool.
func Registry(pool *pgxpool.Pool, logger *slog.Logger) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(Settled, CallSeconds, LiveWorkers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&dbCollector{pool: pool, logger: logger})
	return r
}

var (
	effectsDesc = prometheus.NewDesc("onceplan_effects", "Ledger attempts by provider and state, across every process (recounted at most every 30 s).",
		[]string{"provider", "state"}, nil)
	inDoubtDesc = prometheus.NewDesc("onceplan_effects_in_doubt", "Attempts pending or unknown: pending ones settle by themselves, unknown ones wait for a person.",
		[]string{"state"}, nil)
	oldestPendingDesc = prometheus.NewDesc("onceplan_oldest_pending_seconds", "Age of the oldest pending attempt (0 when none); a growing value means a stuck worker or recovery.",
		nil, nil)
	queueDepthDesc = prometheus.NewDesc("onceplan_queue_jobs", "River jobs by queue and state (available, scheduled, running, retryable).",
		[]string{"queue", "state"}, nil)
	queuePausedDesc = prometheus.NewDesc("onceplan_queue_paused", "1 when a queue is paused (a provider over quota), else 0.",
		[]string{"queue"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("onceplan_metrics_database_up", "1 when the database gauges could be read at this scrape.",
		nil, nil)
	notificationsDesc = prometheus.NewDesc("onceplan_notifications", "Notifications by notifier and state (pending, retrying, failed, delivered), across every process: failed ones were given up on, and show on the admin page with the notifier's last answer.",
		[]string{"notifier", "state"}, nil)
)

// dbCollector reads the shared gauges at scrape time, under a short
// deadline. The in-doubt, oldest-pending and queue gauges come from
// index-backed queries and are read at every scrape; the count of every
// attempt by provider and state reads the whole ledger (≈ 0.2 s at
// 1,000,000 attempts), so it is recounted at most every effectsMaxAge,
// however many scrapers ask, and read last, so that a ledger too large to
// count within the deadline costs that gauge only.
type dbCollector struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu      sync.Mutex // held while recounting: one recount at a time
	counts  []effectCount
	triedAt time.Time // of the last recount, whether it worked or not
	lastErr error     // of that recount
}

// effectsMaxAge is how old the served count of attempts by provider and
// state may be.
const effectsMaxAge = 30 * time.Second

type effectCount struct {
	provider, state string
	n               float64
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{effectsDesc, inDoubtDesc, oldestPendingDesc, queueDepthDesc, queuePausedDesc, scrapeErrorDesc, notificationsDesc} {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up := 1.0
	if err := c.collect(ctx, ch); err != nil {
		c.logger.Warn("reading metrics from the database", "err", err)
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, up)
}

func (c *dbCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	doubt, err := ledger.InDoubtNow(ctx, c.pool)
	if err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(inDoubtDesc, prometheus.GaugeValue, float64(doubt.Pending), "pending")
	ch <- prometheus.MustNewConstMetric(inDoubtDesc, prometheus.GaugeValue, float64(doubt.Unknown), "unknown")
	age := doubt.OldestPending.Seconds()
	ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, age)

	queues, err := riverdb.QueueStates(ctx, c.pool)
	if err != nil {
		return err
	}
	for queue, st := range queues {
		for _, d := range []struct {
			state string
			n     int
		}{{"available", st.Available}, {"scheduled", st.Scheduled}, {"running", st.Running}, {"retryable", st.Retryable}} {
			if d.n > 0 {
				ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(d.n), queue, d.state)
			}
		}
		paused := 0.0
		if st.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, paused, queue)
	}

	notes, err := notify.StateCounts(ctx, c.pool)
	if err != nil {
		return err
	}
	for notifier, byState := range notes {
		for _, state := range notify.States {
			ch <- prometheus.MustNewConstMetric(notificationsDesc, prometheus.GaugeValue, float64(byState[state]), notifier, state)
		}
	}

	counts, err := c.effectCounts(ctx)
	for _, e := range counts { // the last count, even when recounting failed
		ch <- prometheus.MustNewConstMetric(effectsDesc, prometheus.GaugeValue, e.n, e.provider, e.state)
	}
	return err
}

// effectCounts returns the count of attempts by provider and state,
// recounted when the last try is effectsMaxAge old. A recount that fails
// (say, a ledger too large to count within the scrape's deadline) is not
// tried again sooner either; until one works, the previous count is
// returned with the error.
func (c *dbCollector) effectCounts(ctx context.Context) ([]effectCount, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.triedAt.IsZero() && time.Since(c.triedAt) < effectsMaxAge {
		return c.counts, c.lastErr
	}
	c.triedAt = time.Now()
	counts, err := c.recount(ctx)
	if c.lastErr = err; err == nil {
		c.counts = counts
	}
	return c.counts, err
}

func (c *dbCollector) recount(ctx context.Context) ([]effectCount, error) {
	counts, err := ledger.CountByPlan(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, k := range counts {
		if k.PlanID != 0 {
			ids = append(ids, k.PlanID)
		}
	}
	providers, err := plan.Providers(ctx, c.pool, ids)
	if err != nil {
		return nil, err
	}
	// Several plans send through one provider: their counts add up.
	sum := map[[2]string]float64{}
	var order [][2]string
	for _, k := range counts {
		at := [2]string{providers[k.PlanID], string(k.State)}
		if _, seen := sum[at]; !seen {
			order = append(order, at)
		}
		sum[at] += float64(k.N)
	}
	out := make([]effectCount, 0, len(order))
	for _, at := range order {
		out = append(out, effectCount{provider: at[0], state: at[1], n: sum[at]})
	}
	return out, nil
}

// Init makes the per-provider series exist at zero, so dashboards and
// alerts see a provider before its first effect.
func Init(providers []string) {
	for _, p := range providers {
		for _, state := range []string{"done", "failed", "unknown", "stranded"} {
			Settled.WithLabelValues(p, state)
		}
		CallSeconds.WithLabelValues(p, "send")
	}
}

// SetLiveWorkers replaces the LiveWorkers series with live (provider →
// live worker processes serving it): a provider no longer counted loses
// its series.
func SetLiveWorkers(live map[string]int) {
	LiveWorkers.Reset()
	for provider, n := range live {
		LiveWorkers.WithLabelValues(provider).Set(float64(n))
	}
}
