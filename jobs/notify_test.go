package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
)

// The notifications' tests run against a real SMTP sink (mailto:
// notifiers through a real SMTP provider) and real HTTP receivers
// (webhook notifiers), and count what arrived there, never our own
// tables.

const (
	notifyPublicURL = "https://onceplan.example.com"
	hookSecret      = "the-receivers-shared-secret"
)

// newNotifyWorld is newWorld with notifiers (NAME=URL items, parsed with
// the providers), connected as the application role, and with
// test-friendly notification times.
func newNotifyWorld(t *testing.T, cfg jobs.Config, providers, notifiers []string) *world {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.AppPool(t)
	var ps []provider.Provider
	for _, item := range providers {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	nots, err := notify.ParseList(notifiers, notify.ParseOptions{Providers: reg, PublicURL: notifyPublicURL,
		Getenv: func(k string) string {
			if k == "HOOK_SECRET" {
				return hookSecret
			}
			return ""
		}})
	require.NoError(t, err)
	cfg.Pool, cfg.Providers, cfg.Notifiers, cfg.PublicURL = pool, reg, nots, notifyPublicURL
	cfg.Logger = slog.New(slog.NewTextHandler(testLogOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, d := range []struct {
		field *time.Duration
		value time.Duration
	}{
		{&cfg.MaintenanceInterval, 100 * time.Millisecond}, {&cfg.PausedSnooze, 200 * time.Millisecond},
		{&cfg.NotifyWindow, 3 * time.Second}, {&cfg.NotifyWait, 300 * time.Millisecond}, {&cfg.NotifyRetryBase, 100 * time.Millisecond},
	} {
		if *d.field == 0 {
			*d.field = d.value
		}
	}
	if cfg.NotifyMaxAttempts == 0 {
		cfg.NotifyMaxAttempts = 4
	}
	r, err := jobs.NewRunner(cfg)
	require.NoError(t, err)
	svc := approval.NewService(pool, r.Enqueuer())
	svc.Announcer = r.Announcer()
	require.NotNil(t, svc.Announcer)
	w := &world{ctx: ctx, pool: pool, runner: r, svc: svc}
	w.proposer = w.user(t, "proposer@example.com", auth.RoleProposer)
	w.approver = w.user(t, "approver@example.com", auth.RoleApprover)
	w.operator = w.user(t, "operator@example.com", auth.RoleOperator)
	return w
}

func (w *world) user(t *testing.T, email string, roles ...auth.Role) auth.Actor {
	t.Helper()
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	id := pgtest.User(t, w.pool, pgtest.UserOpts{Email: email, Roles: names})
	return auth.Actor{UserID: id, Email: email, Roles: roles}
}

// draftOf creates a campaign of n targets proposed by a, on providerName.
func (w *world) draftOf(t *testing.T, a auth.Actor, providerName string, n, approvals int) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("email,name\n")
	for i := range n {
		fmt.Fprintf(&csv, "t%04d@example.com,T%d\n", i, i)
	}
	res, err := w.svc.Create(w.ctx, a, approval.CreateParams{
		Name: "Spring newsletter", Provider: providerName, RequiredApprovals: approvals,
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv.String())},
	})
	require.NoError(t, err)
	return res.Campaign.ID
}

// notifyJobsSettled reports whether no notification job is left to run.
func (w *world) notifyJobsSettled(t *testing.T) bool {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM river_job WHERE queue = $1
		AND state NOT IN ('completed', 'cancelled', 'discarded')`, jobs.NotifyQueue).Scan(&n))
	return n == 0
}

// mails is what the SMTP sink accepted, by recipient: each message's
// subject and text.
type sentMail struct{ subject, text string }

func mailsTo(t *testing.T, s *sink.SMTP) map[string][]sentMail {
	t.Helper()
	out := map[string][]sentMail{}
	for _, m := range s.Messages() {
		subject, text, err := m.Content()
		require.NoError(t, err)
		for _, r := range m.Rcpts {
			out[r] = append(out[r], sentMail{subject, text})
		}
	}
	return out
}

// subjects lists the subjects of ms that start with prefix.
func subjects(ms []sentMail, prefix string) []sentMail {
	var out []sentMail
	for _, m := range ms {
		if strings.HasPrefix(m.subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

func bodyOf(t *testing.T, r sink.ReceivedRequest) map[string]any {
	t.Helper()
	var b map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &b), string(r.Body))
	return b
}

// TestSubmitTellsEachApproverOnce: a submit reaches each approver who may
// approve it exactly once, by email through the SMTP sink, with the
// approval URL — not its proposer (who is an approver too), not a
// disabled approver, not a mere operator — and the team's webhook once,
// signed. A second expansion of the same decision (a retried job) sends
// nothing more.
func TestSubmitTellsEachApproverOnce(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	hook := sink.NewReceiver()
	t.Cleanup(hook.Close)
	w := newNotifyWorld(t, jobs.Config{}, []string{"mail=" + smtp.URL()},
		[]string{"mail=mailto:?provider=mail&from=onceplan@example.com", "team=" + hook.URL() + "?hmac_secret_env=HOOK_SECRET"})
	pat := w.user(t, "pat@example.com", auth.RoleProposer, auth.RoleApprover)
	w.user(t, "abe@example.com", auth.RoleApprover)
	w.user(t, "root@example.com", auth.RoleAdmin)
	w.user(t, "gone@example.com", auth.RoleApprover)
	_, err = auth.DisableUser(w.ctx, w.pool, "gone@example.com")
	require.NoError(t, err)
	w.start(t)

	id := w.draftOf(t, pat, "mail", 3, 1)
	res, err := w.svc.Submit(w.ctx, pat, id)
	require.NoError(t, err)
	require.Equal(t, approval.StatePendingApproval, res.Campaign.State)
	approvalURL := notifyPublicURL + "/campaigns/" + id + "/approval"

	await.Until(t, 20*time.Second, "the notifications to be delivered", func() bool {
		return len(smtp.Messages()) >= 3 && len(hook.Accepted()) >= 1 && w.notifyJobsSettled(t)
	})
	got := mailsTo(t, smtp)
	require.Len(t, got, 3, "recipients: %v", got)
	for _, to := range []string{"approver@example.com", "abe@example.com", "root@example.com"} {
		require.Len(t, got[to], 1, to)
		m := got[to][0]
		require.Equal(t, "Approval needed: “Spring newsletter” version 1, 3 targets", m.subject, to)
		require.Contains(t, m.text, approvalURL, to)
		require.Contains(t, m.text, "pat@example.com proposed version 1", to)
		require.Contains(t, m.text, notifyPublicURL+notify.AccountPath, to)
	}
	for _, to := range []string{"pat@example.com", "gone@example.com", "operator@example.com", "proposer@example.com"} {
		require.Empty(t, got[to], to)
	}

	reqs := hook.Requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.NoError(t, notify.Verify([]byte(hookSecret), r.Header.Get(notify.HeaderTimestamp), r.Header.Get(notify.HeaderSignature), r.Body, time.Now(), time.Minute))
	require.Equal(t, "submitted", r.Header.Get(notify.HeaderEvent))
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	b := bodyOf(t, r)
	require.Equal(t, "submitted", b["event"])
	require.Equal(t, id, b["campaign_id"])
	require.Equal(t, "Spring newsletter", b["campaign_name"])
	require.EqualValues(t, 1, b["version"])
	require.EqualValues(t, 3, b["target_count"])
	require.Equal(t, "pat@example.com", b["proposer"])
	require.Equal(t, approvalURL, b["approval_url"])
	require.Contains(t, b["text"], approvalURL)
	require.ElementsMatch(t, []any{"abe@example.com", "approver@example.com", "root@example.com"}, b["must_act"])

	// The announcement again, as a retried job would run it: it finds
	// every notification recorded, and enqueues nothing.
	var eventID int64
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT id FROM campaign_event WHERE campaign_id = $1 AND action = 'submit'`, id).Scan(&eventID))
	again, err := w.runner.Notify().Expand(w.ctx, notify.Source{Event: eventID}, func(context.Context, pgx.Tx, []notify.Recorded) error {
		t.Fatal("a second expansion enqueued deliveries")
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, again)
	await.Until(t, 30*time.Second, "the notification jobs to settle", func() bool { return w.notifyJobsSettled(t) })
	require.Len(t, smtp.Messages(), 3)
	require.Len(t, hook.Requests(), 1)
}

// TestNotifierDownDoesNotSlowTheSubmit: a receiver answering 500, one
// that hangs past its timeout and one nobody listens at do not slow or
// fail the submit; the first two are retried and get exactly one
// delivery each; the third is given up on after its bounded tries, with
// its answer recorded and listed as not delivered.
func TestNotifierDownDoesNotSlowTheSubmit(t *testing.T) {
	t.Parallel()
	failing, hanging := sink.NewReceiver(), sink.NewReceiver()
	t.Cleanup(failing.Close)
	t.Cleanup(hanging.Close)
	failing.FailNext(2, http.StatusInternalServerError)
	hanging.HangNext(1, 30*time.Second)
	dead := refusedURL(t)
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newNotifyWorld(t, jobs.Config{NotifyMaxAttempts: 3}, []string{"hook=" + hook.URL()},
		[]string{"failing=" + failing.URL(), "hanging=" + hanging.URL() + "?timeout=500ms", "dead=" + dead})
	w.start(t)
	id := w.draftOf(t, w.proposer, "hook", 2, 1)

	start := time.Now()
	res, err := w.svc.Submit(w.ctx, w.proposer, id)
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, approval.StatePendingApproval, res.Campaign.State)
	require.Less(t, took, time.Second, "the submit waited for a notifier")

	await.Until(t, 30*time.Second, "every notification to be delivered or given up on", func() bool {
		return len(failing.Accepted()) == 1 && len(hanging.Accepted()) == 1 && w.notifyJobsSettled(t)
	})
	require.Len(t, failing.Requests(), 3, "two answered 500, then the retry that got through")
	require.Len(t, failing.Accepted(), 1)
	require.Len(t, hanging.Requests(), 2, "one hung past the timeout, then the retry")
	require.Len(t, hanging.Accepted(), 1)
	require.Equal(t, failing.Accepted()[0].Header.Get(notify.HeaderNotification), failing.Requests()[0].Header.Get(notify.HeaderNotification),
		"a retry carries the same notification id")

	// The records: what each try got, and the dead notifier given up on.
	counts, err := notify.StateCounts(w.ctx, w.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]int{
		"failing": {notify.StateDelivered: 1}, "hanging": {notify.StateDelivered: 1}, "dead": {notify.StateFailed: 1},
	}, counts)
	rows, err := w.pool.Query(w.ctx, `SELECT a.status, coalesce(a.http_status, 0), a.error FROM notification_attempt a
		JOIN notification n ON n.id = a.notification_id WHERE n.notifier = 'failing' ORDER BY a.id`)
	require.NoError(t, err)
	var tries []string
	for rows.Next() {
		var status, msg string
		var code int
		require.NoError(t, rows.Scan(&status, &code, &msg))
		tries = append(tries, fmt.Sprintf("%s %d %s", status, code, msg))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"retrying 500 answered 500 Internal Server Error", "retrying 500 answered 500 Internal Server Error", "delivered 200 "}, tries)
	und, err := notify.Undelivered(w.ctx, w.pool, 10)
	require.NoError(t, err)
	require.Len(t, und, 1)
	require.Equal(t, "dead", und[0].Notifier)
	require.Equal(t, notify.StateFailed, und[0].State)
	require.Equal(t, 3, und[0].Attempts)
	require.Contains(t, und[0].Error, "connection refused")
	require.Equal(t, "Spring newsletter", und[0].CampaignName)
}

// TestAttentionIsBatched: 50 targets going unknown within a moment make
// one message per window for their campaign, with the count — by email
// to the operators and to the team's webhook — and no more while nothing
// grows.
func TestAttentionIsBatched(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	team := sink.NewReceiver()
	t.Cleanup(team.Close)
	// The provider applies each effect and then answers 500: it may or
	// may not have landed, and it can neither deduplicate nor be asked,
	// so every target is unknown.
	flaky := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(flaky.Close)
	flaky.ApplyThenFail(50, http.StatusInternalServerError)
	// The wait gathers the burst into one message even on a busy machine.
	const window = 5 * time.Second
	w := newNotifyWorld(t, jobs.Config{NotifyWindow: window, NotifyWait: 2 * time.Second},
		[]string{"flaky=" + sink.WithOption(flaky.URL(), "concurrency=16"), "mail=" + smtp.URL()},
		[]string{"ops=mailto:?provider=mail&from=onceplan@example.com", "team=" + team.URL() + "?events=attention"})
	w.start(t)
	id := w.running(t, "flaky", 50)

	await.Until(t, 30*time.Second, "50 targets to be unknown", func() bool { return w.states(t, id)["unknown"] == 50 })
	unknownAt := time.Now()
	await.Until(t, 20*time.Second, "the attention message", func() bool { return len(team.Accepted()) >= 1 })
	// Through one window after the last unknown: no second message.
	time.Sleep(time.Until(unknownAt.Add(window + time.Second)))
	await.Until(t, 10*time.Second, "the notification jobs to settle", func() bool { return w.notifyJobsSettled(t) })

	reqs := team.Requests()
	require.Len(t, reqs, 1, "attention messages to the team")
	b := bodyOf(t, reqs[0])
	require.Equal(t, "attention", b["event"])
	require.Equal(t, map[string]any{"unknown": 50.0, "stranded": 0.0, "failed": 0.0}, b["counts"])
	require.Equal(t, notifyPublicURL+"/campaigns/"+id+"/run?state=unknown", b["url"])
	require.Contains(t, b["text"], "50 unknown")

	att := subjects(mailsTo(t, smtp)["operator@example.com"], "Attention:")
	require.Len(t, att, 1, "attention messages to the operator")
	require.Equal(t, "Attention: “jobs flaky” has 50 unknown targets", att[0].subject)
	require.Contains(t, att[0].text, "50 targets unknown")
	require.Contains(t, att[0].text, notifyPublicURL+"/campaigns/"+id+"/run?state=unknown")
	for to, ms := range mailsTo(t, smtp) {
		if to != "operator@example.com" {
			require.Empty(t, subjects(ms, "Attention:"), to)
		}
	}
}

// TestDecisionsReachTheProposer: a rejection and the quorum reach the
// proposer once each (the first of two approvals nothing); the
// completion reaches the proposer and the operator who started it, once
// each, with the exactly-once headline.
func TestDecisionsReachTheProposer(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newNotifyWorld(t, jobs.Config{}, []string{"hook=" + hook.URL(), "mail=" + smtp.URL()},
		[]string{"mail=mailto:?provider=mail&from=onceplan@example.com"})
	abe := w.user(t, "abe@example.com", auth.RoleApprover)
	w.start(t)
	id := w.draftOf(t, w.proposer, "hook", 3, 2)
	proposer := func() []sentMail { return mailsTo(t, smtp)["proposer@example.com"] }

	_, err = w.svc.Submit(w.ctx, w.proposer, id)
	require.NoError(t, err)
	_, err = w.svc.Reject(w.ctx, w.approver, id, "the subject names last year")
	require.NoError(t, err)
	await.Until(t, 20*time.Second, "the rejection to reach the proposer", func() bool { return len(subjects(proposer(), "Rejected:")) == 1 })
	rej := subjects(proposer(), "Rejected:")[0]
	require.Equal(t, "Rejected: “Spring newsletter” version 1", rej.subject)
	require.Contains(t, rej.text, "approver@example.com rejected version 1 of “Spring newsletter”: the subject names last year")
	require.Contains(t, rej.text, notifyPublicURL+"/campaigns/"+id+"/draft")

	sub, err := w.svc.Submit(w.ctx, w.proposer, id)
	require.NoError(t, err)
	_, err = w.svc.Approve(w.ctx, w.approver, id, sub.PlanHash)
	require.NoError(t, err)
	await.Until(t, 20*time.Second, "the notification jobs to settle", func() bool { return w.notifyJobsSettled(t) })
	require.Empty(t, subjects(proposer(), "Approved:"), "one approval of two")
	_, err = w.svc.Approve(w.ctx, abe, id, sub.PlanHash)
	require.NoError(t, err)
	await.Until(t, 20*time.Second, "the quorum to reach the proposer", func() bool { return len(subjects(proposer(), "Approved:")) == 1 })
	ok := subjects(proposer(), "Approved:")[0]
	require.Equal(t, "Approved: “Spring newsletter” version 1, 3 targets", ok.subject)
	require.Contains(t, ok.text, "reached its quorum of 2 approvals (approver@example.com and abe@example.com)")
	require.Contains(t, ok.text, "An operator can start it now.")

	_, err = w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 30*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 3)
	await.Until(t, 20*time.Second, "the completion to reach the proposer and the starter", func() bool {
		return len(subjects(proposer(), "Completed:")) == 1 && len(subjects(mailsTo(t, smtp)["operator@example.com"], "Completed:")) == 1 && w.notifyJobsSettled(t)
	})
	for _, to := range []string{"proposer@example.com", "operator@example.com"} {
		done := subjects(mailsTo(t, smtp)[to], "Completed:")
		require.Len(t, done, 1, to)
		require.Equal(t, "Completed: “Spring newsletter”, 3/3 exactly once; holds", done[0].subject, to)
		require.Contains(t, done[0].text, "has nothing left to run: 3/3 exactly once; holds.", to)
		require.Contains(t, done[0].text, notifyPublicURL+"/campaigns/"+id+"/audit", to)
	}

	// Each decision once, to whom it concerns: the approvers had the two
	// submits, the proposer the rejection, the quorum and the completion.
	got := mailsTo(t, smtp)
	require.Len(t, got["proposer@example.com"], 3)
	require.Len(t, subjects(got["approver@example.com"], "Approval needed:"), 2)
	require.Len(t, subjects(got["abe@example.com"], "Approval needed:"), 2)
	require.Len(t, got["approver@example.com"], 2)
	require.Len(t, got["operator@example.com"], 1)
}

// TestPreferencesKeepAnEventAway: an approver who turned "submitted" off
// gets nothing for a submit; the other approver and the team's webhook
// (a channel, not a person) still do.
func TestPreferencesKeepAnEventAway(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	team := sink.NewReceiver()
	t.Cleanup(team.Close)
	w := newNotifyWorld(t, jobs.Config{}, []string{"mail=" + smtp.URL()},
		[]string{"mail=mailto:?provider=mail&from=onceplan@example.com", "team=" + team.URL()})
	abe := w.user(t, "abe@example.com", auth.RoleApprover)
	require.NoError(t, notify.SetPreferences(w.ctx, w.pool, abe.UserID, map[notify.Event]bool{notify.EventSubmitted: false}))
	prefs, err := notify.Preferences(w.ctx, w.pool, abe.UserID)
	require.NoError(t, err)
	require.False(t, prefs[notify.EventSubmitted])
	require.True(t, prefs[notify.EventAttention], "untouched events stay on")
	w.start(t)

	id := w.draftOf(t, w.proposer, "mail", 2, 1)
	_, err = w.svc.Submit(w.ctx, w.proposer, id)
	require.NoError(t, err)
	await.Until(t, 20*time.Second, "the notifications to be delivered", func() bool {
		return len(smtp.Messages()) >= 1 && len(team.Accepted()) >= 1 && w.notifyJobsSettled(t)
	})
	got := mailsTo(t, smtp)
	require.Len(t, got["approver@example.com"], 1)
	require.Empty(t, got["abe@example.com"], "abe turned submitted off")
	require.Len(t, got, 1)
	require.Len(t, team.Accepted(), 1)
}

// TestNotifyBackoffIsBounded: the wait between tries doubles from the base
// and stops at NotifyRetryMax.
func TestNotifyBackoffIsBounded(t *testing.T) {
	t.Parallel()
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
		[]time.Duration{jobs.NotifyBackoff(time.Second, 1), jobs.NotifyBackoff(time.Second, 2), jobs.NotifyBackoff(time.Second, 3), jobs.NotifyBackoff(time.Second, 4)})
	require.Equal(t, jobs.NotifyRetryMax, jobs.NotifyBackoff(time.Second, 40))
}

// TestAttentionWaitsForTheRetries: "failed after their retries" — targets
// whose attempt failed while their retry is queued (the provider refuses
// connections: nothing left the process) are no news for an operator, and
// no attention message goes out for them through a whole window; targets
// the provider refused for good (a 400: no retry) are, in one message.
func TestAttentionWaitsForTheRetries(t *testing.T) {
	t.Parallel()
	team := sink.NewReceiver()
	t.Cleanup(team.Close)
	down := refusedURL(t)
	refusing := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(refusing.Close)
	refusing.FailNext(4, http.StatusBadRequest, nil, `{"error":"no such recipient"}`)
	const window = 2 * time.Second
	w := newNotifyWorld(t, jobs.Config{NotifyWindow: window, NotifyWait: 300 * time.Millisecond},
		[]string{"down=" + down, "refusing=" + refusing.URL()},
		[]string{"team=" + team.URL() + "?events=attention"})
	w.start(t)

	retrying := w.running(t, "down", 4)
	await.Until(t, 20*time.Second, "4 targets failed once, their retries queued", func() bool { return w.states(t, retrying)["failed"] == 4 })
	failedAt := time.Now()
	// Their retries back off (1 s, 2 s, 4 s …, 8 attempts): through a
	// window and its wait, the scan sees them failed and not given up.
	time.Sleep(time.Until(failedAt.Add(window + time.Second)))
	s := w.states(t, retrying)
	require.Equal(t, 4, s["failed"]+s["pending"], "still failed or being retried, not given up: %v", s)
	require.Empty(t, team.Requests(), "no attention message for targets whose retries are queued")

	rejected := w.running(t, "refusing", 4)
	await.Until(t, 20*time.Second, "4 targets refused", func() bool { return w.states(t, rejected)["failed"] == 4 })
	await.Until(t, 20*time.Second, "the attention message", func() bool { return len(team.Accepted()) >= 1 })
	reqs := team.Requests()
	require.Len(t, reqs, 1, "one attention message: the refused campaign's")
	b := bodyOf(t, reqs[0])
	require.Equal(t, "attention", b["event"])
	require.Equal(t, map[string]any{"unknown": 0.0, "stranded": 0.0, "failed": 4.0}, b["counts"])
	require.Contains(t, b["url"], "/campaigns/"+rejected+"/run?state=failed")
}

// refusedURL is an http URL on a local port nothing listens on: every
// connection is refused.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	return u
}
