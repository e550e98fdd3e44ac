package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadinessAndMetrics: an operator's load balancer and Prometheus see
// the server ready and its gauges read from the database.
func TestReadinessAndMetrics(t *testing.T) {
	t.Parallel()
	s := serve(t, dataDir(t))
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.cmd.Wait()
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	res, err := client.Get("http://" + s.addr + "/readyz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	res, err = client.Get("http://" + s.addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	text := string(body)
	for _, want := range []string{
		"onceplan_metrics_database_up 1",
		`onceplan_effects_in_doubt{state="pending"} 0`,
		`onceplan_effects_in_doubt{state="unknown"} 0`,
		"onceplan_oldest_pending_seconds 0",
		"# TYPE onceplan_provider_call_seconds histogram",
		"# TYPE onceplan_effects_settled_total counter",
		"go_goroutines",
	} {
		require.True(t, strings.Contains(text, want), "/metrics lacks %q:\n%s", want, text)
	}
}
