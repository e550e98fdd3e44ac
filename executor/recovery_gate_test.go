package executor_test

// Recovery and consent at the moment of sending (docs/ARCHITECTURE.md,
// "The gate"): no wait may sit between the gate's check and the send. A
// recovery that waits for its provider's turn checks the gate again once
// the turn is its own, right before it sends; an address suppressed while
// it waited is not mailed. Counted at a stand-in for Resend, its turns
// taken from the schedule in PostgreSQL that every process shares
// (provider_pace), where the test sees the recovery waiting.

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
)

// resendFor is the table's provider ("outbox") as a Resend account whose
// stand-in is rs, with opts, paced through the table's database; and an
// executor with it.
func (tb *table) resendFor(t *testing.T, rs *sink.Resend, opts string) (provider.Provider, *executor.Executor) {
	t.Helper()
	p, err := provider.ParseFlag("outbox=resend://" + url.PathEscape(rs.APIKey()) + "@?endpoint=" + url.QueryEscape(rs.Endpoint()) + "&" + opts)
	require.NoError(t, err)
	reg, err := provider.NewRegistry(p)
	require.NoError(t, err)
	pool := pgtest.NewPool(t, tb.urls.App)
	reg.PaceThrough(pool)
	q := &queueCalls{}
	e, err := executor.New(executor.Config{Pool: pool, Providers: reg, Pauser: q, Requeuer: q})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return p, e
}

// TestRecoveryChecksTheGateAfterWaitingForItsTurn: a worker died before
// its call (one message, or a batch call of two). Recovery, as a job that
// finds the attempt in doubt runs it, checks the gate (open), takes the
// provider's next turn, ten seconds away, and waits for it; meanwhile the
// address is suppressed. When the turn comes, nothing is sent: the
// attempt (every attempt of the call) is unknown, for a person, saying
// the address was suppressed.
func TestRecoveryChecksTheGateAfterWaitingForItsTurn(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		name := map[bool]string{false: "single", true: "batch call"}[batch]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := newTable(t, 4)
			admin := pgtest.NewPool(t, tb.urls.Admin)
			rs := sink.NewResend(sink.ResendOpts{})
			t.Cleanup(rs.Close)
			opts := "rate=6/m&rate_scope=account"
			if batch {
				opts += "&batch=2"
			}
			prov, e := tb.resendFor(t, rs, opts)

			// The worker's attempts, left pending when it died.
			var open []ledger.Effect
			suppressed := "person1@example.com"
			if batch {
				_, won, err := e.StoreCall(tb.ctx, tb.plan.ID, []int{1, 2}, "dead/1/worker")
				require.NoError(t, err)
				require.Len(t, won, 2)
				open = won
				suppressed = "person2@example.com" // the call's other target
			} else {
				ordinal, key := tb.target(t)
				open = []ledger.Effect{tb.dead(t, ordinal, key, ledger.StatePending, "")}
			}

			// The schedule's turn now is taken (another send of the
			// account): recovery's turn is the next, ten seconds on.
			release, err := prov.Acquire(tb.ctx)
			require.NoError(t, err)
			release()
			var taken time.Time
			require.NoError(t, admin.QueryRow(tb.ctx, `SELECT last_at FROM provider_pace WHERE name = 'outbox'`).Scan(&taken))

			ctx, cancel := context.WithTimeout(tb.ctx, 2*time.Minute) // a job's time: it may wait half of it
			defer cancel()
			type outcome struct {
				res executor.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := e.RecoverWaiting(ctx, open[0])
				done <- outcome{res, err}
			}()
			await.Until(t, time.Minute, "recovery to take its turn and wait for it", func() bool {
				var last time.Time
				require.NoError(t, admin.QueryRow(tb.ctx, `SELECT last_at FROM provider_pace WHERE name = 'outbox'`).Scan(&last))
				return last.After(taken)
			})
			select {
			case o := <-done:
				t.Fatalf("recovery ended before its turn came: %+v", o)
			default:
			}
			_, _, err = suppression.Add(tb.ctx, admin, suppression.AddParams{Address: suppressed, Reason: suppression.Unsubscribed,
				Source: suppression.FromActor, Actor: "ops@example.com"})
			require.NoError(t, err)

			o := await.Recv(t, done, 2*time.Minute, "recovery, once its turn came")
			require.NoError(t, o.err)
			require.Zero(t, rs.Requests(), "nothing reached the service")
			require.Empty(t, rs.CountByRecipient())
			for _, eff := range open {
				got, err := tb.store.Get(tb.ctx, eff.ID)
				require.NoError(t, err)
				require.Equal(t, ledger.StateUnknown, got.State, "effect %d", eff.ID)
				require.Contains(t, got.Reason, "the address was suppressed")
			}
		})
	}
}

// TestRecoveryJudgesEachAttemptByItsOwnPlan: the gate recovery checks for
// several attempts (a call's) reads each attempt's own campaign: one of a
// running campaign and one of a cancelled campaign are closed for the
// second, whichever attempt is being recovered.
func TestRecoveryJudgesEachAttemptByItsOwnPlan(t *testing.T) {
	t.Parallel()
	running := newTable(t, 2)
	// A second campaign in the same database, cancelled after its
	// attempt was claimed.
	cancelled := running.another(t, 2)
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	_, e := running.resendFor(t, rs, "rate=none")
	o1, k1 := running.target(t)
	o2, k2 := cancelled.target(t)
	a := running.dead(t, o1, k1, ledger.StatePending, "")
	b := cancelled.dead(t, o2, k2, ledger.StatePending, "")
	_, err := cancelled.svc.Cancel(cancelled.ctx, cancelled.operator, cancelled.plan.CampaignID, "wrong list")
	require.NoError(t, err)

	for _, effs := range [][]ledger.Effect{{a, b}, {b, a}} {
		open, why, closed, err := e.GateOf(running.ctx, "outbox", effs)
		require.NoError(t, err)
		require.False(t, open, "a cancelled campaign's attempt among them")
		require.Equal(t, b.ID, closed.ID, "closed for the cancelled campaign's attempt")
		require.Contains(t, why, "campaign "+string(approval.StateCancelled))
	}
	open, _, _, err := e.GateOf(running.ctx, "outbox", []ledger.Effect{a})
	require.NoError(t, err)
	require.True(t, open, "the running campaign's attempt alone")
}

// another is a second running campaign of n targets in tb's database, on
// the same provider.
func (tb *table) another(t *testing.T, n int) *table {
	t.Helper()
	other := *tb
	other.next = 0
	id := tb.createRunning(t, fmt.Sprintf("another %d", n), n)
	p, err := tb.planOf(t, id)
	require.NoError(t, err)
	other.plan = p
	return &other
}

// TestBatchCallIsNotMadeWhenItsGateClosedWhileItWaited: a call held after
// its claim for the provider's pacing checks its attempts' gates again
// before it is made; an address suppressed meanwhile closes it: no call,
// its attempts failed, not sent (their keys free for the job's next run,
// which records the suppressed target as such and claims the other again),
// the reason recorded as the call's answer, and the job snoozes.
func TestBatchCallIsNotMadeWhenItsGateClosedWhileItWaited(t *testing.T) {
	t.Parallel()
	tb := newTable(t, 2)
	admin := pgtest.NewPool(t, tb.urls.Admin)
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	_, e := tb.resendFor(t, rs, "rate=none&batch=2")
	call, won, err := e.StoreCall(tb.ctx, tb.plan.ID, []int{1, 2}, "w/1/claimed")
	require.NoError(t, err)

	_, closed, err := e.GateAfterWait(tb.ctx, "outbox", call, won)
	require.NoError(t, err)
	require.False(t, closed, "nothing changed since the claim: the call is made")

	_, _, err = suppression.Add(tb.ctx, admin, suppression.AddParams{Address: "person2@example.com", Reason: suppression.Complaint,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	res, closed, err := e.GateAfterWait(tb.ctx, "outbox", call, won)
	require.NoError(t, err)
	require.True(t, closed)
	require.Equal(t, executor.Snooze, res.Action)
	require.Zero(t, rs.Requests())
	for _, eff := range won {
		got, err := tb.store.Get(tb.ctx, eff.ID)
		require.NoError(t, err)
		require.Equal(t, ledger.StateFailed, got.State)
		require.Equal(t, ledger.FailureRetry, got.Failure)
		require.Contains(t, got.Reason, "the address was suppressed")
	}
	answers, err := tb.store.CallAnswers(tb.ctx, call.ID)
	require.NoError(t, err)
	require.Len(t, answers, 1)
	require.Contains(t, string(answers[0].Body), "not sent")
}
