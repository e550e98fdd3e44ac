package jobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// world is one test's Onceplan: its own database, users, providers, and a
// running River client with Onceplan's workers (in this process; the
// crash tests in internal/crashtest run real worker processes).
type world struct {
	ctx      context.Context
	urls     pgtest.URLs
	pool     *pgxpool.Pool
	runner   *jobs.Runner
	svc      *approval.Service
	proposer auth.Actor
	approver auth.Actor
	operator auth.Actor
}

// newWorld starts workers for providers (NAME=URL items). cfg's zero
// fields take test-friendly values.
func newWorld(t *testing.T, cfg jobs.Config, providers ...string) *world {
	t.Helper()
	ctx := context.Background()
	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.Admin)
	var ps []provider.Provider
	for _, item := range providers {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	cfg.Pool, cfg.Providers = pool, reg
	cfg.Logger = slog.New(slog.NewTextHandler(testLogOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = 200 * time.Millisecond
	}
	if cfg.PausedSnooze == 0 {
		cfg.PausedSnooze = 200 * time.Millisecond
	}
	r, err := jobs.NewRunner(cfg)
	require.NoError(t, err)
	svc := approval.NewService(pool, r.Enqueuer())
	w := &world{ctx: ctx, urls: urls, pool: pool, runner: r, svc: svc}
	mk := func(email string, role auth.Role) auth.Actor {
		id := pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: []string{string(role)}})
		return auth.Actor{UserID: id, Email: email, Roles: []auth.Role{role}}
	}
	w.proposer = mk("proposer@example.com", auth.RoleProposer)
	w.approver = mk("approver@example.com", auth.RoleApprover)
	w.operator = mk("operator@example.com", auth.RoleOperator)
	return w
}

func (w *world) start(t *testing.T) {
	t.Helper()
	require.NoError(t, w.runner.Start(w.ctx, w.svc))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.runner.Stop(ctx))
	})
}

// approved creates and approves a campaign of n targets (t0000@… on) on
// providerName; it is not started.
func (w *world) approved(t *testing.T, providerName string, n int) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("email,name\n")
	for i := range n {
		fmt.Fprintf(&csv, "t%04d@example.com,T%d\n", i, i)
	}
	res, err := w.svc.Create(w.ctx, w.proposer, approval.CreateParams{
		Name: "jobs " + providerName, Provider: providerName,
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv.String())},
	})
	require.NoError(t, err)
	sub, err := w.svc.Submit(w.ctx, w.proposer, res.Campaign.ID)
	require.NoError(t, err)
	_, err = w.svc.Approve(w.ctx, w.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	return res.Campaign.ID
}

func (w *world) running(t *testing.T, providerName string, n int) string {
	t.Helper()
	id := w.approved(t, providerName, n)
	_, err := w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	return id
}

// states counts the campaign's targets by the ledger state of their latest
// attempt ("" for targets never attempted).
func (w *world) states(t *testing.T, campaign string) map[string]int {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `
		SELECT coalesce((SELECT f.state::text FROM effect f WHERE f.key = t.key ORDER BY f.id DESC LIMIT 1), ''), count(*)
		FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1 GROUP BY 1`, campaign)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		require.NoError(t, rows.Scan(&state, &n))
		out[state] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func (w *world) campaignState(t *testing.T, id string) approval.State {
	t.Helper()
	c, err := approval.GetCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)
	return c.State
}

func (w *world) attempts(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM effect`).Scan(&n))
	return n
}

// attempt is a ledger row with its recorded raw answer.
type attempt struct {
	Key, State, Reason, Raw string
}

// sentNothing says whether the attempt's raw answer shows that no request
// reached the provider: the job's context ended before the call, or the
// connection failed before the request was written.
func (a attempt) sentNothing() bool {
	return strings.HasPrefix(a.Raw, "onceplan: not sent: ") || strings.HasPrefix(a.Raw, "transport-error wrote-request=false ")
}

// failedAttempts lists the failed attempts, with their raw answers.
func (w *world) failedAttempts(t *testing.T) []attempt {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `
		SELECT e.key, e.state::text, coalesce(e.reason, ''), coalesce(convert_from(r.body, 'UTF8'), '')
		FROM effect e LEFT JOIN effect_response r ON r.effect_id = e.id
		WHERE e.state = 'failed' ORDER BY e.id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attempt])
	require.NoError(t, err)
	return out
}

// jobStates counts the effect jobs by River state.
func (w *world) jobStates(t *testing.T) map[rivertype.JobState]int {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT state::text, count(*) FROM river_job WHERE kind = 'onceplan_effect' GROUP BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[rivertype.JobState]int{}
	for rows.Next() {
		var state string
		var n int
		require.NoError(t, rows.Scan(&state, &n))
		out[rivertype.JobState(state)] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// exactlyOnce asserts, from the receiver's records, that each of the n
// targets got exactly one effect.
func exactlyOnce(t *testing.T, hook *sink.Webhook, n int) {
	t.Helper()
	perTarget := map[string]int{}
	for _, e := range hook.Effects() {
		perTarget[e.Target]++
	}
	require.Len(t, perTarget, n, "targets that got an effect")
	for target, c := range perTarget {
		require.Equal(t, 1, c, "effects for %s", target)
	}
}

// hookWorld is a world whose one provider, "hook", is a webhook
// stand-in: the outside world its effects are counted at.
func hookWorld(t *testing.T) (*world, *sink.Webhook) {
	t.Helper()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	return newWorld(t, jobs.Config{}, "hook="+hook.URL()), hook
}

// completesOnce waits for campaign id to complete, then checks what a
// user sees: each of its n targets reached once at hook, and all done.
func (w *world) completesOnce(t *testing.T, hook *sink.Webhook, id string, n int) {
	t.Helper()
	await.Until(t, 30*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, n)
	require.Equal(t, map[string]int{"done": n}, w.states(t, id))
}

func TestCampaignRunsToCompletionOncePerTarget(t *testing.T) {
	t.Parallel()
	w, hook := hookWorld(t)
	w.start(t)
	id := w.running(t, "hook", 50)

	w.completesOnce(t, hook, id, 50)

	// A resume, and the same targets enqueued again, do nothing more:
	// the ledger says they are done.
	_, err := w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	p, err := plan.GetPlan(w.ctx, w.pool, mustPlanID(t, w, id))
	require.NoError(t, err)
	for ord := range 50 {
		require.NoError(t, w.runner.RequeueTarget(w.ctx, p, ord, 1))
	}
	await.Until(t, 30*time.Second, "the requeued jobs to finish", func() bool {
		js := w.jobStates(t)
		return js[rivertype.JobStateAvailable] == 0 && js[rivertype.JobStateRunning] == 0 && js[rivertype.JobStateRetryable] == 0
	})
	exactlyOnce(t, hook, 50)
}

// TestTargetsNoJobTriedAreQueuedAgainBeforeTheCampaignCompletes: a job
// that ends without touching its targets (here cancelled in the queue, as
// River's UI or a bug in a job could) must not let the campaign complete
// with them never sent. Completion finds them, puts them back on the
// queue, says so in the trail, and completes once they are done.
func TestTargetsNoJobTriedAreQueuedAgainBeforeTheCampaignCompletes(t *testing.T) {
	t.Parallel()
	w, hook := hookWorld(t)
	id := w.running(t, "hook", 50)
	tag, err := w.pool.Exec(w.ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now()
		WHERE id = (SELECT min(id) FROM river_job WHERE kind = 'onceplan_effect')`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	w.start(t)

	w.completesOnce(t, hook, id, 50)
	var reason string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM campaign_event WHERE campaign_id = $1 AND detail ? 'untried'`, id).Scan(&reason))
	require.Regexp(t, `^\d+ targets were never tried though every job had finished; they are back on the queue$`, reason)
}

// TestJobsEnqueuedWithTheOldArgumentsRun: jobs enqueued before the
// arguments were slimmed carry campaign_id, key and provider as well; a
// campaign with such jobs in the queue runs to completion once per target,
// and the key the ledger records is the frozen target's, whatever the
// job says.
func TestJobsEnqueuedWithTheOldArgumentsRun(t *testing.T) {
	t.Parallel()
	w, hook := hookWorld(t)
	id := w.running(t, "hook", 10) // enqueued, not worked yet
	tag, err := w.pool.Exec(w.ctx, `
		UPDATE river_job SET args = args || jsonb_build_object('campaign_id', $1::text, 'provider', 'hook',
			'key', 'v1:' || repeat('0', 64))
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint = $2`, id, mustPlanID(t, w, id))
	require.NoError(t, err)
	require.EqualValues(t, 10, tag.RowsAffected())
	w.start(t)
	w.completesOnce(t, hook, id, 10)
	var strays int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM effect WHERE key = 'v1:' || repeat('0', 64)`).Scan(&strays))
	require.Zero(t, strays, "ledger rows under the key the jobs carried")
}

func mustPlanID(t *testing.T, w *world, campaign string) int64 {
	t.Helper()
	c, err := approval.GetCampaign(w.ctx, w.pool, campaign)
	require.NoError(t, err)
	return c.PlanID
}

func TestQuotaPausesOnlyThatProvidersQueue(t *testing.T) {
	t.Parallel()
	limited := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(limited.Close)
	other := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(other.Close)
	// The limited provider answers its first call "429, come back in 2s".
	limited.FailNext(1, 429, map[string]string{"Retry-After": "2"}, `{"error":"slow down"}`)
	w := newWorld(t, jobs.Config{}, "limited="+sink.WithOption(limited.URL(), "concurrency=1"), "other="+other.URL())
	w.start(t)
	a := w.running(t, "limited", 20)
	b := w.running(t, "other", 20)

	await.Until(t, 10*time.Second, "the limited provider's queue to be paused", func() bool {
		q, err := w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("limited"))
		return err == nil && q.PausedAt != nil
	})
	// While it is paused, the other provider finishes its whole campaign
	// and the limited one receives nothing more than its single 429.
	await.Until(t, 20*time.Second, "the other provider's campaign to complete", func() bool { return w.campaignState(t, b) == approval.StateCompleted })
	exactlyOnce(t, other, 20)
	q, err := w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("limited"))
	require.NoError(t, err)
	if q.PausedAt != nil {
		require.Equal(t, 1, limited.Requests(), "requests to the limited provider while its queue is paused")
	}

	// After Retry-After the queue resumes by itself and the limited
	// campaign completes: each target once, the throttled one included.
	await.Until(t, 30*time.Second, "the limited campaign to complete", func() bool { return w.campaignState(t, a) == approval.StateCompleted })
	exactlyOnce(t, limited, 20)
	q, err = w.runner.Client().QueueGet(w.ctx, jobs.QueueFor("limited"))
	require.NoError(t, err)
	require.Nil(t, q.PausedAt, "the limited queue is resumed")
}

func TestPausedCampaignSnoozesWithoutClaiming(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{}, "hook="+hook.URL())
	id := w.running(t, "hook", 10)
	_, err := w.svc.Pause(w.ctx, w.operator, id, "checking the copy")
	require.NoError(t, err)
	w.start(t)

	// The jobs run and snooze again and again, without a claim or a call.
	await.Until(t, 10*time.Second, "the paused campaign's jobs to snooze", func() bool {
		var snoozes int
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT coalesce(sum((metadata->>'snoozes')::int), 0) FROM river_job WHERE kind = 'onceplan_effect'`).Scan(&snoozes))
		return snoozes >= 20
	})
	require.Zero(t, hook.Requests(), "calls while paused")
	require.Zero(t, w.attempts(t), "ledger attempts while paused")

	_, err = w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 20*time.Second, "the resumed campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 10)
}

func TestCancelledCampaignEndsWithoutClaiming(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{}, "hook="+hook.URL())
	id := w.running(t, "hook", 10)
	_, err := w.svc.Cancel(w.ctx, w.operator, id, "wrong list")
	require.NoError(t, err)
	w.start(t)

	await.Until(t, 10*time.Second, "the cancelled campaign's jobs to end", func() bool {
		return w.jobStates(t)[rivertype.JobStateCompleted] == 10
	})
	require.Zero(t, hook.Requests(), "calls for a cancelled campaign")
	require.Zero(t, w.attempts(t), "ledger attempts for a cancelled campaign")
	require.Equal(t, approval.StateCancelled, w.campaignState(t, id))
}

func TestRetriesAreBoundedAndTheFailureStaysVisible(t *testing.T) {
	t.Parallel()
	// A webhook nobody listens on: every call fails before the request is
	// written, a temporary failure worth retrying — but not forever.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	w := newWorld(t, jobs.Config{MaxAttempts: 3}, "down="+dead)
	w.start(t)
	id := w.running(t, "down", 2)

	await.Until(t, 30*time.Second, "River to give up on both jobs", func() bool {
		return w.jobStates(t)[rivertype.JobStateDiscarded] == 2
	})
	require.Equal(t, map[string]int{"failed": 2}, w.states(t, id))
	require.Equal(t, 6, w.attempts(t), "three attempts per target, each in the ledger")
	// Nothing is left to run, so the campaign completes — with its failed
	// targets in plain sight for the audit and a later resume.
	await.Until(t, 10*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Equal(t, map[string]int{"failed": 2}, w.states(t, id))
	var reason string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM effect ORDER BY id DESC LIMIT 1`).Scan(&reason))
	require.Contains(t, reason, "could not be sent")
}

func TestStrandedBlocksTheTargetAndKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	hook.Stranded(1)
	w := newWorld(t, jobs.Config{}, "hook="+sink.WithOption(hook.URL(), "concurrency=1"))
	w.start(t)
	id := w.running(t, "hook", 5)

	await.Until(t, 20*time.Second, "every target to settle", func() bool {
		s := w.states(t, id)
		return s["done"] == 4 && s["stranded"] == 1
	})
	var key, raw string
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT e.key, convert_from(r.body, 'UTF8') FROM effect e JOIN effect_response r ON r.effect_id = e.id
		WHERE e.state = 'stranded'`).Scan(&key, &raw))
	require.Contains(t, raw, `"stranded"`, "the provider's raw answer is kept")

	// Resuming does not send the stranded target again: it waits for a
	// human, like an unknown one.
	_, err := w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 30*time.Second, "the resumed jobs to end", func() bool {
		js := w.jobStates(t)
		return js[rivertype.JobStateAvailable] == 0 && js[rivertype.JobStateRunning] == 0
	})
	require.Len(t, hook.Effects(), 5, "effects at the receiver")
	cur, err := ledger.NewStore(w.pool).Current(w.ctx, ledger.Key(key))
	require.NoError(t, err)
	require.Equal(t, ledger.StateStranded, cur.State)
}

func TestSMTPDropAfterDataIsUnknownUntilAHumanResolves(t *testing.T) {
	t.Parallel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	smtp.DropAfterData(1) // the first message is delivered, but the client never hears so
	w := newWorld(t, jobs.Config{JobTimeout: 5 * time.Second, RescueAfter: 20 * time.Second}, "mail="+sink.WithOption(smtp.URL(), "concurrency=1"))
	w.start(t)
	id := w.running(t, "mail", 4)

	await.Until(t, 30*time.Second, "every target to settle", func() bool {
		s := w.states(t, id)
		return s["done"] == 3 && s["unknown"] == 1
	})
	require.Len(t, smtp.Messages(), 4, "messages the server accepted (one never acknowledged)")

	// Nobody guesses: resuming leaves the unknown target alone.
	_, err = w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 10*time.Second, "the resumed jobs to end", func() bool {
		js := w.jobStates(t)
		return js[rivertype.JobStateAvailable] == 0 && js[rivertype.JobStateRunning] == 0
	})
	require.Len(t, smtp.Messages(), 4)
	require.Equal(t, 1, w.states(t, id)["unknown"], "the unknown target still waits for a person")

	// The operator checks the mailbox, sees it arrived, and says so.
	var key string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT key FROM effect WHERE state = 'unknown'`).Scan(&key))
	_, err = w.svc.ResolveEffect(w.ctx, w.operator, id, key, ledger.Delivered, "found in the recipient's mailbox")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 4}, w.states(t, id))
	_, err = w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 10*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Len(t, smtp.Messages(), 4, "resolving as delivered sends nothing, even after another resume")
}

var testLogOut io.Writer = os.Stderr
