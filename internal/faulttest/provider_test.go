package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
)

// rawAnswers returns the raw provider answers recorded for the campaign's
// effects, per target, oldest first.
func (e *env) rawAnswers(t *testing.T, campaign string) map[string][]string {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `
		SELECT t.target, r.kind::text, r.body
		FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		JOIN effect f ON f.key = t.key JOIN effect_response r ON r.effect_id = f.id
		WHERE c.id = $1 ORDER BY r.id`, campaign)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var target, kind string
		var body []byte
		require.NoError(t, rows.Scan(&target, &kind, &body))
		out[target] = append(out[target], kind+": "+string(body))
	}
	require.NoError(t, rows.Err())
	return out
}

// jobErrors counts the errors River recorded on the campaign's jobs.
func (e *env) jobErrors(t *testing.T, campaign string) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT coalesce(sum(cardinality(errors)), 0) FROM river_job
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint IN (SELECT id FROM plan WHERE campaign_id = $1)`, campaign).Scan(&n))
	return n
}

// byTarget groups ledger rows per target.
func byTarget(atts []attempt) map[string][]attempt {
	out := map[string][]attempt{}
	for _, a := range atts {
		out[a.Target] = append(out[a.Target], a)
	}
	return out
}

// TestProviderSlow: a provider that takes 2 s per call (10 s scaled down
// with the timeouts: --job-timeout 20s and the provider's timeout=15s
// exceed the call several times over, as the defaults of 2 m and 30 s
// exceed 10 s; a margin of 3 s was too little on a busy machine, where a
// call of 2 s at the sink took over 5 s at the worker) settles every target done on its first attempt, with no resend,
// while a fast provider in the same process finishes its own campaign
// meanwhile. A call slower than the provider's timeout is unknown (the
// request had left) and, on a provider that can neither deduplicate nor be
// asked, waits for a person, who finds it delivered.
func TestProviderSlow(t *testing.T) {
	t.Parallel()
	t.Run("within the timeouts", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
		t.Cleanup(hook.Close)
		hook.Delay(2 * time.Second)
		slowW := webhookWorld("slow", hook, hook.URL(), "concurrency=4&timeout=15s")
		fastW := maildirWorld(t, "fast", t.TempDir(), "")
		w := startWorker(t, e.url, []string{slowW.provider, fastW.provider}, flagsWith("--job-timeout", "20s", "--rescue-after", "30s"))

		const nSlow, nFast = 16, 100
		began := time.Now()
		idSlow := e.campaign(t, "slow", "s", nSlow)
		idFast := e.campaign(t, "fast", "f", nFast)
		waitFor(t, time.Minute, "the fast provider's campaign", func() bool { return e.completed(idFast, nFast) }, w)
		fastTook := time.Since(began)
		slowSoFar := len(slowW.effects())
		waitFor(t, 2*time.Minute, "the slow provider's campaign", func() bool { return e.completed(idSlow, nSlow) }, w)
		slowTook := time.Since(began)
		t.Logf("fast campaign (%d) done in %s while the slow one had %d of %d; slow campaign done in %s",
			nFast, fastTook.Round(100*time.Millisecond), slowSoFar, nSlow, slowTook.Round(100*time.Millisecond))

		require.Less(t, slowSoFar, nSlow, "a slow provider must not hold up another provider's campaign")
		// 16 calls of 2 s, 4 at a time.
		require.GreaterOrEqual(t, slowTook, 8*time.Second)
		requireExactlyOnce(t, slowW, e.targets(t, idSlow))
		requireExactlyOnce(t, fastW, e.targets(t, idFast))
		for _, a := range e.attempts(t, idSlow) {
			require.Equal(t, "done", a.State, "%+v", a)
			require.Equal(t, 1, a.Attempt, "one attempt per target: %+v", a)
			require.Equal(t, []string{"send"}, a.Kinds, "no resend: %+v", a)
		}
		require.Equal(t, nSlow, hook.Requests(), "one POST per target")
		// Waiting behind the provider is not a failed attempt: no job
		// recorded an error (it snoozes instead).
		require.Zero(t, e.jobErrors(t, idSlow), "jobs that waited for the provider must not count failed attempts")
		e.requireHolds(t, idSlow)
		e.requireHolds(t, idFast)
	})

	t.Run("slower than the timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		hook := sink.NewWebhook(sink.WebhookOpts{})
		t.Cleanup(hook.Close)
		hook.Delay(2 * time.Second)
		// A plain webhook: no dedupe, no probe.
		wh := webhookWorld("plain", hook, hook.URL(), "concurrency=2&timeout=1s")
		w := startWorker(t, e.url, []string{wh.provider}, fastFlags)
		const n = 4
		id := e.campaign(t, "plain", "p", n)
		waitFor(t, time.Minute, "the campaign to complete with every target unknown", func() bool {
			st, err := e.states(id)
			return err == nil && st["unknown"] == n && e.campaignDone(id)
		}, w)
		// The sink applies a call whose client gave up: every target got
		// its effect, once, and was never sent again.
		waitFor(t, 10*time.Second, "the sink to apply the abandoned calls", func() bool { return len(wh.effects()) == n })
		requireNoDuplicates(t, wh, "after the timeouts")
		for target, answers := range e.rawAnswers(t, id) {
			require.Len(t, answers, 1, target)
			require.Contains(t, answers[0], "wrote-request=true", "the timeout came after the request left: %s", answers[0])
		}
		require.Equal(t, n, hook.Requests(), "an unknown is never sent again on its own")

		// A person reads the receiver's log and resolves each as delivered.
		got := wh.effects()
		for target, key := range e.targets(t, id) {
			require.Equal(t, 1, got[target])
			_, err := e.svc.ResolveEffect(e.ctx, e.operator, id, string(key), ledger.Delivered, "found in the receiver's log")
			require.NoError(t, err)
		}
		require.Equal(t, map[string]int{"done": n}, e.mustStates(t, id))
		requireExactlyOnce(t, wh, e.targets(t, id))
		e.requireHolds(t, id)
	})
}

// campaignDone reports whether the campaign is completed (whatever its
// targets' states).
func (e *env) campaignDone(id string) bool {
	var state string
	err := e.pool.QueryRow(e.ctx, `SELECT state FROM campaign WHERE id = $1`, id).Scan(&state)
	return err == nil && state == "completed"
}

// TestProviderFlapping: every third call to a deduplicating webhook answers
// 503 — half of them after applying the effect, half without. A 5xx is
// unknown (docs/ARCHITECTURE.md, "Executing one effect"); recovery sends
// again with the same effect id and settles from the answer, so every target
// ends done, applied once, with a bounded number of calls.
func TestProviderFlapping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hook.Close)
	front := newHTTPFront(t, hook.URL(), func(n int) fault {
		switch {
		case n%6 == 3:
			return refuse503
		case n%6 == 0:
			return applyThen503
		}
		return pass
	})
	wh := webhookWorld("flap", hook, front.URL(), "concurrency=2")
	w := startWorker(t, e.url, []string{wh.provider}, fastFlags)
	const n = 30
	id := e.campaign(t, "flap", "x", n)
	waitFor(t, 2*time.Minute, "the campaign to complete with every target done", func() bool { return e.completed(id, n) }, w)

	requireExactlyOnce(t, wh, e.targets(t, id))
	e.requireHolds(t, id)
	posts, faults := front.Counts()
	t.Logf("%d POSTs for %d targets: %d answered 503 without applying, %d applied then 503", posts, n, faults[refuse503], faults[applyThen503])
	require.Positive(t, faults[refuse503])
	require.Positive(t, faults[applyThen503])
	require.Less(t, posts, 3*n, "retries are bounded")

	resent := 0
	for target, rows := range byTarget(e.attempts(t, id)) {
		// A 5xx never frees the key: one ledger row per target, which
		// went pending → unknown → done when the resend was answered.
		require.Len(t, rows, 1, "%s: %+v", target, rows)
		if slices.Contains(rows[0].Kinds, "resend") {
			resent++
			require.Equal(t, "send", rows[0].Kinds[0])
		}
	}
	require.Equal(t, faults[refuse503]+faults[applyThen503] > 0, resent > 0)
	t.Logf("%d targets settled by sending again with the same effect id", resent)
}

// TestProviderResetAfterAccept: the provider performs the effect and the
// connection then breaks before the answer. A deduplicating webhook whose
// front resets the TCP connection (RST) after the sink applied the effect:
// unknown, then settled by resending with the same id. An SMTP server that
// accepts the message and drops the connection before its 250: unknown,
// never sent again, until a person resolves it as delivered.
func TestProviderResetAfterAccept(t *testing.T) {
	t.Parallel()
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
		t.Cleanup(hook.Close)
		front := newHTTPFront(t, hook.URL(), func(n int) fault {
			if n%4 == 0 {
				return applyThenRST
			}
			return pass
		})
		wh := webhookWorld("reset", hook, front.URL(), "concurrency=2")
		w := startWorker(t, e.url, []string{wh.provider}, fastFlags)
		const n = 24
		id := e.campaign(t, "reset", "r", n)
		waitFor(t, 2*time.Minute, "the campaign to complete with every target done", func() bool { return e.completed(id, n) }, w)
		requireExactlyOnce(t, wh, e.targets(t, id))
		e.requireHolds(t, id)
		_, faults := front.Counts()
		require.Positive(t, faults[applyThenRST])

		reset := 0
		for target, answers := range e.rawAnswers(t, id) {
			if strings.Contains(answers[0], "transport-error wrote-request=true") {
				reset++
				require.GreaterOrEqual(t, len(answers), 2, "%s: a reset after the request left is settled by a resend: %v", target, answers)
				require.True(t, strings.HasPrefix(answers[1], "resend: "), "%v", answers)
			}
		}
		require.Positive(t, reset)
		t.Logf("%d connections reset after the sink applied the effect; all settled by resending", reset)
	})

	t.Run("smtp", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		s, err := sink.NewSMTP()
		require.NoError(t, err)
		t.Cleanup(s.Close)
		const n, dropped = 12, 3
		s.DropAfterData(dropped)
		sm := smtpWorld("relay", s, s.URL(), "concurrency=1")
		w := startWorker(t, e.url, []string{sm.provider}, fastFlags)
		id := e.campaign(t, "relay", "m", n)
		waitFor(t, time.Minute, "the campaign to complete", func() bool { return e.campaignDone(id) }, w)
		require.Equal(t, map[string]int{"done": n - dropped, "unknown": dropped}, e.mustStates(t, id))
		requireExactlyOnce(t, sm, e.targets(t, id)) // the relay got each message once
		for _, a := range e.attempts(t, id) {
			require.Equal(t, 1, a.Attempt, "never sent again: %+v", a)
		}

		// A person checks the relay's log and resolves each unknown.
		delivered := map[string]bool{}
		for _, m := range s.Messages() {
			for _, r := range m.Rcpts {
				delivered[r] = true
			}
		}
		for target, key := range e.targets(t, id) {
			cur, err := ledger.NewStore(e.pool).Current(e.ctx, key)
			require.NoError(t, err)
			if cur.State != ledger.StateUnknown {
				continue
			}
			require.True(t, delivered[target])
			_, err = e.svc.ResolveEffect(e.ctx, e.operator, id, string(key), ledger.Delivered, "in the relay's log")
			require.NoError(t, err)
		}
		require.Equal(t, map[string]int{"done": n}, e.mustStates(t, id))
		requireExactlyOnce(t, sm, e.targets(t, id))
		e.requireHolds(t, id)
	})
}

// TestProviderQuotaPausesOnlyItsQueue: a provider answers 429 with
// Retry-After: 3. That attempt is failed (nothing was created), the
// provider's queue pauses for every process until the Retry-After has
// passed, while a second provider keeps sending; then the first resumes
// and both campaigns finish, every target once.
func TestProviderQuotaPausesOnlyItsQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hookA := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hookA.Close)
	hookB := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hookB.Close)
	const retryAfter = 3 * time.Second
	hookA.FailNext(1, 429, map[string]string{"Retry-After": fmt.Sprint(int(retryAfter.Seconds()))}, `{"error":"slow down"}`)
	a := webhookWorld("quota", hookA, hookA.URL(), "concurrency=1&rate=10/s")
	b := webhookWorld("other", hookB, hookB.URL(), "concurrency=1&rate=10/s")
	w := startWorker(t, e.url, []string{a.provider, b.provider}, fastFlags)
	const nA, nB = 10, 60
	idA := e.campaign(t, "quota", "a", nA)
	idB := e.campaign(t, "other", "b", nB)
	waitFor(t, 2*time.Minute, "both campaigns to complete with every target done", func() bool {
		return e.completed(idA, nA) && e.completed(idB, nB)
	}, w)
	requireExactlyOnce(t, a, e.targets(t, idA))
	requireExactlyOnce(t, b, e.targets(t, idB))
	e.requireHolds(t, idA)
	e.requireHolds(t, idB)

	// The timeline at the two receivers.
	reqsA := hookA.RequestLog()
	require.Len(t, reqsA, nA+1, "one 429, then one POST per target")
	quotaAt, nextA := reqsA[0].At, reqsA[1].At
	paused := nextA.Sub(quotaAt)
	sentB := 0
	for _, r := range hookB.RequestLog() {
		if r.At.After(quotaAt) && r.At.Before(nextA) {
			sentB++
		}
	}
	t.Logf("provider quota paused %s after its 429 (Retry-After %s); provider other sent %d meanwhile", paused.Round(10*time.Millisecond), retryAfter, sentB)
	require.GreaterOrEqual(t, paused, retryAfter-200*time.Millisecond, "the queue stays paused for Retry-After")
	require.Positive(t, sentB, "the other provider keeps sending while this one is paused")

	// The target that got the 429: a failed attempt (key freed), then done.
	var quotaTarget []attempt
	for _, rows := range byTarget(e.attempts(t, idA)) {
		if len(rows) > 1 {
			require.Nil(t, quotaTarget, "only one target met the 429")
			quotaTarget = rows
		}
	}
	require.Len(t, quotaTarget, 2)
	require.Equal(t, "failed", quotaTarget[0].State)
	require.Contains(t, quotaTarget[0].Reason, "429")
	require.Equal(t, "done", quotaTarget[1].State)
	require.Equal(t, 2, quotaTarget[1].Attempt)
}

// providerDown is how long TestProviderDownForAMinute keeps the providers
// unreachable.
const providerDown = time.Minute

// TestProviderDownForAMinute: a deduplicating webhook and an SMTP relay
// both refuse connections for a minute. Every attempt meanwhile is failed
// (nothing left the process), retried with backoff (1 s, 2 s, 4 s … so
// about six attempts in a minute, within the bound of 8); when the
// providers return every target is sent, once, and nothing is unknown.
func TestProviderDownForAMinute(t *testing.T) {
	slow(t)
	t.Parallel()
	e := newEnv(t)
	hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hook.Close)
	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	hookHost := strings.TrimPrefix(strings.SplitN(hook.URL(), "/hook", 2)[0], "http://")
	whSwitch := newTCPSwitch(t, hookHost)
	smSwitch := newTCPSwitch(t, relay.Addr())
	whSwitch.down()
	smSwitch.down()

	wh := webhookWorld("wh", hook, "http://"+whSwitch.addr+"/hook?dedupe=true", "concurrency=2")
	sm := smtpWorld("sm", relay, "smtp://"+smSwitch.addr+"?tls=none", "concurrency=2")
	w := startWorker(t, e.url, []string{wh.provider, sm.provider}, fastFlags)
	const n = 10
	idWH := e.campaign(t, "wh", "w", n)
	idSM := e.campaign(t, "sm", "s", n)
	waitFor(t, 30*time.Second, "the first failed attempts", func() bool {
		stWH, err1 := e.states(idWH)
		stSM, err2 := e.states(idSM)
		return err1 == nil && err2 == nil && stWH["failed"] > 0 && stSM["failed"] > 0
	}, w)
	wentDown := time.Now()
	time.Sleep(providerDown)
	require.Empty(t, wh.effects())
	require.Empty(t, sm.effects())
	whSwitch.up(t)
	smSwitch.up(t)
	back := time.Now()
	waitFor(t, 3*time.Minute, "both campaigns to complete with every target done", func() bool {
		return e.completed(idWH, n) && e.completed(idSM, n)
	}, w)
	t.Logf("providers down %s; both campaigns done %s after they came back",
		back.Sub(wentDown).Round(time.Second), time.Since(back).Round(100*time.Millisecond))

	for _, c := range []struct {
		id string
		w  *world
	}{{idWH, wh}, {idSM, sm}} {
		requireExactlyOnce(t, c.w, e.targets(t, c.id))
		e.requireHolds(t, c.id)
		maxRows := 0
		for target, rows := range byTarget(e.attempts(t, c.id)) {
			maxRows = max(maxRows, len(rows))
			// Failed attempts while the provider was down, each freeing the
			// key; the last one done. Never unknown: nothing had left.
			for _, a := range rows[:len(rows)-1] {
				require.Equal(t, "failed", a.State, "%s: %+v", target, a)
			}
			require.Equal(t, "done", rows[len(rows)-1].State, "%s: %+v", target, rows)
			require.LessOrEqual(t, len(rows), 8, "%s: retries are bounded (River's MaxAttempts)", target)
		}
		t.Logf("%s: at most %d attempts for a target", c.w.name, maxRows)
	}
}
