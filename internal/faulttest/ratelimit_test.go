package faulttest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
)

// TestAccountRateLimitHoldsAcrossWorkers: three worker processes send
// one campaign through one Resend account, whose rate limit the stand-in
// enforces as Resend documents (429 past it). The provider's rate is the
// account's (rate_scope=account, resend's default), so the processes take
// turns from one schedule in the database: every recipient gets exactly
// one email and the service refuses none — where each process keeping
// the rate on its own sends three times over it and draws 429s.
//
// The stand-in allows two seconds' worth at once, so a send that reaches
// it late on a busy machine, behind the next one's turn, is no refusal.
func TestAccountRateLimitHoldsAcrossWorkers(t *testing.T) {
	const (
		n       = 30
		workers = 3
	)
	rs := sink.NewResend(sink.ResendOpts{Limit: sink.RateLimit{PerSecond: 5, Burst: 10}})
	t.Cleanup(rs.Close)
	e := newEnv(t)
	providers := []string{"account=" + rs.URL()}
	procs := make([]*proc, workers)
	for i := range procs {
		procs[i] = startWorker(t, e.url, providers, fastFlags)
	}
	id := e.campaign(t, "account", "paced", n)
	waitFor(t, 2*time.Minute, "every target done", func() bool { return e.completed(id, n) }, procs...)

	counts := rs.CountByRecipient()
	require.Len(t, counts, n, "recipients who got an email")
	for to, c := range counts {
		require.Equal(t, 1, c, "emails to %s", to)
	}
	require.Zero(t, rs.RateLimited(), "requests the service refused for its rate limit")
	e.requireHolds(t, id)
}
