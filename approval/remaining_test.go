package approval_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// running makes a campaign of n targets, approved and started (its jobs
// enqueued, never worked), and returns it with its plan.
func (b *bundle) running(t *testing.T, n int) (approval.Campaign, plan.Plan) {
	t.Helper()
	created := b.create(t, 1, n)
	sub, err := b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, created.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	st, err := b.svc.Start(b.ctx, b.operator, created.Campaign.ID)
	require.NoError(t, err)
	p, err := plan.GetPlan(b.ctx, b.pool, st.Campaign.PlanID)
	require.NoError(t, err)
	return st.Campaign, p
}

// settle records target ordinal's effect in state, as a worker would.
func (b *bundle) settle(t *testing.T, p plan.Plan, ordinal int, state ledger.State) {
	t.Helper()
	var key string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT key FROM target WHERE list_id = $1 AND ordinal = $2`, p.ListID, ordinal).Scan(&key))
	store := ledger.NewStore(b.pool)
	cl, err := store.Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "test/1", PlanID: p.ID, Ordinal: ordinal})
	require.NoError(t, err)
	_, err = store.RecordResponse(b.ctx, cl.Effect.ID, ledger.ResponseSend, []byte("answer"))
	require.NoError(t, err)
	_, err = store.Settle(b.ctx, ledger.SettleParams{EffectID: cl.Effect.ID, State: state, Receipt: "r", Reason: "test"})
	require.NoError(t, err)
}

// finish ends the plan's jobs and completes the campaign, as the workers
// and maintenance do.
func (b *bundle) finish(t *testing.T, c approval.Campaign) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint = $1`, c.PlanID)
	require.NoError(t, err)
	done, err := b.svc.CompleteIfDone(b.ctx, c.ID, func(context.Context, pgx.Tx, approval.Campaign) (bool, error) { return true, nil })
	require.NoError(t, err)
	require.True(t, done)
}

func (b *bundle) actions(t *testing.T, id string) []string {
	t.Helper()
	evs, err := approval.Events(b.ctx, b.pool, id)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Action)
	}
	return out
}

// TestRemainingIsWhatResumeQueues: Remaining counts exactly what a resume
// then enqueues; a completed campaign with nothing left stays completed
// when resumed, and its trail says nothing more.
func TestRemainingIsWhatResumeQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.running(t, 4)
	rem, err := b.svc.Remaining(b.ctx, c)
	require.NoError(t, err)
	require.Equal(t, approval.Remainder{Left: 4}, rem, "every target has its job: none to queue, 4 to send")

	for i := 1; i <= 4; i++ {
		b.settle(t, p, i, ledger.StateDone)
	}
	b.finish(t, c)
	c, err = approval.GetCampaign(b.ctx, b.pool, c.ID)
	require.NoError(t, err)
	rem, err = b.svc.Remaining(b.ctx, c)
	require.NoError(t, err)
	require.Zero(t, rem.Queue)
	trail := b.actions(t, c.ID)
	res, err := b.svc.Resume(b.ctx, b.operator, c.ID)
	require.NoError(t, err, "a resume with nothing to do is no error")
	require.Equal(t, approval.StateCompleted, res.Campaign.State)
	require.Equal(t, trail, b.actions(t, c.ID))
	require.Equal(t, []string{"complete"}, trail[len(trail)-1:])

	// Two failed targets: both are counted, then queued once.
	c, p = b.running(t, 4)
	b.settle(t, p, 1, ledger.StateDone)
	b.settle(t, p, 2, ledger.StateFailed)
	b.settle(t, p, 3, ledger.StateDone)
	b.settle(t, p, 4, ledger.StateFailed)
	b.finish(t, c)
	c, err = approval.GetCampaign(b.ctx, b.pool, c.ID)
	require.NoError(t, err)
	rem, err = b.svc.Remaining(b.ctx, c)
	require.NoError(t, err)
	require.Equal(t, 2, rem.Queue)
	res, err = b.svc.Resume(b.ctx, b.operator, c.ID)
	require.NoError(t, err)
	require.Equal(t, approval.StateRunning, res.Campaign.State)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM river_job WHERE state = 'available' AND (args ->> 'plan_id')::bigint = $1`, p.ID))
	rem, err = b.svc.Remaining(b.ctx, res.Campaign)
	require.NoError(t, err)
	require.Zero(t, rem.Queue)

	// A campaign without a plan has no remainder.
	draft := b.create(t, 1, 1)
	rem, err = b.svc.Remaining(b.ctx, draft.Campaign)
	require.NoError(t, err)
	require.Equal(t, approval.Remainder{}, rem)
}

// TestRemainingSaysWhatAStoppedWorkerHolds: the targets a silent worker
// process's running jobs hold are Stalled (with when maintenance requeues
// them) and not in Queue until it is past the owner timeout.
func TestRemainingSaysWhatAStoppedWorkerHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.running(t, 3)
	stall := func(silent time.Duration) approval.Remainder {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, `INSERT INTO worker_process (owner, host, pid, seen_at) VALUES ('killed/1', 'test', 1, now() - $1::interval)
			ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at`, silent.String())
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['killed/1']
			WHERE (args ->> 'plan_id')::bigint = $1 AND (args ->> 'ordinal')::int <= 2`, p.ID)
		require.NoError(t, err)
		rem, err := b.svc.Remaining(b.ctx, c)
		require.NoError(t, err)
		return rem
	}
	require.Equal(t, approval.Remainder{Left: 3}, stall(2*time.Second), "a beat late is not stopped")

	rem := stall(12 * time.Second)
	require.Equal(t, 2, rem.Stalled)
	require.Zero(t, rem.Queue, "their jobs count as live until the owner timeout")
	require.InDelta(t, 12, rem.SilentFor.Seconds(), 1)
	require.InDelta(t, 18, rem.RequeueIn.Seconds(), 1, "the owner timeout is 30 s")

	rem = stall(45 * time.Second)
	require.Equal(t, 2, rem.Stalled)
	require.Equal(t, 2, rem.Queue)
	require.Zero(t, rem.RequeueIn)

	// Maintenance requeues them: nothing is held or left any more.
	n, err := b.svc.RequeueRemainder(b.ctx, c.ID, "a worker process died")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	rem, err = b.svc.Remaining(b.ctx, c)
	require.NoError(t, err)
	require.Equal(t, approval.Remainder{Left: 3}, rem, "nothing held or to queue; the targets are still to send")
}
