package metrics

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// gauge is the value of the series name{labels} in reg, or -1 when reg
// does not have it.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestLedgerCountIsTakenAtMostEvery30s: the count of every attempt by
// state reads the whole ledger, so however often /metrics is scraped it is
// recounted at most every effectsMaxAge; the index-backed gauges are read
// at every scrape.
func TestLedgerCountIsTakenAtMostEvery30s(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.App)
	col := &dbCollector{pool: pool, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	// Attempts outside any plan, written as the owner (the server writes
	// only a tool call's, after its intent: migration 0037).
	owner := pgtest.NewPool(t, urls.Owner)
	claim := func() {
		var b [32]byte
		rand.Read(b[:])
		_, err := owner.Exec(t.Context(), `INSERT INTO effect (key, owner) VALUES ($1, 'metrics test')`, "v1:"+hex.EncodeToString(b[:]))
		require.NoError(t, err)
	}
	pending := map[string]string{"provider": "", "state": "pending"}
	inDoubt := map[string]string{"state": "pending"}

	require.Equal(t, -1.0, gauge(t, reg, "onceplan_effects", pending), "an empty ledger has no series")
	claim()
	// Counted less than 30 s ago (as empty): the new attempt shows in the
	// in-doubt gauge at once, in the ledger count only at the recount.
	require.Equal(t, -1.0, gauge(t, reg, "onceplan_effects", pending))
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_effects_in_doubt", inDoubt))
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_metrics_database_up", nil))

	col.mu.Lock()
	col.triedAt = time.Now().Add(-effectsMaxAge)
	col.mu.Unlock()
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_effects", pending))
	claim()
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_effects", pending), "recounted again within 30 s")
	require.Equal(t, 2.0, gauge(t, reg, "onceplan_effects_in_doubt", inDoubt))

	// A recount that fails (here: its context is already done) keeps the
	// last count on show, says so in onceplan_metrics_database_up, and is
	// not retried at every scrape.
	col.mu.Lock()
	col.triedAt = time.Now().Add(-effectsMaxAge)
	col.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	counts, err := col.effectCounts(ctx)
	require.Error(t, err)
	require.Equal(t, []effectCount{{provider: "", state: "pending", n: 1}}, counts)
	require.Equal(t, 0.0, gauge(t, reg, "onceplan_metrics_database_up", nil))
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_effects", pending))
	require.Equal(t, 2.0, gauge(t, reg, "onceplan_effects_in_doubt", inDoubt))
}

// TestLiveWorkersPerProvider: /metrics says how many live worker processes
// serve each provider, 0 for one a running campaign waits on; a provider
// no longer counted loses its series.
func TestLiveWorkersPerProvider(t *testing.T) {
	reg := Registry(pgtest.AppPool(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
	SetLiveWorkers(map[string]int{"outbox": 2, "nope": 0})
	require.Equal(t, 2.0, gauge(t, reg, "onceplan_provider_live_workers", map[string]string{"provider": "outbox"}))
	require.Equal(t, 0.0, gauge(t, reg, "onceplan_provider_live_workers", map[string]string{"provider": "nope"}))
	SetLiveWorkers(map[string]int{"outbox": 1})
	require.Equal(t, 1.0, gauge(t, reg, "onceplan_provider_live_workers", map[string]string{"provider": "outbox"}))
	require.Equal(t, -1.0, gauge(t, reg, "onceplan_provider_live_workers", map[string]string{"provider": "nope"}))
}
