package approval_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// started approves and starts a campaign of n targets and settles the
// first done ones as done; it returns the campaign id and the keys in order.
func (b *bundle) started(t *testing.T, n, done int) (string, []string, []string) {
	t.Helper()
	created := b.create(t, 1, n)
	id := created.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	st, err := b.svc.Start(b.ctx, b.operator, id)
	require.NoError(t, err)
	rows, err := b.pool.Query(b.ctx, `SELECT key, target FROM plan_target WHERE plan_id = $1 ORDER BY ordinal`, st.Campaign.PlanID)
	require.NoError(t, err)
	var keys, targets []string
	for rows.Next() {
		var k, tg string
		require.NoError(t, rows.Scan(&k, &tg))
		keys, targets = append(keys, k), append(targets, tg)
	}
	require.NoError(t, rows.Err())
	store := ledger.NewStore(b.pool)
	for _, k := range keys[:done] {
		c, err := store.Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(k), Owner: "test-worker"})
		require.NoError(t, err)
		_, err = store.RecordResponse(b.ctx, c.Effect.ID, ledger.ResponseSend, []byte("250 ok"))
		require.NoError(t, err)
		_, err = store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r"})
		require.NoError(t, err)
	}
	return id, keys, targets
}

func (b *bundle) jobsFor(t *testing.T, key string) int {
	return b.count(t, `SELECT count(*) FROM river_job j JOIN plan_target t ON t.plan_id = (j.args->>'plan_id')::bigint AND t.ordinal = (j.args->>'ordinal')::int
		WHERE j.kind = 'onceplan_effect' AND t.key = $1`, key)
}

func TestSupersedeNeedsAnApproverTheTargetAndAReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, keys, targets := b.started(t, 3, 1)
	key, target := keys[0], targets[0]
	// The first target's job ran and finished.
	_, err := b.pool.Exec(b.ctx, `UPDATE river_job j SET state = 'completed', finalized_at = now() FROM plan_target t
		WHERE t.plan_id = (j.args->>'plan_id')::bigint AND t.ordinal = (j.args->>'ordinal')::int AND t.key = $1`, key)
	require.NoError(t, err)
	jobsBefore := b.jobsFor(t, key)

	_, err = b.svc.SupersedeEffect(b.ctx, b.operator, id, key, target, "customer asked again")
	require.ErrorIs(t, err, onceplan.ErrForbidden, "an operator may not authorise one more effect")
	_, err = b.svc.SupersedeEffect(b.ctx, b.agent, id, key, target, "agent wants to resend")
	require.ErrorIs(t, err, onceplan.ErrForbidden, "an agent never supersedes")
	_, err = b.svc.SupersedeEffect(b.ctx, b.approver, id, key, "someone-else@example.com", "customer asked again")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.ErrorContains(t, err, target, "the error names the address to type")
	_, err = b.svc.SupersedeEffect(b.ctx, b.approver, id, key, target, "  ")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Zero(t, b.count(t, `SELECT count(*) FROM effect_bump WHERE key = $1`, key), "refused supersedes change nothing")

	epoch, err := b.svc.SupersedeEffect(b.ctx, b.approver, id, key, strings.ToUpper(target), "customer asked for the corrected invoice")
	require.NoError(t, err)
	require.Equal(t, 1, epoch)
	require.Equal(t, jobsBefore+1, b.jobsFor(t, key), "the running campaign gets a job for the superseded target")
	c, err := ledger.NewStore(b.pool).Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "w"})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	require.Equal(t, 1, c.Effect.Epoch)

	var action, reason string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT action, reason FROM campaign_event WHERE campaign_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&action, &reason))
	require.Equal(t, "supersede", action)
	require.Equal(t, "customer asked for the corrected invoice", reason)

	// Only a done effect is superseded: not the pending claim above.
	_, err = b.svc.SupersedeEffect(b.ctx, b.approver, id, key, target, "again")
	require.ErrorIs(t, err, onceplan.ErrConflict)
}

func TestEffectActionsStayInTheirCampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	idA, keysA, targetsA := b.started(t, 2, 2)
	idB, _, _ := b.started(t, 2, 0)

	_, err := b.svc.SupersedeEffect(b.ctx, b.approver, idB, keysA[0], targetsA[0], "wrong campaign")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = b.svc.RevokeEffect(b.ctx, b.operator, idB, keysA[0], "wrong campaign")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = b.svc.ResolveEffect(b.ctx, b.operator, idB, keysA[0], ledger.Delivered, "wrong campaign")
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	got, err := b.svc.CampaignOfKey(b.ctx, keysA[1])
	require.NoError(t, err)
	require.Equal(t, idA, got)
	_, err = b.svc.CampaignOfKey(b.ctx, "v1:"+strings.Repeat("0", 64))
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = b.svc.CampaignOfKey(b.ctx, "not-a-key")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
}

func TestRevokeFreesTheKeyWithoutResending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, keys, _ := b.started(t, 2, 1)
	jobs := b.jobsFor(t, keys[0])

	_, err := b.svc.RevokeEffect(b.ctx, b.agent, id, keys[0], "reversed")
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	_, err = b.svc.RevokeEffect(b.ctx, b.operator, id, keys[1], "never sent")
	require.ErrorIs(t, err, onceplan.ErrNotFound, "nothing to revoke on a target without a done effect")
	eff, err := b.svc.RevokeEffect(b.ctx, b.operator, id, keys[0], "payout reversed by the bank")
	require.NoError(t, err)
	require.Equal(t, ledger.StateRevoked, eff.State)
	require.Equal(t, jobs, b.jobsFor(t, keys[0]), "revoking enqueues nothing")
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	params := func(name string) approval.CreateParams {
		return approval.CreateParams{
			Name: name, Provider: "outbox", Payload: payload,
			Targets:        &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(3))},
			IdempotencyKey: "agent-retry-1", RequestHash: "hash-of-" + name,
		}
	}
	first, err := b.svc.Create(b.ctx, b.proposer, params("Dec"))
	require.NoError(t, err)
	require.False(t, first.Replayed)
	again, err := b.svc.Create(b.ctx, b.proposer, params("Dec"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Campaign.ID, again.Campaign.ID)
	require.Equal(t, first.PlanHash, again.PlanHash)

	_, err = b.svc.Create(b.ctx, b.proposer, params("Different"))
	require.ErrorIs(t, err, approval.ErrIdempotencyMismatch)

	// Another user's key space is their own.
	other := actor(t, b.pool, "pia@example.com", auth.RoleProposer)
	theirs, err := b.svc.Create(b.ctx, other, params("Dec"))
	require.NoError(t, err)
	require.NotEqual(t, first.Campaign.ID, theirs.Campaign.ID)

	// Ten concurrent retries of a new key make one campaign.
	var wg sync.WaitGroup
	ids := make([]string, 10)
	errs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() {
			p := params("Jan")
			p.IdempotencyKey = "agent-retry-2"
			r, err := b.svc.Create(b.ctx, b.proposer, p)
			ids[i], errs[i] = r.Campaign.ID, err
		})
	}
	wg.Wait()
	for i := range 10 {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM campaign WHERE name = 'Jan'`))
}
