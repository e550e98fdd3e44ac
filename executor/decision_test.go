package executor_test

// The executor's decision table — what it does for each claim outcome,
// each provider verdict and each recovery capability — tested on its own,
// against a real PostgreSQL and a provider scripted per case, so that a
// change there fails here in seconds rather than only in the crash suite.
// Every case runs one Perform (or Recover) on a campaign made the way the
// server makes it, and checks the queue's instruction, the ledger row the
// case leaves and how often the provider was called.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// scripted is a provider whose answers a case writes: every Send returns
// the next of sends (raw answers Classify reads as "outcome[:receipt]"),
// Probe returns probe, and the calls are counted.
type scripted struct {
	caps  provider.Capabilities
	sends []string
	err   error // Send's "could not even try"
	probe *provider.ProbeResult

	mu           sync.Mutex
	sent, probed int
}

func (p *scripted) Name() string                        { return "outbox" }
func (p *scripted) Kind() string                        { return "scripted" }
func (p *scripted) String() string                      { return "outbox=scripted:" }
func (p *scripted) Capabilities() provider.Capabilities { return p.caps }
func (p *scripted) Close() error                        { return nil }
func (p *scripted) Acquire(context.Context) (func(), error) {
	return func() {}, nil
}

func (p *scripted) Renew() bool { return true }

func (p *scripted) Send(_ context.Context, r provider.Request) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	if p.sent >= len(p.sends) {
		return nil, fmt.Errorf("scripted: no answer left for send %d of %s", p.sent+1, r.Key)
	}
	p.sent++
	return []byte(p.sends[p.sent-1]), nil
}

func (p *scripted) Classify(raw []byte) provider.Verdict {
	outcome, receipt, _ := strings.Cut(string(raw), ":")
	v := provider.Verdict{Outcome: provider.Outcome(outcome), Receipt: receipt, Reason: "scripted " + outcome}
	switch outcome {
	case "retryable":
		v.Outcome, v.Retryable = provider.OutcomeFailed, true
	case string(provider.OutcomeQuota), string(provider.OutcomeRetryLater):
		v.RetryAfter = 7 * time.Second
	}
	return v
}

func (p *scripted) Probe(context.Context, string, int) (provider.ProbeResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed++
	if p.probe == nil {
		return provider.ProbeResult{}, provider.ErrNoProbe
	}
	return *p.probe, nil
}

func (p *scripted) calls() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.probed
}

// pauser and requeuer record what the executor asked of the queue.
type queueCalls struct {
	mu               sync.Mutex
	paused, requeued int
}

func (q *queueCalls) PauseProvider(context.Context, string, time.Time) error {
	q.mu.Lock()
	q.paused++
	q.mu.Unlock()
	return nil
}

func (q *queueCalls) RequeueTarget(context.Context, plan.Plan, int, int) error {
	q.mu.Lock()
	q.requeued++
	q.mu.Unlock()
	return nil
}

// table is one campaign, running, whose targets the cases use one each.
type table struct {
	ctx                          context.Context
	urls                         pgtest.URLs
	svc                          *approval.Service
	store                        *ledger.Store
	proposer, approver, operator auth.Actor
	plan                         plan.Plan
	next                         int
}

func newTable(t *testing.T, targets int) *table {
	t.Helper()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin := pgtest.NewPool(t, urls.Admin)
	app := pgtest.NewPool(t, urls.App)
	client, err := river.NewClient(riverpgxv5.New(app), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(app, jobs.NewEnqueuer(client))
	user := func(email string, role auth.Role) auth.Actor {
		return auth.Actor{UserID: pgtest.User(t, admin, pgtest.UserOpts{Email: email, Roles: []string{string(role)}}), Email: email, Roles: []auth.Role{role}}
	}
	tb := &table{ctx: ctx, urls: urls, svc: svc, store: ledger.NewStore(app),
		proposer: user("pat@example.com", auth.RoleProposer), approver: user("amy@example.com", auth.RoleApprover),
		operator: user("oli@example.com", auth.RoleOperator)}
	p, err := tb.planOf(t, tb.createRunning(t, "decisions", targets))
	require.NoError(t, err)
	tb.plan = p
	return tb
}

// createRunning creates, approves and starts a campaign named name of n
// targets (person1@example.com …) on provider outbox, and returns its id.
func (tb *table) createRunning(t *testing.T, name string, n int) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("email\n")
	for i := range n {
		fmt.Fprintf(&csv, "person%d@example.com\n", i+1)
	}
	res, err := tb.svc.Create(tb.ctx, tb.proposer, approval.CreateParams{
		Name: name, Provider: "outbox", Payload: plan.Payload{From: "a@example.com", Subject: "Hello", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv.String())},
	})
	require.NoError(t, err)
	sub, err := tb.svc.Submit(tb.ctx, tb.proposer, res.Campaign.ID)
	require.NoError(t, err)
	_, err = tb.svc.Approve(tb.ctx, tb.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	_, err = tb.svc.Start(tb.ctx, tb.operator, res.Campaign.ID)
	require.NoError(t, err)
	return res.Campaign.ID
}

// planOf is campaign id's current plan.
func (tb *table) planOf(t *testing.T, id string) (plan.Plan, error) {
	t.Helper()
	c, err := approval.GetCampaign(tb.ctx, pgtest.NewPool(t, tb.urls.App), id)
	if err != nil {
		return plan.Plan{}, err
	}
	return plan.GetPlan(tb.ctx, pgtest.NewPool(t, tb.urls.App), c.PlanID)
}

// executorFor makes an executor on the table's database whose one
// provider is p.
func (tb *table) executorFor(t *testing.T, p provider.Provider, q *queueCalls) *executor.Executor {
	t.Helper()
	reg, err := provider.NewRegistry(p)
	require.NoError(t, err)
	e, err := executor.New(executor.Config{Pool: pgtest.NewPool(t, tb.urls.App), Providers: reg, Pauser: q, Requeuer: q})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

// target is the next unused target of the plan: its ordinal and key.
func (tb *table) target(t *testing.T) (int, ledger.Key) {
	t.Helper()
	tb.next++
	var key string
	require.NoError(t, pgtest.NewPool(t, tb.urls.Admin).QueryRow(tb.ctx,
		`SELECT key FROM target WHERE list_id = $1 AND ordinal = $2`, tb.plan.ListID, tb.next).Scan(&key))
	return tb.next, ledger.Key(key)
}

// row is the attempt that holds (or last held) key, "" when none.
func (tb *table) row(t *testing.T, key ledger.Key) (ledger.State, []ledger.Effect) {
	t.Helper()
	h, err := tb.store.History(tb.ctx, key)
	require.NoError(t, err)
	if len(h) == 0 {
		return "", nil
	}
	return h[len(h)-1].State, h
}

// dead claims key as a worker that then died, and leaves the row in
// state (pending or unknown), with raw recorded when given.
func (tb *table) dead(t *testing.T, ordinal int, key ledger.Key, state ledger.State, raw string) ledger.Effect {
	t.Helper()
	c, err := tb.store.Claim(tb.ctx, ledger.ClaimParams{Key: key, Owner: "dead/1/worker", PlanID: tb.plan.ID, Ordinal: ordinal})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	if raw != "" {
		_, err := tb.store.RecordResponse(tb.ctx, c.Effect.ID, ledger.ResponseSend, []byte(raw))
		require.NoError(t, err)
	}
	if state == ledger.StateUnknown {
		e, err := tb.store.Settle(tb.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateUnknown, Reason: "worker died"})
		require.NoError(t, err)
		return e
	}
	return c.Effect
}

// TestDecisionsOnAWonClaim: the claim is won and the provider answers;
// each verdict settles the row as the table says and tells the queue what
// to do next.
func TestDecisionsOnAWonClaim(t *testing.T) {
	t.Parallel()
	tb := newTable(t, 10)
	for _, c := range []struct {
		answer  string
		sendErr error
		action  executor.Action
		state   ledger.State
		paused  int
	}{
		{answer: "done:r-1", action: executor.Complete, state: ledger.StateDone},
		{answer: "failed", action: executor.Complete, state: ledger.StateFailed},
		{answer: "retryable", action: executor.Retry, state: ledger.StateFailed},
		{answer: "unknown", action: executor.Complete, state: ledger.StateUnknown},
		{answer: "stranded:r-2", action: executor.Complete, state: ledger.StateStranded},
		{answer: "quota", action: executor.Snooze, state: ledger.StateFailed, paused: 1},
		{answer: "retry_later", action: executor.Snooze, state: ledger.StatePending},
		{answer: "gibberish", action: executor.Complete, state: ledger.StateUnknown},
		{sendErr: errors.New("context canceled before the call"), action: executor.Retry, state: ledger.StateFailed},
	} {
		t.Run(c.answer+fmt.Sprint(c.sendErr != nil), func(t *testing.T) {
			p := &scripted{sends: []string{c.answer}, err: c.sendErr}
			q := &queueCalls{}
			e := tb.executorFor(t, p, q)
			ordinal, key := tb.target(t)
			res, err := e.Perform(tb.ctx, executor.Job{PlanID: tb.plan.ID, Ordinal: ordinal, JobID: int64(ordinal)})
			require.NoError(t, err)
			require.Equal(t, c.action, res.Action, res.Outcome)
			state, hist := tb.row(t, key)
			require.Equal(t, c.state, state)
			require.Len(t, hist, 1, "one attempt")
			sent, _ := p.calls()
			if c.sendErr == nil {
				require.Equal(t, 1, sent, "one call")
			}
			require.Equal(t, c.paused, q.paused)
			if c.answer == "done:r-1" {
				require.Equal(t, "r-1", hist[0].Receipt)
			}
		})
	}
}

// TestDecisionsOnAHeldKey: the claim finds the key held; nothing is sent
// unless recovery says so.
func TestDecisionsOnAHeldKey(t *testing.T) {
	t.Parallel()
	tb := newTable(t, 20)
	settleDone := func(t *testing.T, e ledger.Effect) {
		_, err := tb.store.RecordResponse(tb.ctx, e.ID, ledger.ResponseSend, []byte("done:earlier"))
		require.NoError(t, err)
		_, err = tb.store.Settle(tb.ctx, ledger.SettleParams{EffectID: e.ID, State: ledger.StateDone, Receipt: "earlier"})
		require.NoError(t, err)
	}
	found, notFound := &provider.ProbeResult{Found: true, Raw: []byte("found"), Receipt: "p-1"}, &provider.ProbeResult{Raw: []byte("no")}
	for _, c := range []struct {
		name     string
		setup    func(t *testing.T, ordinal int, key ledger.Key)
		p        *scripted
		action   executor.Action
		state    ledger.State
		attempts int
		sent     int
		probed   int
		requeued int
		outcome  string // what Result.Outcome says, when it matters
	}{
		{name: "done by this plan", setup: func(t *testing.T, o int, k ledger.Key) { settleDone(t, tb.dead(t, o, k, ledger.StatePending, "")) },
			p: &scripted{}, action: executor.Complete, state: ledger.StateDone, attempts: 1, outcome: "already done"},
		{name: "done outside any plan", setup: func(t *testing.T, _ int, k ledger.Key) {
			// Written as the owner: the server writes no attempt outside
			// any plan but a tool call's (migration 0037).
			c, err := ledger.NewStore(pgtest.NewPool(t, tb.urls.Owner)).Claim(tb.ctx, ledger.ClaimParams{Key: k, Owner: "elsewhere"})
			require.NoError(t, err)
			settleDone(t, c.Effect)
		}, p: &scripted{}, action: executor.Complete, state: ledger.StateDone, attempts: 1, outcome: "held outside the plan"},
		{name: "pending, dead owner, provider deduplicates", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Dedupe: true}, sends: []string{"done:again"}}, action: executor.Complete, state: ledger.StateDone, attempts: 1, sent: 1},
		{name: "pending, dead owner, inside the dedupe window", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Dedupe: true, DedupeWindow: 24 * time.Hour}, sends: []string{"done:again"}}, action: executor.Complete, state: ledger.StateDone, attempts: 1, sent: 1},
		{name: "pending, dead owner, dedupe window closed: unknown, never sent again", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Dedupe: true, DedupeWindow: time.Nanosecond}, sends: []string{"done:again"}}, action: executor.Complete, state: ledger.StateUnknown, attempts: 1},
		{name: "pending, dead owner, dedupe window closed, the probe still may ask", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Dedupe: true, DedupeWindow: time.Nanosecond, Probe: true}, probe: found}, action: executor.Complete, state: ledger.StateDone, attempts: 1, probed: 1},
		{name: "unknown, past the probe's retention: waits for a person", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StateUnknown, "") },
			p: &scripted{caps: provider.Capabilities{Probe: true, ProbeRetention: time.Nanosecond}, probe: found}, action: executor.Complete, state: ledger.StateUnknown, attempts: 1},
		{name: "pending, dead owner, answer recorded before it died", setup: func(t *testing.T, o int, k ledger.Key) {
			tb.dead(t, o, k, ledger.StatePending, "done:recorded")
		}, p: &scripted{}, action: executor.Complete, state: ledger.StateDone, attempts: 1},
		{name: "pending, dead owner, probe finds it", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Probe: true}, probe: found}, action: executor.Complete, state: ledger.StateDone, attempts: 1, probed: 1},
		{name: "pending, dead owner, probe finds nothing after the window", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Probe: true}, probe: notFound}, action: executor.Complete, state: ledger.StateFailed, attempts: 1, probed: 1, requeued: 1},
		{name: "pending, dead owner, probe finds nothing inside the window", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{caps: provider.Capabilities{Probe: true, SettleWindow: time.Hour}, probe: notFound}, action: executor.Snooze, state: ledger.StatePending, attempts: 1, probed: 1},
		{name: "pending, dead owner, provider can neither", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StatePending, "") },
			p: &scripted{}, action: executor.Complete, state: ledger.StateUnknown, attempts: 1},
		{name: "unknown, provider deduplicates", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StateUnknown, "") },
			p: &scripted{caps: provider.Capabilities{Dedupe: true}, sends: []string{"done:again"}}, action: executor.Complete, state: ledger.StateDone, attempts: 1, sent: 1},
		{name: "unknown, probe finds nothing", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StateUnknown, "") },
			p: &scripted{caps: provider.Capabilities{Probe: true}, probe: notFound}, action: executor.Complete, state: ledger.StateFailed, attempts: 1, probed: 1, requeued: 1},
		{name: "unknown, provider can neither: waits for a person", setup: func(t *testing.T, o int, k ledger.Key) { tb.dead(t, o, k, ledger.StateUnknown, "") },
			p: &scripted{}, action: executor.Complete, state: ledger.StateUnknown, attempts: 1},
		{name: "failed before: a new attempt", setup: func(t *testing.T, o int, k ledger.Key) {
			e := tb.dead(t, o, k, ledger.StatePending, "failed")
			_, err := tb.store.Settle(tb.ctx, ledger.SettleParams{EffectID: e.ID, State: ledger.StateFailed, Reason: "no"})
			require.NoError(t, err)
		}, p: &scripted{sends: []string{"done:second"}}, action: executor.Complete, state: ledger.StateDone, attempts: 2, sent: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := &queueCalls{}
			e := tb.executorFor(t, c.p, q)
			ordinal, key := tb.target(t)
			c.setup(t, ordinal, key)
			res, err := e.Perform(tb.ctx, executor.Job{PlanID: tb.plan.ID, Ordinal: ordinal, JobID: int64(1000 + ordinal)})
			require.NoError(t, err)
			require.Equal(t, c.action, res.Action, res.Outcome)
			state, hist := tb.row(t, key)
			require.Equal(t, c.state, state, res.Outcome)
			require.Len(t, hist, c.attempts, "attempts at the key")
			sent, probed := c.p.calls()
			require.Equal(t, c.sent, sent, "calls")
			require.Equal(t, c.probed, probed, "probes")
			require.Equal(t, c.requeued, q.requeued, "requeued")
			require.Contains(t, res.Outcome, c.outcome)
		})
	}
}

// TestDecisionsOnAClosedGate: a paused or cancelled campaign, or a newer
// version, claims nothing and calls nothing.
func TestDecisionsOnAClosedGate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		act    func(tb *table) error
		action executor.Action
	}{
		{"paused", func(tb *table) error {
			_, err := tb.svc.Pause(tb.ctx, tb.operator, tb.plan.CampaignID, "a break")
			return err
		}, executor.Snooze},
		{"cancelled", func(tb *table) error {
			_, err := tb.svc.Cancel(tb.ctx, tb.operator, tb.plan.CampaignID, "stop")
			return err
		}, executor.Complete},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := newTable(t, 2)
			p := &scripted{sends: []string{"done:x"}}
			e := tb.executorFor(t, p, &queueCalls{})
			require.NoError(t, c.act(tb))
			ordinal, key := tb.target(t)
			res, err := e.Perform(tb.ctx, executor.Job{PlanID: tb.plan.ID, Ordinal: ordinal, JobID: 1})
			require.NoError(t, err)
			require.Equal(t, c.action, res.Action, res.Outcome)
			state, _ := tb.row(t, key)
			require.Empty(t, state, "no attempt")
			sent, _ := p.calls()
			require.Zero(t, sent)
		})
	}
}
