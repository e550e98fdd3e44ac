package approval_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/plan"
)

// listeners counts the sessions of the test's database that LISTEN for
// decisions: the process's one shared connection, or none.
func (b *bundle) listeners(t *testing.T) int {
	t.Helper()
	return pgtest.Listeners(t, b.pool, approval.DecisionChannel)
}

// TestDecisionFollowsTheQuorum: a campaign needing two approvals is
// pending with both missing, pending with one after the first approval,
// and approved by the second approver after the second.
func TestDecisionFollowsTheQuorum(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.create(t, 2, 3)
	id := c.Campaign.ID

	d, err := b.svc.Decision(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionNotSubmitted, d.Decision)
	require.Zero(t, d.Version)
	require.True(t, d.Final(), "nothing to wait for")
	steps := d.WaitingFor()
	require.Len(t, steps, 1)
	require.Equal(t, auth.RoleProposer, steps[0].Who)
	require.Equal(t, approval.StepSubmit, steps[0].Kind)

	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	d, err = b.svc.Decision(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionPending, d.Decision)
	require.Equal(t, 1, d.Version)
	require.Equal(t, sub.PlanHash, d.PlanHash)
	require.Equal(t, 2, d.Missing())
	require.Equal(t, []approval.NextStep{{Who: auth.RoleApprover, Kind: approval.StepApprove, Count: 2, What: d.WaitingFor()[0].What}}, d.WaitingFor())
	require.Contains(t, d.Message(), "2 more approvals (0 of 2 so far)")

	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	d, err = b.svc.Decision(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionPending, d.Decision, "one of two approvals")
	require.Equal(t, []string{"amy@example.com"}, d.Approvers)
	require.Equal(t, 1, d.Missing())
	require.Equal(t, 1, d.WaitingFor()[0].Count)
	require.Empty(t, d.DecidedBy)

	_, err = b.svc.Approve(b.ctx, b.second, id, sub.PlanHash)
	require.NoError(t, err)
	d, err = b.svc.Decision(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionApproved, d.Decision)
	require.Equal(t, []string{"amy@example.com", "abe@example.com"}, d.Approvers)
	require.Equal(t, "abe@example.com", d.DecidedBy, "the approval that completed the quorum")
	require.False(t, d.DecidedAt.IsZero())
	require.Equal(t, approval.StateApproved, d.State)
	require.Empty(t, d.WaitingFor())
	require.Contains(t, d.Message(), "approved by amy@example.com, abe@example.com")

	// A new version after the approval: the decision of the one submitted
	// stands, and says a new draft follows it.
	_, err = b.svc.Edit(b.ctx, b.proposer, id, plan.Payload{From: payload.From, Subject: "Invoice {{.invoice}}", Text: payload.Text})
	require.NoError(t, err)
	d, err = b.svc.Decision(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionApproved, d.Decision)
	require.Equal(t, 1, d.Version)
	require.Equal(t, 2, d.CampaignVersion)
	require.Contains(t, d.Message(), "Version 2 is a draft that needs its own approval")
}

// TestDecisionRejectedWithTheReason: the rejecter's reason and name, and
// the proposer is who must act.
func TestDecisionRejectedWithTheReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.create(t, 1, 2)
	_, err := b.svc.Submit(b.ctx, b.proposer, c.Campaign.ID)
	require.NoError(t, err)
	_, err = b.svc.Reject(b.ctx, b.approver, c.Campaign.ID, "the invoice numbers are last month's")
	require.NoError(t, err)

	d, err := b.svc.Decision(b.ctx, c.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionRejected, d.Decision)
	require.Equal(t, "the invoice numbers are last month's", d.Reason)
	require.Equal(t, "amy@example.com", d.DecidedBy)
	require.Equal(t, approval.StateDraft, d.State)
	steps := d.WaitingFor()
	require.Len(t, steps, 1)
	require.Equal(t, auth.RoleProposer, steps[0].Who)
	require.Equal(t, approval.StepRevise, steps[0].Kind)
	require.Contains(t, steps[0].What, "the invoice numbers are last month's")

	// Submitted again: pending again, the old rejection no longer counts.
	_, err = b.svc.Submit(b.ctx, b.proposer, c.Campaign.ID)
	require.NoError(t, err)
	d, err = b.svc.Decision(b.ctx, c.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionPending, d.Decision)
	require.Empty(t, d.Reason)
}

// TestDecisionOfAVersionChangedAfterSubmit: an edit while pending takes
// the version back to draft: nothing waits for a decision any more.
func TestDecisionOfAVersionChangedAfterSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.create(t, 1, 2)
	_, err := b.svc.Submit(b.ctx, b.proposer, c.Campaign.ID)
	require.NoError(t, err)
	_, err = b.svc.Edit(b.ctx, b.proposer, c.Campaign.ID, plan.Payload{From: payload.From, Subject: "Changed {{.invoice}}", Text: payload.Text})
	require.NoError(t, err)
	d, err := b.svc.Decision(b.ctx, c.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionNotSubmitted, d.Decision)
	require.True(t, d.Changed)
	require.Contains(t, d.Message(), "changed after it was submitted")

	_, err = b.svc.Decision(b.ctx, "8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

// TestWaitDecisionReturnsOnTheApproval: waiters answer "approved" as soon
// as the approval commits, well before their wait runs out; many of them
// share one listening connection and hold none of the pool's while they
// wait; when the last one leaves, the connection is gone.
func TestWaitDecisionReturnsOnTheApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.create(t, 1, 2)
	id := c.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	// Twice the pool's size of waiters: were each holding a connection,
	// nothing else could run.
	const wait = 30 * time.Second
	waiters := 2 * int(b.pool.Config().MaxConns)
	type answer struct {
		d   approval.Decision
		err error
		at  time.Time
	}
	answers := make(chan answer, waiters)
	for range waiters {
		go func() {
			d, err := b.svc.WaitDecision(b.ctx, id, wait)
			answers <- answer{d, err, time.Now()}
		}()
	}
	await.Until(t, time.Minute, "one shared listening connection", func() bool { return b.listeners(t) == 1 })
	await.Until(t, time.Minute, "the waiters giving back every pooled connection", func() bool { return b.pool.Stat().AcquiredConns() == 0 })
	require.Equal(t, 1, b.listeners(t))
	select {
	case a := <-answers:
		t.Fatalf("a waiter answered before any decision: %+v", a)
	default:
	}

	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	approved := time.Now()
	for range waiters {
		a := await.Recv(t, answers, wait+time.Minute, "every waiter answering the approval")
		require.NoError(t, a.err)
		require.Equal(t, approval.DecisionApproved, a.d.Decision)
		require.Less(t, a.at.Sub(approved), 5*time.Second, "answered on the approval, not at the end of the wait")
	}
	await.Until(t, time.Minute, "the last waiter out closing the listening connection", func() bool { return b.listeners(t) == 0 })
}

// TestWaitDecisionRunsOut: a wait with no decision answers pending once
// it has passed; a wait of 0 answers at once; a caller that goes away ends
// its wait.
func TestWaitDecisionRunsOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.create(t, 1, 2)
	id := c.Campaign.ID
	_, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	d, err := b.svc.WaitDecision(b.ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionPending, d.Decision)
	require.Zero(t, b.listeners(t), "a wait of 0 answers without listening")

	start := time.Now()
	d, err = b.svc.WaitDecision(b.ctx, id, 400*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, approval.DecisionPending, d.Decision)
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	await.Until(t, time.Minute, "the listening connection closed", func() bool { return b.listeners(t) == 0 })

	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var waitErr error
	go func() {
		defer wg.Done()
		d, waitErr = b.svc.WaitDecision(ctx, id, 30*time.Second)
	}()
	await.Until(t, time.Minute, "the waiter listening", func() bool { return b.listeners(t) == 1 })
	cancel()
	wg.Wait()
	require.True(t, errors.Is(waitErr, context.Canceled), "%v", waitErr)
	require.Equal(t, approval.DecisionPending, d.Decision, "the last decision read")
	await.Until(t, time.Minute, "the listening connection closed", func() bool { return b.listeners(t) == 0 })

	// A rejection ends a wait too.
	rejected := make(chan approval.Decision, 1)
	go func() {
		d, _ := b.svc.WaitDecision(b.ctx, id, 30*time.Second)
		rejected <- d
	}()
	await.Until(t, time.Minute, "the waiter listening", func() bool { return b.listeners(t) == 1 })
	_, err = b.svc.Reject(b.ctx, b.approver, id, "wrong month")
	require.NoError(t, err)
	select {
	case d := <-rejected:
		require.Equal(t, approval.DecisionRejected, d.Decision)
		require.Equal(t, "wrong month", d.Reason)
	case <-time.After(10 * time.Second):
		t.Fatal("the rejection did not end the wait")
	}
}

// TestNextSteps: what a person must do next, by state and counts.
func TestNextSteps(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	pending := approval.Decision{Decision: approval.DecisionPending, Version: 1, Required: 2, Approvers: []string{"amy@example.com"}}
	kinds := func(steps []approval.NextStep) []approval.StepKind {
		var out []approval.StepKind
		for _, s := range steps {
			out = append(out, s.Kind)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		c    approval.Campaign
		d    approval.Decision
		k    approval.Counts
		sv   approval.Serving
		want []approval.StepKind
	}{
		{"a draft without targets", approval.Campaign{State: approval.StateDraft, Version: 1}, approval.Decision{}, approval.Counts{}, approval.Serving{}, []approval.StepKind{approval.StepSubmit}},
		{"pending", approval.Campaign{State: approval.StatePendingApproval, Version: 1}, pending, approval.Counts{Planned: 3}, approval.Serving{}, []approval.StepKind{approval.StepApprove}},
		{"rejected", approval.Campaign{State: approval.StateDraft, Version: 1}, approval.Decision{Decision: approval.DecisionRejected, Version: 1, Reason: "no"}, approval.Counts{Planned: 3}, approval.Serving{}, []approval.StepKind{approval.StepRevise}},
		{"approved", approval.Campaign{State: approval.StateApproved, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 3}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepStart}},
		{"scheduled", approval.Campaign{State: approval.StateApproved, PlanID: 1, ScheduledAt: &later}, approval.Decision{}, approval.Counts{Planned: 3}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepNone}},
		{"running, no worker", approval.Campaign{State: approval.StateRunning, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 3}, approval.Serving{Warning: "No live worker"}, []approval.StepKind{approval.StepRunWorker}},
		{"running with unknowns", approval.Campaign{State: approval.StateRunning, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 9, Unknown: 2, Stranded: 1, Failed: 1}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepResolveUnknowns, approval.StepStranded}},
		{"completed with failures", approval.Campaign{State: approval.StateCompleted, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 9, Done: 8, Failed: 1}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepFailed}},
		{"paused", approval.Campaign{State: approval.StatePaused, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 9}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepResume}},
		{"completed", approval.Campaign{State: approval.StateCompleted, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 9, Done: 9}, approval.Serving{Live: 1}, []approval.StepKind{approval.StepNone}},
	} {
		steps := approval.NextSteps(tc.c, tc.d, tc.k, tc.sv, now)
		require.Equal(t, tc.want, kinds(steps), tc.name)
		for _, s := range steps {
			require.NotEmpty(t, s.What, tc.name)
		}
	}
	steps := approval.NextSteps(approval.Campaign{State: approval.StatePendingApproval}, pending, approval.Counts{}, approval.Serving{}, now)
	require.Equal(t, auth.RoleApprover, steps[0].Who)
	require.Equal(t, 1, steps[0].Count, "approvals missing")
	steps = approval.NextSteps(approval.Campaign{State: approval.StateRunning, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 9, Unknown: 2}, approval.Serving{Live: 1}, now)
	require.Equal(t, auth.RoleOperator, steps[0].Who)
	require.Equal(t, 2, steps[0].Count)
	require.Contains(t, steps[0].What, "2 targets are unknown")
}
