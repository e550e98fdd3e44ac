package audittest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Fixture builds campaigns through the approval workflow and writes their
// ledgers through the ledger's store, the way the executor does, so that
// tests of the audit see exactly what production writes.
type Fixture struct {
	t        testing.TB
	ctx      context.Context
	Pool     *pgxpool.Pool
	Service  *approval.Service
	Ledger   *ledger.Store
	Proposer auth.Actor
	Approver auth.Actor
	Operator auth.Actor
}

// NewFixture returns a fixture on pool (a fresh test database: it adds two
// users with fixed addresses).
func NewFixture(t testing.TB, pool *pgxpool.Pool) *Fixture {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	actor := func(roles ...auth.Role) auth.Actor {
		n++
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		a := auth.Actor{Email: fmt.Sprintf("audittest-%d-%s@example.com", n, names[0]), Roles: roles}
		if err := pool.QueryRow(context.Background(), `INSERT INTO app_user (email, roles) VALUES ($1, $2) RETURNING id`,
			a.Email, names).Scan(&a.UserID); err != nil {
			t.Fatalf("audittest: creating user %s: %v", a.Email, err)
		}
		return a
	}
	return &Fixture{
		t: t, ctx: context.Background(), Pool: pool,
		Service:  approval.NewService(pool, jobs.NewEnqueuer(client)),
		Ledger:   ledger.NewStore(pool),
		Proposer: actor(auth.RoleProposer),
		Approver: actor(auth.RoleApprover),
		Operator: actor(auth.RoleOperator),
	}
}

// Campaign is an approved campaign and its current plan's targets.
type Campaign struct {
	ID      string
	Name    string
	PlanID  int64
	Targets []Target
}

// Target is one target of a plan.
type Target struct {
	PlanID  int64
	Ordinal int
	Address string
	Key     ledger.Key
}

// Addresses returns n addresses, person1@example.com … personN@example.com.
func Addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("person%d@example.com", i+1)
	}
	return out
}

func csvOf(addresses []string) string {
	return "email\n" + strings.Join(addresses, "\n") + "\n"
}

// Campaign creates a campaign named name with the given targets (in this
// order), and submits, approves and starts it: it runs a frozen plan and
// has no ledger rows (its jobs wait in a queue nobody works).
func (f *Fixture) Campaign(name string, addresses []string) Campaign {
	f.t.Helper()
	res, err := f.Service.Create(f.ctx, f.Proposer, approval.CreateParams{
		Name: name, Provider: "outbox",
		Payload: plan.Payload{From: "billing@example.com", Subject: "Invoice", Text: "Your invoice is due."},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(addresses))},
	})
	if err != nil {
		f.t.Fatalf("audittest: creating campaign %q: %v", name, err)
	}
	c := Campaign{ID: res.Campaign.ID, Name: name}
	f.Approve(&c)
	return c
}

// Edit makes a new version of an approved campaign with another text (the
// same target list) and approves it.
func (f *Fixture) Edit(c *Campaign, text string) {
	f.t.Helper()
	_, err := f.Service.Edit(f.ctx, f.Proposer, c.ID, plan.Payload{From: "billing@example.com", Subject: "Invoice", Text: text})
	if err != nil {
		f.t.Fatalf("audittest: editing campaign %s: %v", c.ID, err)
	}
	f.Approve(c)
}

// Reimport makes a new version of an approved campaign with another target
// list and approves it.
func (f *Fixture) Reimport(c *Campaign, addresses []string) {
	f.t.Helper()
	_, err := f.Service.ImportTargets(f.ctx, f.Proposer, c.ID, approval.TargetsParams{
		Format: plan.FormatCSV, Body: strings.NewReader(csvOf(addresses)),
	})
	if err != nil {
		f.t.Fatalf("audittest: importing into campaign %s: %v", c.ID, err)
	}
	f.Approve(c)
}

// Approve submits, approves and starts the campaign's draft (an attempt
// at a plan's target is made only while its campaign runs the plan) and
// reloads its plan.
func (f *Fixture) Approve(c *Campaign) {
	f.t.Helper()
	sub, err := f.Service.Submit(f.ctx, f.Proposer, c.ID)
	if err != nil {
		f.t.Fatalf("audittest: submitting campaign %s: %v", c.ID, err)
	}
	app, err := f.Service.Approve(f.ctx, f.Approver, c.ID, sub.PlanHash)
	if err != nil {
		f.t.Fatalf("audittest: approving campaign %s: %v", c.ID, err)
	}
	c.PlanID = app.Campaign.PlanID
	if _, err := f.Service.Start(f.ctx, f.Operator, c.ID); err != nil {
		f.t.Fatalf("audittest: starting campaign %s: %v", c.ID, err)
	}
	rows, err := f.Pool.Query(f.ctx, `SELECT plan_id, ordinal, target, key FROM plan_target WHERE plan_id = $1 ORDER BY ordinal`, c.PlanID)
	if err != nil {
		f.t.Fatal(err)
	}
	c.Targets, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Target, error) {
		var t Target
		var key string
		err := r.Scan(&t.PlanID, &t.Ordinal, &t.Address, &key)
		t.Key = ledger.Key(key)
		return t, err
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// Claim commits a pending attempt at the target's key, as a worker does
// before calling the provider.
func (f *Fixture) Claim(t Target) ledger.Effect {
	f.t.Helper()
	c, err := f.Ledger.Claim(f.ctx, ledger.ClaimParams{Key: t.Key, Owner: "audittest", PlanID: t.PlanID, Ordinal: t.Ordinal})
	if err != nil {
		f.t.Fatalf("audittest: claiming %s: %v", t.Address, err)
	}
	if c.Outcome != ledger.ClaimWon {
		f.t.Fatalf("audittest: claiming %s: %s", t.Address, c.Outcome)
	}
	return c.Effect
}

// Settle records a raw answer and settles a pending attempt as state (done
// with the receipt "r-<effect id>").
func (f *Fixture) Settle(e ledger.Effect, state ledger.State) ledger.Effect {
	f.t.Helper()
	if state != ledger.StateUnknown {
		if _, err := f.Ledger.RecordResponse(f.ctx, e.ID, ledger.ResponseSend, []byte("audittest "+string(state))); err != nil {
			f.t.Fatal(err)
		}
	}
	p := ledger.SettleParams{EffectID: e.ID, State: state}
	if state == ledger.StateDone || state == ledger.StateStranded {
		p.Receipt = fmt.Sprintf("r-%d", e.ID)
	}
	if state != ledger.StateDone {
		p.Reason = "audittest: " + string(state)
	}
	out, err := f.Ledger.Settle(f.ctx, p)
	if err != nil {
		f.t.Fatalf("audittest: settling effect %d as %s: %v", e.ID, state, err)
	}
	return out
}

// Reject claims the target and settles the attempt failed for good, as a
// provider's definitive rejection does, with reason.
func (f *Fixture) Reject(t Target, reason string) ledger.Effect {
	f.t.Helper()
	e := f.Claim(t)
	if _, err := f.Ledger.RecordResponse(f.ctx, e.ID, ledger.ResponseSend, []byte(reason)); err != nil {
		f.t.Fatal(err)
	}
	out, err := f.Ledger.Settle(f.ctx, ledger.SettleParams{EffectID: e.ID, State: ledger.StateFailed, Reason: reason, Failure: ledger.FailureRejected})
	if err != nil {
		f.t.Fatalf("audittest: rejecting %s: %v", t.Address, err)
	}
	return out
}

// Attempt claims the target and settles the attempt as state (pending:
// left as claimed; failed: a temporary failure, to be sent again).
func (f *Fixture) Attempt(t Target, state ledger.State) ledger.Effect {
	f.t.Helper()
	e := f.Claim(t)
	if state == ledger.StatePending {
		return e
	}
	return f.Settle(e, state)
}

// Resolve settles the target's unknown attempt as a person would.
func (f *Fixture) Resolve(t Target, outcome ledger.Outcome) ledger.Effect {
	f.t.Helper()
	e, err := f.Ledger.Resolve(f.ctx, ledger.ResolveParams{Key: t.Key, Outcome: outcome, Actor: "user:" + f.Approver.Email, Reason: "checked the mailbox"})
	if err != nil {
		f.t.Fatalf("audittest: resolving %s: %v", t.Address, err)
	}
	return e
}

// Revoke withdraws the target's done attempt.
func (f *Fixture) Revoke(t Target) ledger.Effect {
	f.t.Helper()
	e, err := f.Ledger.Revoke(f.ctx, ledger.RevokeParams{Key: t.Key, Actor: "user:" + f.Approver.Email, Reason: "sent in error"})
	if err != nil {
		f.t.Fatalf("audittest: revoking %s: %v", t.Address, err)
	}
	return e
}

// Bump moves the target's key to its next epoch, as a person would.
func (f *Fixture) Bump(t Target) int {
	f.t.Helper()
	epoch, err := f.Ledger.Bump(f.ctx, ledger.BumpParams{Key: t.Key, ActorKind: ledger.ActorHuman, Actor: "user:" + f.Approver.Email, Reason: "a second reminder"})
	if err != nil {
		f.t.Fatalf("audittest: bumping %s: %v", t.Address, err)
	}
	return epoch
}
