package executor_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/metrics"
	"github.com/onceplan/onceplan/internal/pgtest"
)

// TestServingSaysWhenNoLiveWorkerServesAProvider: heartbeats name the
// providers a process serves; a running campaign whose provider no live
// process serves is counted at 0, and the gauge says the same.
func TestServingSaysWhenNoLiveWorkerServesAProvider(t *testing.T) {
	t.Parallel()
	tb := newTable(t, 1) // a running campaign on "outbox"
	admin := pgtest.NewPool(t, tb.urls.Admin)
	timeout := executor.DefaultOwnerTimeout

	s, err := executor.ServingOf(tb.ctx, admin, timeout, "outbox")
	require.NoError(t, err)
	require.Equal(t, executor.Serving{Provider: "outbox", Live: 0}, s)
	live, err := executor.LiveWorkers(tb.ctx, admin, timeout)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"outbox": 0}, live, "a running campaign's provider is counted, at 0")

	// This process beats, naming the provider it serves.
	e := tb.executorFor(t, &scripted{}, nil)
	require.NoError(t, e.Heartbeat(tb.ctx))
	var served []string
	require.NoError(t, admin.QueryRow(tb.ctx, `SELECT providers FROM worker_process WHERE owner = $1`, e.Owner()).Scan(&served))
	require.Equal(t, []string{"outbox"}, served)
	s, err = executor.ServingOf(tb.ctx, admin, timeout, "outbox")
	require.NoError(t, err)
	require.Equal(t, 1, s.Live)
	require.Equal(t, 1.0, liveGauge(t, "outbox"), "the heartbeat refreshes the gauge")

	// Another live process serving it and another provider, and a dead one.
	_, err = admin.Exec(tb.ctx, `INSERT INTO worker_process (owner, host, pid, providers) VALUES
		('other/1/live', 'other', 1, '{outbox,smtp}'),
		('gone/2/dead', 'gone', 2, '{outbox,webhook}')`)
	require.NoError(t, err)
	_, err = admin.Exec(tb.ctx, `UPDATE worker_process SET seen_at = now() - interval '1 hour' WHERE owner = 'gone/2/dead'`)
	require.NoError(t, err)
	live, err = executor.LiveWorkers(tb.ctx, admin, timeout, "mailgun")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"outbox": 2, "smtp": 1, "webhook": 0, "mailgun": 0}, live)
	require.NoError(t, e.Heartbeat(tb.ctx))
	require.Equal(t, 2.0, liveGauge(t, "outbox"))
	require.Equal(t, 0.0, liveGauge(t, "webhook"), "served by a dead process only")

	// A clean shutdown retires the process: it no longer counts.
	require.NoError(t, e.Retire(tb.ctx))
	s, err = executor.ServingOf(tb.ctx, admin, timeout, "outbox")
	require.NoError(t, err)
	require.Equal(t, 1, s.Live)
}

// liveGauge reads onceplan_provider_live_workers{provider}, -1 when absent.
func liveGauge(t *testing.T, provider string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.LiveWorkers)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "provider" && l.GetValue() == provider {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestWorkerAliveIsTheHeartbeatRule: worker_alive(within), which the
// executor and the jobs' statements ask, names the processes whose
// heartbeat is younger than within, and no other.
func TestWorkerAliveIsTheHeartbeatRule(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `INSERT INTO worker_process (owner, host, pid, seen_at) VALUES
		('alive/1', 'alive', 1, now() - interval '10 seconds'),
		('dead/2', 'dead', 2, now() - interval '10 minutes')`)
	require.NoError(t, err)
	for within, want := range map[string][]string{
		"1 minute": {"alive/1"}, "1 hour": {"alive/1", "dead/2"}, "1 second": {},
	} {
		rows, err := pool.Query(ctx, `SELECT owner FROM worker_alive($1::interval) WHERE owner IN ('alive/1', 'dead/2') ORDER BY owner`, within)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, want, got, "within %s", within)
	}
}
