package jobs_test

// Recovery sends only what it derives from the frozen plan
// (docs/ARCHITECTURE.md, "Batch sending"), and no provider's schedule
// holds up maintenance. The server's role writes calls, so a call it
// stored is a record, not an authority: these tests forge what PostgreSQL
// cannot refuse, run the real workers and maintenance rounds, and count
// what reaches the stand-in for Resend.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// forgeAt runs stmts as the application role in one transaction at iso
// and returns PostgreSQL's refusal (nil: accepted and committed).
func forgeAt(t *testing.T, app *pgxpool.Pool, iso pgx.TxIsoLevel, stmts ...string) *pgconn.PgError {
	t.Helper()
	err := pgx.BeginTxFunc(context.Background(), app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(context.Background(), s); err != nil {
				return err
			}
		}
		return nil
	})
	var pgErr *pgconn.PgError
	if err != nil {
		require.ErrorAs(t, err, &pgErr, "at %s", iso)
	}
	return pgErr
}

// resendEmails is a Resend batch body mailing each address.
func resendEmails(t *testing.T, addresses ...string) string {
	t.Helper()
	var emails []map[string]any
	for _, a := range addresses {
		emails = append(emails, map[string]any{"from": "sender@example.com", "to": []string{a}, "subject": "Hello", "text": "Not what was approved"})
	}
	b, err := json.Marshal(emails)
	require.NoError(t, err)
	return string(b)
}

// effectOf is the latest attempt at key.
func (w *world) effectOf(t *testing.T, key string) ledger.Effect {
	t.Helper()
	h, err := ledger.NewStore(w.pool).History(w.ctx, ledger.Key(key))
	require.NoError(t, err)
	require.NotEmpty(t, h, "no attempt at %s", key)
	return h[len(h)-1]
}

// stateOf is the state of the latest attempt at key, "" when none.
func (w *world) stateOf(t *testing.T, key string) ledger.State {
	t.Helper()
	h, err := ledger.NewStore(w.pool).History(w.ctx, ledger.Key(key))
	require.NoError(t, err)
	if len(h) == 0 {
		return ""
	}
	return h[len(h)-1].State
}

// alerts are the alert entries of campaign id's trail.
func (w *world) alerts(t *testing.T, id string) []approval.Event {
	t.Helper()
	evs, err := approval.Events(w.ctx, w.pool, id)
	require.NoError(t, err)
	var out []approval.Event
	for _, e := range evs {
		if e.Action == string(approval.ActionAlert) {
			out = append(out, e)
		}
	}
	return out
}

// rounds runs n maintenance rounds, one after the other.
func (w *world) rounds(t *testing.T, n int) {
	t.Helper()
	for range n {
		require.NoError(t, w.runner.Maintain(w.ctx))
	}
}

// TestForgedBatchCallIsNeverSent is the review's statement, as the role
// the server runs as, in plain SQL at READ COMMITTED: claim an approved,
// unclaimed target of a running Resend campaign (as any claim does) and
// store its call with a request that mails a suppressed address and an
// address in no plan, no key, size 1. What PostgreSQL can refuse of it is
// refused (a call through another provider than its plan's, a size its
// attempts do not fill); the rest — bytes and key, which the role writes
// for every call — is not what the target's frozen plan derives, so
// recovery (the worker that finds the attempt in doubt, and every
// maintenance round after) sends nothing: the target is unknown with the
// reason, the operators are told once, and after a person resolves it the
// target gets its one message and the audit's "holds" is the truth.
func TestForgedBatchCallIsNeverSent(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	team := sink.NewReceiver()
	t.Cleanup(team.Close)
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	w := newNotifyWorld(t, jobs.Config{MaintenanceInterval: time.Hour},
		[]string{"rs=" + sink.WithOption(rs.URL(), "batch=2"), "mail=" + smtp.URL()},
		[]string{"ops=mailto:?provider=mail&from=onceplan@example.com", "team=" + team.URL() + "?events=attention"})
	id := w.running(t, "rs", 2)
	tg := w.target(t, id, 1)
	_, _, err = suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: "suppressed@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)

	claim := fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'mallory/1', %d, %d)`, tg.key, tg.plan, tg.ordinal)
	call := func(provider string, size int) string {
		return fmt.Sprintf(`INSERT INTO effect_batch (provider, plan_id, call_key, request, size) VALUES ('%s', %d, '', convert_to('%s', 'UTF8'), %d)`,
			provider, tg.plan, resendEmails(t, "suppressed@example.com", "stranger@example.com"), size)
	}
	member := `INSERT INTO effect_batch_member (batch_id, position, effect_id)
		VALUES (currval(pg_get_serial_sequence('effect_batch', 'id')), 0, currval(pg_get_serial_sequence('effect', 'id')))`
	for _, refused := range []struct {
		what  string
		stmts []string
	}{
		{"through another provider than its plan's", []string{claim, call("elsewhere", 1), member}},
		{"of two messages carrying one attempt", []string{claim, call("rs", 2), member}},
	} {
		pgErr := forgeAt(t, w.pool, pgx.ReadCommitted, refused.stmts...)
		require.NotNil(t, pgErr, "a call %s: accepted", refused.what)
		require.Equal(t, "OP004", pgErr.Code, "a call %s: %s", refused.what, pgErr.Message)
	}
	require.Nil(t, forgeAt(t, w.pool, pgx.ReadCommitted, claim, call("rs", 1), member), "the review's call, as the role stores any call")

	w.start(t)
	await.Until(t, time.Minute, "the forged call's target to be unknown and the other target done", func() bool {
		return w.stateOf(t, tg.key) == ledger.StateUnknown && w.stateOf(t, w.target(t, id, 2).key) == ledger.StateDone
	})
	got := w.effectOf(t, tg.key)
	require.Contains(t, got.Reason, "its stored request", "the reason says what differs: %s", got.Reason)
	require.Contains(t, got.Reason, "is not the one its targets' frozen plan derives")
	await.Until(t, time.Minute, "the operators to be told", func() bool {
		return len(team.Accepted()) == 1 && len(subjects(mailsTo(t, smtp)["operator@example.com"], "Attention:")) == 1
	})

	// Maintenance rounds: each finds the attempt unknown, and sends
	// nothing; the operators are not told again.
	before := rs.Requests()
	w.rounds(t, 3)
	await.Until(t, time.Minute, "the notification jobs to settle", func() bool { return w.notifyJobsSettled(t) })
	require.Equal(t, before, rs.Requests(), "no request to Resend in the rounds")
	require.Equal(t, map[string]int{w.target(t, id, 2).address: 1}, rs.CountByRecipient(), "messages by recipient")
	require.Len(t, team.Requests(), 1, "one alert to the team")
	b := bodyOf(t, team.Requests()[0])
	require.Equal(t, "attention", b["event"])
	require.Contains(t, b["reason"], "is not the one its targets' frozen plan derives")
	require.Equal(t, notifyPublicURL+"/campaigns/"+id+"/run?state=unknown", b["url"])
	mail := subjects(mailsTo(t, smtp)["operator@example.com"], "Attention:")
	require.Len(t, mail, 1)
	require.Equal(t, "Attention: “jobs rs”: recovery stopped and sent nothing", mail[0].subject)
	require.Contains(t, mail[0].text, "is not the one its targets' frozen plan derives")
	require.Len(t, w.alerts(t, id), 1, "one alert in the campaign's trail")

	// A person finds nothing at Resend and resolves the target as not
	// delivered: it is sent, once, as the plan says; the forged call never.
	_, err = w.svc.ResolveEffect(w.ctx, w.operator, id, tg.key, ledger.NotDelivered, "not in Resend's log")
	require.NoError(t, err)
	_, err = w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, time.Minute, "the resolved target sent as the plan says", func() bool {
		return w.stateOf(t, tg.key) == ledger.StateDone
	})
	w.rounds(t, 2)
	require.Equal(t, map[string]int{tg.address: 1, w.target(t, id, 2).address: 1}, rs.CountByRecipient(), "messages by recipient")
	for _, r := range rs.RequestLog() {
		require.NotEmpty(t, r.IdempotencyKey, "every call under its key")
		require.NotContains(t, string(r.Body), "stranger@example.com")
	}
	m, err := audit.ForPlan(w.ctx, w.pool, tg.plan)
	require.NoError(t, err)
	require.True(t, m.Holds, "each target got its one message, and nobody else anything: %v", m.Reasons)
	require.Equal(t, 2, m.ExactlyOnce)
}

// TestBatchCallWhoseAnswerDoesNotMatchIsNotSentAgain: Resend answers a
// call of two with three ids (an answer that does not match the call:
// which message was sent cannot be told). Both targets are unknown; the
// next maintenance rounds send nothing again — the answer to a repeat
// could not tell more — and the operators are told once, in the trail.
func TestBatchCallWhoseAnswerDoesNotMatchIsNotSentAgain(t *testing.T) {
	t.Parallel()
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	rs.FailNext(1, 200, nil, `{"data":[{"id":"x1"},{"id":"x2"},{"id":"x3"}]}`)
	// One worker: the campaign's 8 targets go in jobs of two, each a call.
	w := newWorld(t, jobs.Config{MaintenanceInterval: time.Hour, WorkersPerQueue: 1}, "rs="+sink.WithOption(rs.URL(), "batch=2&concurrency=1"))
	id := w.running(t, "rs", 8)
	w.start(t)
	await.Until(t, time.Minute, "the first call's two targets unknown, the others done", func() bool {
		return w.states(t, id)["unknown"] == 2 && w.states(t, id)["done"] == 6
	})
	calls := rs.Requests()
	require.Equal(t, 4, calls, "four calls of two")

	w.rounds(t, 4)
	require.Equal(t, calls, rs.Requests(), "no call in the rounds")
	require.Len(t, rs.CountByRecipient(), 6, "the six targets of the three calls answered as they should")
	require.Equal(t, map[string]int{"unknown": 2, "done": 6}, w.states(t, id))
	alerts := w.alerts(t, id)
	require.Len(t, alerts, 1, "one alert, whatever the rounds")
	require.Contains(t, alerts[0].Reason, "does not match it")
}

// runningOf creates, approves and starts a campaign on providerName
// mailing addresses.
func (w *world) runningOf(t *testing.T, providerName string, addresses ...string) string {
	t.Helper()
	id := w.draftOfAddresses(t, providerName, nil, addresses...)
	_, err := w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	return id
}

// draftOfAddresses creates a campaign mailing addresses (starting by
// itself at scheduled, when given) and approves it.
func (w *world) draftOfAddresses(t *testing.T, providerName string, scheduled *time.Time, addresses ...string) string {
	t.Helper()
	res, err := w.svc.Create(w.ctx, w.proposer, approval.CreateParams{
		Name: "jobs " + providerName + " " + addresses[0], Provider: providerName, ScheduledAt: scheduled,
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\n" + strings.Join(addresses, "\n") + "\n")},
	})
	require.NoError(t, err)
	sub, err := w.svc.Submit(w.ctx, w.proposer, res.Campaign.ID)
	require.NoError(t, err)
	_, err = w.svc.Approve(w.ctx, w.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	return res.Campaign.ID
}

// deadClaim is an attempt at tg claimed by a worker that died.
func (w *world) deadClaim(t *testing.T, tg target) ledger.Effect {
	t.Helper()
	c, err := ledger.NewStore(w.pool).Claim(w.ctx, ledger.ClaimParams{Key: ledger.Key(tg.key), Owner: "dead/1/worker", PlanID: tg.plan, Ordinal: tg.ordinal})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	return c.Effect
}

// TestBatchCallMixingTwoCampaignsIsNotSent: a call that carries a target
// of a running campaign and one of a campaign cancelled since — which the
// server never writes, and PostgreSQL now refuses; here a row from before
// that rule — is not sent again after its worker died: each attempt is
// judged against its own plan, and a call carries one plan's. Nobody is
// mailed by it, both attempts are unknown with the reason, and each
// campaign's operators are told.
func TestBatchCallMixingTwoCampaignsIsNotSent(t *testing.T) {
	t.Parallel()
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	w := newWorld(t, jobs.Config{MaintenanceInterval: time.Hour}, "rs="+sink.WithOption(rs.URL(), "batch=2"))
	a := w.runningOf(t, "rs", "a1@example.com", "a2@example.com")
	b := w.runningOf(t, "rs", "b1@example.com", "b2@example.com")
	ofA, ofB := w.deadClaim(t, w.target(t, a, 1)), w.deadClaim(t, w.target(t, b, 1))
	_, err := w.svc.Cancel(w.ctx, w.operator, b, "wrong list")
	require.NoError(t, err)
	// A call written before migration 0036, as the schema's owner can
	// still restore one: its rules do not run.
	err = pgx.BeginFunc(w.ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(w.ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		var call int64
		if err := tx.QueryRow(w.ctx, `INSERT INTO effect_batch (provider, call_key, request, size) VALUES ('rs', 'onceplan-batch-mixed', convert_to($1, 'UTF8'), 2) RETURNING id`,
			resendEmails(t, "a1@example.com", "b1@example.com")).Scan(&call); err != nil {
			return err
		}
		_, err := tx.Exec(w.ctx, `INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES ($1, 0, $2), ($1, 1, $3)`, call, ofA.ID, ofB.ID)
		return err
	})
	require.NoError(t, err)

	w.start(t)
	await.Until(t, time.Minute, "the call's attempts unknown and a2 done", func() bool {
		return w.stateOf(t, string(ofA.Key)) == ledger.StateUnknown && w.stateOf(t, string(ofB.Key)) == ledger.StateUnknown &&
			w.stateOf(t, w.target(t, a, 2).key) == ledger.StateDone
	})
	w.rounds(t, 2)
	require.Equal(t, map[string]int{"a2@example.com": 1}, rs.CountByRecipient(), "messages by recipient")
	for _, key := range []ledger.Key{ofA.Key, ofB.Key} {
		got := w.effectOf(t, string(key))
		require.Equal(t, ledger.StateUnknown, got.State)
		require.Contains(t, got.Reason, "two plans")
	}
	require.Len(t, w.alerts(t, a), 1, "campaign A's operators are told")
	require.Len(t, w.alerts(t, b), 1, "campaign B's operators are told")
}

// TestMaintenanceIsNotHeldByOneProvidersTurn: two attempts of a dead
// worker wait for recovery on a provider whose next turn is an hour away
// (rate=1/h: one send for both). A campaign on another provider, due a
// few seconds after the workers start, starts, sends and completes within
// a few maintenance intervals: no round waits on the first provider's
// turn; its second attempt waits, pending, for a turn.
func TestMaintenanceIsNotHeldByOneProvidersTurn(t *testing.T) {
	t.Parallel()
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	const interval = 200 * time.Millisecond
	slow := "slow=resend://" + url.PathEscape(rs.APIKey()) + "@?endpoint=" + url.QueryEscape(rs.Endpoint()) + "&rate=1/h&rate_scope=process"
	w := newWorld(t, jobs.Config{MaintenanceInterval: interval, JobTimeout: 10 * time.Second}, slow, "fast="+hook.URL())
	a := w.runningOf(t, "slow", "a1@example.com", "a2@example.com")
	first, second := w.deadClaim(t, w.target(t, a, 1)), w.deadClaim(t, w.target(t, a, 2))
	due := time.Now().Add(3 * time.Second)
	b := w.draftOfAddresses(t, "fast", &due, "b1@example.com")

	w.start(t)
	// The start is due three seconds on and is made by the first round
	// after it; the send and the completion take a few rounds more.
	await.Until(t, time.Until(due)+150*interval, "the other provider's campaign to complete", func() bool {
		return w.campaignState(t, b) == approval.StateCompleted
	})
	got := map[string]int{}
	for _, e := range hook.Effects() {
		got[e.Target] = got[e.Target] + 1
	}
	require.Equal(t, map[string]int{"b1@example.com": 1}, got, "the other provider's messages")
	states := []ledger.State{w.effectOf(t, string(first.Key)).State, w.effectOf(t, string(second.Key)).State}
	require.Contains(t, states, ledger.StatePending, "one of the slow provider's attempts waits for a turn: %v", states)
	require.LessOrEqual(t, rs.Requests(), 1, "one turn an hour")
}
