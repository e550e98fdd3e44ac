package jobs_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
)

// requireOncePerTarget asserts, from the service's own records (effects
// per effect id, messages per recipient), that each of the campaign's n
// targets got exactly one message.
func requireOncePerTarget(t *testing.T, w *world, campaign string, n int, effects, recipients map[string]int) {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `
		SELECT t.key, t.target FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1`, campaign)
	require.NoError(t, err)
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var key, target string
		require.NoError(t, rows.Scan(&key, &target))
		require.Equal(t, 1, effects[provider.EffectID(key, 0)], "messages for the effect of %s", target)
		require.Equal(t, 1, recipients[target], "messages to %s", target)
		seen++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, n, seen)
	require.Len(t, effects, n, "no message for anything else")
}

// TestPostmarkExactlyOnceThroughAnswersLost: through postmark://, a 5xx
// after Postmark accepted and a lost answer each leave the attempt unknown;
// recovery asks Postmark's search, finds the message and settles done —
// no second message. Every target gets exactly one.
func TestPostmarkExactlyOnceThroughAnswersLost(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	pm.AcceptThenFail(1, 500)
	pm.AcceptThenDrop(1)
	w := newWorld(t, jobs.Config{}, "pm="+sink.WithOption(pm.URL(), "concurrency=1"))
	w.start(t)
	id := w.running(t, "pm", 12)

	await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == 12 })
	await.Until(t, 10*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	requireOncePerTarget(t, w, id, 12, pm.Effects(), pm.CountByRecipient())
	require.Equal(t, 12, pm.Requests(), "one POST /email per target: the two in doubt were not sent again")
	require.Positive(t, pm.Searches(), "recovery asked Postmark")
	var probed int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(DISTINCT effect_id) FROM effect_response WHERE kind = 'probe'`).Scan(&probed))
	require.Equal(t, 2, probed, "the two attempts in doubt were settled by the probe")

	// Recovered or not, each target keeps Postmark's message id as its
	// receipt: what a bounce or an export naming that id is tied to.
	messageIDs := map[string]string{}
	for _, m := range pm.Messages() {
		messageIDs[m.Metadata[provider.PostmarkMetadataKey]] = m.MessageID
	}
	rows, err := w.pool.Query(w.ctx, `SELECT key, epoch, coalesce(receipt, '') FROM effect WHERE state = 'done'`)
	require.NoError(t, err)
	var key, receipt string
	var epoch int
	_, err = pgx.ForEachRow(rows, []any{&key, &epoch, &receipt}, func() error {
		require.Equal(t, messageIDs[provider.EffectID(key, epoch)], receipt, "the receipt of %s", key)
		return nil
	})
	require.NoError(t, err)
}

// TestPostmarkRecoveryNamesADuplicate: Postmark accepted the first send
// twice and answered 500, so the attempt is unknown; recovery's probe
// finds two messages with the effect id and settles it delivered — it
// sends nothing again, which would make a third — and the resolution
// says Postmark holds a duplicate, for the audit and a person to see.
func TestPostmarkRecoveryNamesADuplicate(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	pm.AcceptTwice(1)
	pm.AcceptThenFail(1, 500)
	w := newWorld(t, jobs.Config{}, "pm="+sink.WithOption(pm.URL(), "concurrency=1"))
	w.start(t)
	id := w.running(t, "pm", 3)

	await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == 3 })
	require.Equal(t, 3, pm.Requests(), "one POST /email per target: the one in doubt was not sent again")
	counts := map[int]int{}
	for _, n := range pm.Effects() {
		counts[n]++
	}
	require.Equal(t, map[int]int{1: 2, 2: 1}, counts, "two targets once, the first twice (the stand-in's doing)")
	var by, resolution string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT resolved_by, resolution FROM effect WHERE resolved_by IS NOT NULL`).Scan(&by, &resolution))
	require.Equal(t, "probe:pm", by)
	require.Equal(t, "probe: pm holds 2 messages with this effect id, a duplicate at the provider", resolution)
}

// TestSMTPProbeExactlyOnceThroughALostAnswer: smtp:// with probe=postmark
// (and probe=mailjet) through the in-repo relay, whose first answer to the
// end of DATA is lost: the attempt is unknown, the probe asks the service's
// API, which sees what the relay accepted, and settles done — one message
// per target.
func TestSMTPProbeExactlyOnceThroughALostAnswer(t *testing.T) {
	t.Parallel()
	for _, service := range []string{"postmark", "mailjet"} {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			relay, err := sink.NewSMTP()
			require.NoError(t, err)
			t.Cleanup(relay.Close)
			var u string
			var effects func() map[string]int
			if service == "postmark" {
				pm := sink.NewPostmark(sink.PostmarkOpts{SMTP: relay})
				t.Cleanup(pm.Close)
				u, effects = pm.SMTPURL(), pm.Effects
			} else {
				mj := sink.NewMailjet(sink.MailjetOpts{SMTP: relay})
				t.Cleanup(mj.Close)
				u, effects = mj.SMTPURL(), mj.Effects
			}
			relay.DropAfterData(1)
			w := newWorld(t, jobs.Config{JobTimeout: 5 * time.Second, RescueAfter: 20 * time.Second}, "mail="+sink.WithOption(u, "concurrency=1"))
			w.start(t)
			id := w.running(t, "mail", 6)

			await.Until(t, 30*time.Second, "every target done", func() bool { return w.states(t, id)["done"] == 6 })
			recipients := map[string]int{}
			for _, m := range relay.Messages() {
				for _, r := range m.Rcpts {
					recipients[r]++
				}
			}
			requireOncePerTarget(t, w, id, 6, effects(), recipients)
			var probed int
			require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(DISTINCT effect_id) FROM effect_response WHERE kind = 'probe'`).Scan(&probed))
			require.Equal(t, 1, probed, "the attempt whose answer was lost was settled by the probe")
		})
	}
}

// TestPostmarkPastTheRetentionStaysUnknown: a dead worker's attempt whose
// message Postmark accepted, recovered only after the probe's retention
// (probe_retention=2s): "not found" would prove nothing, so recovery does
// not probe and does not send again; the target waits, unknown, for a
// person. The other targets go out once each.
func TestPostmarkPastTheRetentionStaysUnknown(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	w := newWorld(t, jobs.Config{}, "pm="+sink.WithOption(pm.URL(), "probe_retention=2s"))
	id := w.approved(t, "pm", 3)
	planID := mustPlanID(t, w, id)

	// A worker claimed target 1, its message reached Postmark, and the
	// worker died before it heard back.
	_, err := w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	var key, target string
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT t.key, t.target FROM plan p JOIN target t ON t.list_id = p.list_id WHERE p.id = $1 AND t.ordinal = 1`, planID).Scan(&key, &target))
	c, err := ledger.NewStore(w.pool).Claim(w.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "dead/1/worker", PlanID: planID, Ordinal: 1})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	body, err := json.Marshal(map[string]any{"From": "sender@example.com", "To": target, "Subject": "Hello", "TextBody": "Hi",
		"Metadata": map[string]string{provider.PostmarkMetadataKey: provider.EffectID(key, 0)}})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, pm.Endpoint()+"/email", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Postmark-Server-Token", pm.Token())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	time.Sleep(2 * time.Second) // past the retention
	w.start(t)
	await.Until(t, 30*time.Second, "the others done and target 1 unknown", func() bool {
		s := w.states(t, id)
		return s["done"] == 2 && s["unknown"] == 1
	})
	time.Sleep(time.Second) // a few maintenance rounds more
	require.Equal(t, map[string]int{"done": 2, "unknown": 1}, w.states(t, id))
	require.Equal(t, 1, pm.Effects()[provider.EffectID(key, 0)], "nothing sent again")
	require.Zero(t, pm.Searches(), "no probe past the retention")
	require.Equal(t, 3, pm.Requests())
	var reason string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM effect WHERE key = $1 AND state = 'unknown'`, key).Scan(&reason))
	require.Contains(t, reason, "window", fmt.Sprintf("the reason says why: %q", reason))
}

// TestPostmarkSettleWindow: a 5xx that Postmark did not act on (nothing
// accepted) is unknown; the probe finds nothing and, once the settle
// window (settle=1s) has passed, the attempt is failed and the target sent
// again — once. And a message accepted behind a 5xx that the search shows
// only after a lag inside the window is found, not sent twice.
func TestPostmarkSettleWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		setup    func(*sink.Postmark)
		requests int
	}{
		{name: "5xx, nothing accepted: sent again after the window", setup: func(pm *sink.Postmark) { pm.FailNext(1, 503, nil, `{"ErrorCode":0,"Message":"Service unavailable"}`) }, requests: 5},
		{name: "accepted, search lags inside the window: found", setup: func(pm *sink.Postmark) { pm.AcceptThenFail(1, 500); pm.SearchLag(500 * time.Millisecond) }, requests: 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pm := sink.NewPostmark(sink.PostmarkOpts{})
			t.Cleanup(pm.Close)
			c.setup(pm)
			w := newWorld(t, jobs.Config{}, "pm="+sink.WithOption(pm.URL(), "concurrency=1&settle=1500ms"))
			w.start(t)
			id := w.running(t, "pm", 4)
			await.Until(t, 30*time.Second, "every target done", func() bool {
				s := w.states(t, id)
				return s["done"] == 4 && len(s) == 1
			})
			requireOncePerTarget(t, w, id, 4, pm.Effects(), pm.CountByRecipient())
			require.Equal(t, c.requests, pm.Requests(), "POST /email requests")
		})
	}
}

// TestPostmarkQuotaBacksOff: Postmark answers 429 without Retry-After (it
// documents none) to every send for a while, and two worker processes
// share its queue. The pauses the queue takes start short and double
// while the 429s keep coming, up to the cap, whichever process meets them
// (the sequence lives in the resume jobs, not in a process); once
// Postmark has accepted messages, the next run of 429s starts from the
// short pause again. Every target gets exactly one message.
func TestPostmarkQuotaBacksOff(t *testing.T) {
	t.Parallel()
	const start, most = 50 * time.Millisecond, 400 * time.Millisecond
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	limit := func(on bool) {
		n := 0
		if on {
			n = 1 << 20
		}
		pm.FailNext(n, http.StatusTooManyRequests, nil, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`)
	}
	cfg := jobs.Config{QuotaBackoffStart: start, QuotaBackoffMax: most}
	item := "pm=" + sink.WithOption(pm.URL(), "concurrency=1")
	w := newWorld(t, cfg, item)
	w.start(t)
	w.anotherWorker(t, cfg, item)

	// The pauses the queue took, as their resume jobs recorded them,
	// oldest first (0: a pause that did not back off).
	pauses := func() []time.Duration {
		rows, err := w.pool.Query(w.ctx, `SELECT coalesce((args ->> 'backoff_ms')::bigint, 0) FROM river_job
			WHERE kind = 'onceplan_resume_queue' AND args ->> 'queue' = 'provider_pm' ORDER BY id`)
		require.NoError(t, err)
		ms, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		out := make([]time.Duration, len(ms))
		for i, m := range ms {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	// doubling: each pause after the first is twice the one before, at
	// most the cap.
	requireDoubling := func(ps []time.Duration, what string) {
		t.Helper()
		require.Equal(t, start, ps[0], "%s: the first pause is the short one: %v", what, ps)
		for i := 1; i < len(ps); i++ {
			require.Equal(t, min(2*ps[i-1], most), ps[i], "%s: pause %d: %v", what, i+1, ps)
		}
	}

	limit(true)
	a := w.running(t, "pm", 6)
	var first []time.Duration
	await.Until(t, 30*time.Second, "five pauses of the queue", func() bool { first = pauses(); return len(first) >= 5 })
	requireDoubling(first, "429s in a row")
	require.Equal(t, []time.Duration{start, 2 * start, 4 * start, most, most}, first[:5])
	limit(false)
	await.Until(t, 30*time.Second, "the first campaign to complete", func() bool { return w.campaignState(t, a) == approval.StateCompleted })

	// Postmark took the first campaign's messages: the next 429s start
	// the backoff again.
	before := len(pauses())
	limit(true)
	b := w.running(t, "pm", 6)
	var second []time.Duration
	await.Until(t, 30*time.Second, "two more pauses of the queue", func() bool {
		second = pauses()[before:]
		return len(second) >= 2
	})
	requireDoubling(second, "429s after messages were accepted")
	limit(false)
	await.Until(t, 30*time.Second, "the second campaign to complete", func() bool { return w.campaignState(t, b) == approval.StateCompleted })

	// Each pause lasted at least as long as it said, and ended: the
	// resume jobs' own records, and the queue open.
	var short, open int
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT count(*) FILTER (WHERE finalized_at < (args ->> 'until')::timestamptz),
		       count(*) FILTER (WHERE state <> 'completed')
		FROM river_job WHERE kind = 'onceplan_resume_queue'`).Scan(&short, &open))
	require.Zero(t, short, "resumes before the end of their pause")
	require.Zero(t, open, "resumes still to run")
	q, err := w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("pm"))
	require.NoError(t, err)
	require.Nil(t, q.PausedAt, "the queue is open")

	// Every target of the two campaigns got exactly one message, and each
	// 429 was a failed attempt that sent nothing.
	effects := pm.Effects()
	for _, c := range []string{a, b} {
		rows, err := w.pool.Query(w.ctx, `SELECT t.key FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id WHERE c.id = $1`, c)
		require.NoError(t, err)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Len(t, keys, 6)
		for _, k := range keys {
			require.Equal(t, 1, effects[provider.EffectID(k, 0)], "messages for the effect of %s", k)
		}
	}
	require.Len(t, effects, 12, "no message for anything else")
	for rcpt, n := range pm.CountByRecipient() {
		require.Equal(t, 2, n, "messages to %s, one per campaign", rcpt)
	}
	quota := 0
	for _, f := range w.failedAttempts(t) {
		require.Contains(t, f.Raw, "429 Too Many Requests")
		quota++
	}
	require.Equal(t, pm.Requests()-12, quota, "every request but the twelve messages was a 429")
	require.GreaterOrEqual(t, quota, len(first)+len(second))
}

// anotherWorker starts a second worker process's runner on w's database,
// with providers of its own (NAME=URL items): a process of its own in
// all but the operating system's sense.
func (w *world) anotherWorker(t *testing.T, cfg jobs.Config, providers ...string) {
	t.Helper()
	var ps []provider.Provider
	for _, item := range providers {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	cfg.Pool, cfg.Providers = w.pool, reg
	cfg.Logger = slog.New(slog.NewTextHandler(testLogOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.MaintenanceInterval = cmp.Or(cfg.MaintenanceInterval, 200*time.Millisecond)
	cfg.PausedSnooze = cmp.Or(cfg.PausedSnooze, 200*time.Millisecond)
	r, err := jobs.NewRunner(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(w.ctx, approval.NewService(w.pool, r.Enqueuer())))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
}

// TestRecoveryRequeuesATargetWhoseRangeJobIsLive: a recipient lost to a
// race between recovery and a live job. The first send of a job of two
// targets is answered 503 before Postmark took it (unknown), and the job
// goes on to the second, whose call Postmark holds. Meanwhile maintenance
// probes the first, finds nothing after the settle window, and frees its
// key — while the job that carries it is live. The target is requeued
// all the same (that job has passed it by), and ends sent once, counted
// at the stand-in; the audit holds.
func TestRecoveryRequeuesATargetWhoseRangeJobIsLive(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	pm.FailNext(1, http.StatusServiceUnavailable, nil, `{"ErrorCode":0,"Message":"unavailable"}`)
	release := pm.HoldNext(1)
	t.Cleanup(release)
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1}, "pm="+sink.WithOption(pm.URL(), "settle=100ms"))
	id := w.running(t, "pm", 8)
	n, most := w.effectJobs(t)
	require.Equal(t, []int{4, 2}, []int{n, most}, "jobs of two targets")
	w.start(t)

	first := w.target(t, id, 1)
	await.Until(t, time.Minute, "the first target requeued while its range job holds the second's call", func() bool {
		var requeued, rangeLive bool
		require.NoError(t, w.pool.QueryRow(w.ctx, `
			SELECT EXISTS (SELECT 1 FROM river_job WHERE kind = 'onceplan_effect' AND (args ->> 'ordinal')::int = 1 AND args ->> 'count' IS NULL),
			       EXISTS (SELECT 1 FROM river_job WHERE kind = 'onceplan_effect' AND (args ->> 'ordinal')::int <= 2
			               AND (args ->> 'count')::int >= 1 AND state = 'running')`).Scan(&requeued, &rangeLive))
		return requeued && rangeLive
	})
	var failure string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT failure FROM effect WHERE key = $1 AND state = 'failed'`, first.key).Scan(&failure))
	require.Equal(t, "retry", failure, "freed by recovery, to be sent again")
	release()

	await.Until(t, time.Minute, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Equal(t, 1, pm.CountByRecipient()[first.address], "the first target, at the stand-in")
	requireOncePerTarget(t, w, id, 8, pm.Effects(), pm.CountByRecipient())
	m, err := audit.ForCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)
	require.True(t, m.Holds, "%s: %v", m.Headline(), m.Reasons)
}
