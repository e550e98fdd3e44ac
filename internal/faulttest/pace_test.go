package faulttest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
)

// TestPushedPaceStillSends: the shared schedule of two Resend accounts
// (rate_scope=account, resend's default) was pushed before the server's
// role lost the table — one account's latest turn two hours ahead, the
// other's at infinity, written here as the superuser, as an older database
// may hold them. A worker started on it sends both campaigns anyway: the
// first take repairs each turn no take could have given (migration 0038),
// and every recipient gets exactly one email, counted at the stand-ins.
func TestPushedPaceStillSends(t *testing.T) {
	t.Parallel()
	const n = 8
	urls := pgtest.Database(t)
	e := newEnvAt(t, urls.App, 0)
	admin := pgtest.NewPool(t, urls.Admin)
	stands := map[string]*sink.Resend{}
	var providers []string
	for name, turn := range map[string]string{"pushed": "now() + interval '2 hours'", "forever": "'infinity'"} {
		// The stand-in keeps the account's limit, and the provider's
		// rate= is that limit: paced through the database.
		rs := sink.NewResend(sink.ResendOpts{Limit: sink.RateLimit{PerSecond: 5, Burst: 10}})
		t.Cleanup(rs.Close)
		stands[name] = rs
		providers = append(providers, name+"="+rs.URL())
		_, err := admin.Exec(e.ctx, `INSERT INTO provider_pace (name, last_at) VALUES ($1, `+turn+`)`, name)
		require.NoError(t, err)
	}
	w := startWorker(t, e.url, providers, fastFlags)
	ids := map[string]string{}
	for name := range stands {
		ids[name] = e.campaign(t, name, name, n)
	}
	for name, id := range ids {
		waitFor(t, 2*time.Minute, "every target of the campaign on "+name+" done", func() bool { return e.completed(id, n) }, w)
	}
	for name, rs := range stands {
		counts := rs.CountByRecipient()
		require.Len(t, counts, n, "%s: recipients who got an email", name)
		for to, c := range counts {
			require.Equal(t, 1, c, "%s: emails to %s", name, to)
		}
		require.Zero(t, rs.RateLimited(), "%s: requests the service refused for its rate limit", name)
		e.requireHolds(t, ids[name])
	}
	// And the schedules go on from now: neither turn is hours ahead.
	var ahead bool
	require.NoError(t, admin.QueryRow(e.ctx, `SELECT bool_or(last_at > now() + interval '1 minute') FROM provider_pace`).Scan(&ahead))
	require.False(t, ahead, "a turn still lies far ahead")
}
