package jobs_test

// Campaigns through providers that deduplicate by the effect id for a
// window: resend:// to the in-repo Resend server and smtp://
// with idempotency_header= to the in-repo SMTP server deduplicating by
// that header. Effects are counted at the server.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
)

// oncePerRecipient asserts, from the server's records, that each of the n
// targets (t0000@example.com on) got exactly one email.
func oncePerRecipient(t *testing.T, counts map[string]int, n int) {
	t.Helper()
	require.Len(t, counts, n, "recipients that got an email: %v", counts)
	for rcpt, c := range counts {
		require.Equal(t, 1, c, "emails to %s", rcpt)
	}
}

func smtpPerRecipient(s *sink.SMTP) map[string]int {
	out := map[string]int{}
	for _, m := range s.Messages() {
		for _, r := range m.Rcpts {
			out[r]++
		}
	}
	return out
}

// TestResendExactlyOnceThroughAcceptedThenFailed: Resend creates the email
// and then answers 500 (twice), or the answer is lost (once): each of
// those attempts is unknown, recovery sends again with the same
// Idempotency-Key inside the window, the server answers the first email's
// id without sending again, and every target ends done with one email.
func TestResendExactlyOnceThroughAcceptedThenFailed(t *testing.T) {
	t.Parallel()
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	rs.ApplyThenFail(2, 500)
	rs.ApplyThenDrop(1)
	w := newWorld(t, jobs.Config{}, "mail="+sink.WithOption(rs.URL(), "concurrency=2"))
	w.start(t)
	const n = 20
	id := w.running(t, "mail", n)

	await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == n })
	oncePerRecipient(t, rs.CountByRecipient(), n)
	require.Len(t, rs.Effects(), n)
	replays := 0
	for _, r := range rs.RequestLog() {
		if r.Replayed {
			replays++
		}
	}
	require.Equal(t, 3, replays, "the three attempts in doubt were settled by a deduplicated repeat")
	await.Until(t, 10*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
}

// TestResendQuotaPausesOnlyResend: a 429 with Retry-After pauses the
// resend provider's queue only; another provider's campaign completes
// meanwhile, and the throttled campaign completes after it, once per
// target.
func TestResendQuotaPausesOnlyResend(t *testing.T) {
	t.Parallel()
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	other := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(other.Close)
	rs.RateLimitNext(1, 2)
	w := newWorld(t, jobs.Config{}, "mail="+sink.WithOption(rs.URL(), "concurrency=1"), "other="+other.URL())
	w.start(t)
	a := w.running(t, "mail", 10)
	b := w.running(t, "other", 10)

	await.Until(t, 10*time.Second, "the resend provider's queue to be paused", func() bool {
		q, err := w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("mail"))
		return err == nil && q.PausedAt != nil
	})
	await.Until(t, 20*time.Second, "the other provider's campaign to complete", func() bool { return w.campaignState(t, b) == approval.StateCompleted })
	exactlyOnce(t, other, 10)
	q, err := w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("mail"))
	require.NoError(t, err)
	if q.PausedAt != nil {
		require.Equal(t, 1, rs.Requests(), "requests to Resend while its queue is paused")
	}
	await.Until(t, 30*time.Second, "the resend campaign to complete", func() bool { return w.campaignState(t, a) == approval.StateCompleted })
	oncePerRecipient(t, rs.CountByRecipient(), 10)
	require.Equal(t, map[string]int{"done": 10}, w.states(t, a))
}

// TestSMTPIdempotencyHeaderExactlyOnce: an SMTP relay that deduplicates by
// Resend-Idempotency-Key; two messages are delivered but their answers
// lost (unknown); recovery sends them again with the same header, the
// relay answers 250 and delivers nothing new; every target done, one
// message each.
func TestSMTPIdempotencyHeaderExactlyOnce(t *testing.T) {
	t.Parallel()
	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	relay.DedupeByHeader("Resend-Idempotency-Key", 24*time.Hour)
	relay.DropAfterData(2)
	w := newWorld(t, jobs.Config{JobTimeout: 5 * time.Second},
		"mail="+sink.WithOption(relay.URL(), "concurrency=1&idempotency_header=Resend-Idempotency-Key"))
	w.start(t)
	const n = 10
	id := w.running(t, "mail", n)

	await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == n })
	oncePerRecipient(t, smtpPerRecipient(relay), n)
	require.Equal(t, 2, relay.Deduplicated(), "the two attempts in doubt were settled by deduplicated repeats")
}

// deadPendingAttempt starts an approved campaign (its jobs wait: the test
// starts the runner later) and claims its first target for a worker that
// died during its call (no heartbeat ever), as a SIGKILL after the claim
// leaves it, and returns the target's address.
func deadPendingAttempt(t *testing.T, w *world, campaign string) string {
	t.Helper()
	_, err := w.svc.Start(w.ctx, w.operator, campaign)
	require.NoError(t, err)
	planID := mustPlanID(t, w, campaign)
	var key, target string
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT t.key, t.target FROM target t JOIN plan p ON p.list_id = t.list_id WHERE p.id = $1 AND t.ordinal = 1`, planID).Scan(&key, &target))
	c, err := ledger.NewStore(w.pool).Claim(w.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "dead/1/worker", PlanID: planID, Ordinal: 1})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	return target
}

// TestRecoveryOfADeadWorkersAttemptHonoursTheDedupeWindow: a worker died
// during its call, leaving a pending attempt. While the provider's dedupe
// window (from that first attempt) is open, recovery sends again with the
// same effect id and the target gets its one email; once it has closed,
// recovery sends nothing — a repeat could be a second email — and leaves
// the attempt unknown for a person, saying why. For resend:// and for
// smtp:// with idempotency_header=, counted at the server.
func TestRecoveryOfADeadWorkersAttemptHonoursTheDedupeWindow(t *testing.T) {
	t.Parallel()
	type server struct {
		url    string
		counts func() map[string]int
	}
	servers := map[string]func(t *testing.T) server{
		"resend": func(t *testing.T) server {
			rs := sink.NewResend(sink.ResendOpts{})
			t.Cleanup(rs.Close)
			return server{url: rs.URL(), counts: rs.CountByRecipient}
		},
		"smtp": func(t *testing.T) server {
			relay, err := sink.NewSMTP()
			require.NoError(t, err)
			t.Cleanup(relay.Close)
			relay.DedupeByHeader("X-EE-Idempotency-Key", 24*time.Hour)
			return server{url: sink.WithOption(relay.URL(), "idempotency_header=X-EE-Idempotency-Key"), counts: func() map[string]int { return smtpPerRecipient(relay) }}
		},
	}
	for kind, mk := range servers {
		t.Run(kind+"/window open: sent again, one email", func(t *testing.T) {
			t.Parallel()
			srv := mk(t)
			w := newWorld(t, jobs.Config{}, "mail="+srv.url)
			id := w.approved(t, "mail", 3)
			dead := deadPendingAttempt(t, w, id)
			w.start(t)
			await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == 3 })
			oncePerRecipient(t, srv.counts(), 3)
			require.Equal(t, 1, srv.counts()[dead])
		})
		t.Run(kind+"/window closed: unknown, nothing sent", func(t *testing.T) {
			t.Parallel()
			srv := mk(t)
			w := newWorld(t, jobs.Config{}, "mail="+sink.WithOption(srv.url, "dedupe_window=1s"))
			id := w.approved(t, "mail", 3)
			dead := deadPendingAttempt(t, w, id)
			time.Sleep(1100 * time.Millisecond) // the window, from the dead worker's claim, closes
			w.start(t)
			await.Until(t, 30*time.Second, "two targets done and the dead worker's unknown", func() bool {
				s := w.states(t, id)
				return s["done"] == 2 && s["unknown"] == 1
			})
			time.Sleep(time.Second) // several maintenance rounds: still nothing sent
			counts := srv.counts()
			require.Zero(t, counts[dead], "no email to the target whose attempt is in doubt past the window")
			require.Len(t, counts, 2)
			require.Equal(t, map[string]int{"done": 2, "unknown": 1}, w.states(t, id))
			var reason string
			require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM effect WHERE state = 'unknown'`).Scan(&reason))
			require.True(t, strings.Contains(reason, "window") && strings.Contains(reason, "has closed"), reason)
		})
	}
}
