package approval_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	svc      *approval.Service
	proposer auth.Actor
	approver auth.Actor
	second   auth.Actor
	operator auth.Actor
	agent    auth.Actor
}

func actor(t *testing.T, pool *pgxpool.Pool, email string, roles ...auth.Role) auth.Actor {
	t.Helper()
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	id := pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: names})
	return auth.Actor{UserID: id, Email: email, Roles: roles}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	b := &bundle{
		ctx:      context.Background(),
		pool:     pool,
		svc:      approval.NewService(pool, jobs.NewEnqueuer(client)),
		proposer: actor(t, pool, "pat@example.com", auth.RoleProposer, auth.RoleApprover),
		approver: actor(t, pool, "amy@example.com", auth.RoleApprover),
		second:   actor(t, pool, "abe@example.com", auth.RoleApprover),
		operator: actor(t, pool, "oli@example.com", auth.RoleOperator),
	}
	b.agent = actor(t, pool, "bot-owner@example.com", auth.RoleProposer, auth.RoleApprover, auth.RoleOperator)
	b.agent.Agent = true
	return b
}

var payload = plan.Payload{
	From:    "Billing <billing@example.com>",
	Subject: "Invoice {{.invoice}} is due",
	Text:    "Hello {{.first_name}}, invoice {{.invoice}} is due.",
	HTML:    "<p>Hello {{.first_name}}</p>",
}

func csvOf(n int) string {
	var sb strings.Builder
	sb.WriteString("email,first_name,invoice\n")
	for i := range n {
		fmt.Fprintf(&sb, "person%d@example.com,P%d,INV-%d\n", i, i, i)
	}
	return sb.String()
}

func (b *bundle) create(t *testing.T, approvals int, n int) approval.Result {
	t.Helper()
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "November invoices", Provider: "outbox", Payload: payload, RequiredApprovals: approvals,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(n))},
	})
	require.NoError(t, err)
	require.Equal(t, approval.StateDraft, res.Campaign.State)
	require.Equal(t, n, res.Import.Accepted)
	return res
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func TestApproveFreezesAndStartEnqueuesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 25)

	sub, err := b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.StatePendingApproval, sub.Campaign.State)
	require.Equal(t, created.PlanHash, sub.PlanHash)

	app, err := b.svc.Approve(b.ctx, b.approver, created.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, app.Campaign.State)
	require.NotZero(t, app.Campaign.PlanID)

	p, err := plan.GetPlan(b.ctx, b.pool, app.Campaign.PlanID)
	require.NoError(t, err)
	require.Equal(t, sub.PlanHash, p.Hash)
	require.Equal(t, 25, p.TargetCount)
	require.Equal(t, payload, p.Payload)
	require.Equal(t, 25, b.count(t, `SELECT count(*) FROM plan_target WHERE plan_id = $1`, p.ID))

	// Only an operator starts, never an agent.
	_, err = b.svc.Start(b.ctx, b.approver, created.Campaign.ID)
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	_, err = b.svc.Start(b.ctx, b.agent, created.Campaign.ID)
	require.ErrorIs(t, err, onceplan.ErrForbidden)

	st, err := b.svc.Start(b.ctx, b.operator, created.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.StateRunning, st.Campaign.State)
	require.Equal(t, 25, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM run WHERE plan_id = $1 AND job_count = 25`, p.ID))

	// Starting twice enqueues nothing new.
	_, err = b.svc.Start(b.ctx, b.operator, created.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, 25, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect'`))
	// And resume while every target has a live job enqueues nothing either.
	_, err = b.svc.Resume(b.ctx, b.operator, created.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, 25, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect'`))

	// Each job names one target of the plan, once.
	require.Equal(t, 25, b.count(t, `SELECT count(DISTINCT t.key) FROM river_job j JOIN plan_target t ON t.ordinal = (j.args->>'ordinal')::int AND t.plan_id = (j.args->>'plan_id')::bigint`))

	events, err := approval.Events(b.ctx, b.pool, created.Campaign.ID)
	require.NoError(t, err)
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []string{"create", "import", "submit", "approve", "freeze", "start", "resume"}, actions)
	require.Equal(t, b.approver.UserID, events[3].ActorID)
	require.Equal(t, sub.PlanHash, events[3].PlanHash)
}

func TestStaleHashIsRefusedAndNothingFrozen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 3)
	sub, err := b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err)
	shown := sub.PlanHash

	// The proposer changes one word after the approver opened the page.
	edited := payload
	edited.Text = "Hello {{.first_name}}, invoice {{.invoice}} is OVERDUE."
	ed, err := b.svc.Edit(b.ctx, b.proposer, created.Campaign.ID, edited)
	require.NoError(t, err)
	require.NotEqual(t, shown, ed.PlanHash)
	require.Equal(t, approval.StateDraft, ed.Campaign.State)
	_, err = b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err)

	_, err = b.svc.Approve(b.ctx, b.approver, created.Campaign.ID, shown)
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Zero(t, b.count(t, `SELECT count(*) FROM plan`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM approval`))

	// A hash that is not even a hash is a validation error.
	_, err = b.svc.Approve(b.ctx, b.approver, created.Campaign.ID, "abc")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
}

func TestNobodyApprovesTheirOwnDraft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 3)
	id := created.Campaign.ID

	// The last editor may not approve either.
	editor := actor(t, b.pool, "eve@example.com", auth.RoleProposer, auth.RoleApprover)
	res, err := b.svc.Edit(b.ctx, editor, id, payload)
	require.NoError(t, err)
	_, err = b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	_, err = b.svc.Approve(b.ctx, b.proposer, id, res.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	_, err = b.svc.Approve(b.ctx, editor, id, res.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)

	// An agent token never approves, whatever its user's roles.
	_, err = b.svc.Approve(b.ctx, b.agent, id, res.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	_, err = b.svc.Reject(b.ctx, b.agent, id, "no")
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	// Nor does someone without the approver role.
	_, err = b.svc.Approve(b.ctx, b.operator, id, res.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)

	// PostgreSQL refuses a self-approval written directly.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ($1, 1, $2, $3)`,
		id, res.PlanHash, b.proposer.UserID)
	requireSQLState(t, err, "OP006")
	require.Zero(t, b.count(t, `SELECT count(*) FROM approval`))
}

func TestAgentProposesButNeverDecides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.Create(b.ctx, b.agent, approval.CreateParams{
		Name: "Agent drafted", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(2))},
	})
	require.NoError(t, err)
	require.True(t, res.Campaign.CreatedByAgent)
	_, err = b.svc.Submit(b.ctx, b.agent, res.Campaign.ID)
	require.NoError(t, err)

	for name, act := range map[string]func() error{
		"approve": func() error { _, err := b.svc.Approve(b.ctx, b.agent, res.Campaign.ID, res.PlanHash); return err },
		"reject":  func() error { _, err := b.svc.Reject(b.ctx, b.agent, res.Campaign.ID, "x"); return err },
		"start":   func() error { _, err := b.svc.Start(b.ctx, b.agent, res.Campaign.ID); return err },
		"pause":   func() error { _, err := b.svc.Pause(b.ctx, b.agent, res.Campaign.ID, ""); return err },
		"resume":  func() error { _, err := b.svc.Resume(b.ctx, b.agent, res.Campaign.ID); return err },
		"cancel":  func() error { _, err := b.svc.Cancel(b.ctx, b.agent, res.Campaign.ID, ""); return err },
	} {
		require.ErrorIs(t, act(), onceplan.ErrForbidden, name)
	}
	// The agent's user is the proposer: as a person, they may not approve it either.
	person := b.agent
	person.Agent = false
	_, err = b.svc.Approve(b.ctx, person, res.Campaign.ID, res.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)
}

func TestQuorumNeedsDistinctApprovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 2, 3)
	id := created.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	r1, err := b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StatePendingApproval, r1.Campaign.State, "1 of 2 approvals freezes nothing")
	require.Zero(t, b.count(t, `SELECT count(*) FROM plan`))
	require.Equal(t, 1, r1.Answer.Approvals, "the approve's answer counts it")
	got, err := b.svc.Get(b.ctx, id)
	require.NoError(t, err)
	got, err = b.svc.Answer(b.ctx, got, nil)
	require.NoError(t, err)
	require.Equal(t, 1, got.Answer.Approvals, "a later answer counts it")

	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrConflict, "the same approver twice is still one")

	r2, err := b.svc.Approve(b.ctx, b.second, id, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, r2.Campaign.State)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM plan`))
}

func TestRejectReturnsToDraftWithReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 3)
	id := created.Campaign.ID
	_, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	_, err = b.svc.Reject(b.ctx, b.approver, id, "  ")
	require.ErrorIs(t, err, onceplan.ErrInvalid)

	res, err := b.svc.Reject(b.ctx, b.approver, id, "the due date is wrong")
	require.NoError(t, err)
	require.Equal(t, approval.StateDraft, res.Campaign.State)
	events, err := approval.Events(b.ctx, b.pool, id)
	require.NoError(t, err)
	last := events[len(events)-1]
	require.Equal(t, "reject", last.Action)
	require.Equal(t, "the due date is wrong", last.Reason)
	require.Equal(t, b.approver.UserID, last.ActorID)
}

func TestMissingMergeVariableBlocksSubmission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Gaps", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatJSON, Body: strings.NewReader(`[
			{"address": "a@example.com", "vars": {"first_name": "A", "invoice": "1"}},
			{"address": "b@example.com", "vars": {"first_name": "B"}},
			{"address": "c@example.com", "vars": {}}
		]`)},
	})
	require.NoError(t, err)
	_, err = b.svc.Submit(b.ctx, b.proposer, res.Campaign.ID)
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	var missing *approval.MissingVarsError
	require.True(t, errors.As(err, &missing))
	require.Equal(t, 2, missing.Total)
	require.Equal(t, []plan.MissingVar{
		{Line: 2, Target: "b@example.com", Missing: []string{"invoice"}},
		{Line: 3, Target: "c@example.com", Missing: []string{"first_name", "invoice"}},
	}, missing.Missing)

	c, err := approval.GetCampaign(b.ctx, b.pool, res.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.StateDraft, c.State)
}

// Version 2 of a campaign does not resend to targets done under version 1:
// keys do not depend on the text, and the ledger decides.
func TestVersionTwoDoesNotResend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 100)
	id := created.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	v1, err := b.svc.Start(b.ctx, b.operator, id)
	require.NoError(t, err)

	// 40 of the 100 were sent under v1 before the operator paused it.
	store := ledger.NewStore(b.pool)
	rows, err := b.pool.Query(b.ctx, `SELECT key FROM plan_target WHERE plan_id = $1 ORDER BY ordinal LIMIT 40`, v1.Campaign.PlanID)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, k := range keys {
		c, err := store.Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(k), Owner: "v1-worker"})
		require.NoError(t, err)
		_, err = store.RecordResponse(b.ctx, c.Effect.ID, ledger.ResponseSend, []byte("ok"))
		require.NoError(t, err)
		_, err = store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r"})
		require.NoError(t, err)
	}
	_, err = b.svc.Pause(b.ctx, b.operator, id, "wrong wording")
	require.NoError(t, err)

	v2text := payload
	v2text.Subject = "Corrected: invoice {{.invoice}} is due"
	ed, err := b.svc.Edit(b.ctx, b.proposer, id, v2text)
	require.NoError(t, err)
	require.Equal(t, 2, ed.Campaign.Version)
	require.Equal(t, approval.StateDraft, ed.Campaign.State)
	_, err = b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, id, ed.PlanHash)
	require.NoError(t, err)
	v2, err := b.svc.Start(b.ctx, b.operator, id)
	require.NoError(t, err)
	require.NotEqual(t, v1.Campaign.PlanID, v2.Campaign.PlanID)

	// The same keys: the 40 are done in the ledger; only the 60 get jobs.
	require.Equal(t, 100, b.count(t, `SELECT count(*) FROM plan_target a JOIN plan_target b2 ON a.key = b2.key WHERE a.plan_id = $1 AND b2.plan_id = $2`, v1.Campaign.PlanID, v2.Campaign.PlanID))
	require.Equal(t, 60, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect' AND (args->>'plan_id')::bigint = $1`, v2.Campaign.PlanID))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job j JOIN plan_target t ON t.plan_id = (j.args->>'plan_id')::bigint AND t.ordinal = (j.args->>'ordinal')::int
		WHERE t.key = ANY($1) AND t.plan_id = $2`, keys, v2.Campaign.PlanID))
	for _, k := range keys {
		c, err := store.Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(k), Owner: "v2-worker"})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimDone, c.Outcome)
	}
}

func TestScheduledStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(time.Hour)
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Later", Provider: "outbox", Payload: payload, ScheduledAt: &at, StartOnApproval: true,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(4))},
	})
	require.NoError(t, err)
	sub, err := b.svc.Submit(b.ctx, b.proposer, res.Campaign.ID)
	require.NoError(t, err)
	app, err := b.svc.Approve(b.ctx, b.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, app.Campaign.State, "not due yet")

	started, err := b.svc.StartDue(b.ctx)
	require.NoError(t, err)
	require.Empty(t, started)

	b.svc.Now = func() time.Time { return at.Add(time.Second) }
	started, err = b.svc.StartDue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{res.Campaign.ID}, started)
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM run WHERE started_by IS NULL`))
}

func TestStartOnApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Now", Provider: "outbox", Payload: payload, StartOnApproval: true,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(3))},
	})
	require.NoError(t, err)
	sub, err := b.svc.Submit(b.ctx, b.proposer, res.Campaign.ID)
	require.NoError(t, err)
	app, err := b.svc.Approve(b.ctx, b.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StateRunning, app.Campaign.State)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM river_job`))
}

func TestIllegalStateActionsAreConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 1, 2)
	id := created.Campaign.ID
	_, err := b.svc.Approve(b.ctx, b.approver, id, created.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrConflict, "a draft is not pending approval")
	_, err = b.svc.Start(b.ctx, b.operator, id)
	require.ErrorIs(t, err, onceplan.ErrConflict)
	_, err = b.svc.Pause(b.ctx, b.operator, id, "")
	require.ErrorIs(t, err, onceplan.ErrConflict)
	_, err = b.svc.Cancel(b.ctx, b.operator, id, "not needed")
	require.NoError(t, err)
	_, err = b.svc.Edit(b.ctx, b.proposer, id, payload)
	require.ErrorIs(t, err, onceplan.ErrConflict, "cancelled is final")

	// PostgreSQL refuses an illegal campaign transition written directly.
	_, err = b.pool.Exec(b.ctx, `UPDATE campaign SET state = 'running' WHERE id = $1`, id)
	requireSQLState(t, err, "OP002")

	_, err = b.svc.Submit(b.ctx, b.proposer, "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = b.svc.Submit(b.ctx, b.proposer, "not-a-uuid")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

func TestFailedImportCreatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Broken", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("first_name,invoice\nA,1\n")},
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "address")
	require.Zero(t, b.count(t, `SELECT count(*) FROM campaign`))

	created := b.create(t, 1, 3)
	b.svc.MaxTargets = 5
	_, err = b.svc.ImportTargets(b.ctx, b.proposer, created.Campaign.ID, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(6))})
	require.Error(t, err)
	require.Contains(t, err.Error(), "5")
	d, err := approval.GetDraft(b.ctx, b.pool, created.Campaign.ID, 1)
	require.NoError(t, err)
	require.Equal(t, 3, d.TargetCount, "the earlier list is untouched")
	require.Equal(t, created.PlanHash, d.Hash(created.Campaign))
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

func csvTargets(n int) approval.TargetsParams {
	return approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(n))}
}

// TestApproveAnswersFromItsOwnSnapshot: what Approve answers beside the
// campaign (approvals, decision, counts) is what its own transaction saw,
// so a second approval committed right after cannot make the first
// approver's answer claim the quorum — or disagree with the campaign's
// state shown in the same answer.
func TestApproveAnswersFromItsOwnSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.create(t, 2, 3)
	id := created.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	r1, err := b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	r2, err := b.svc.Approve(b.ctx, b.second, id, sub.PlanHash)
	require.NoError(t, err)

	require.NotNil(t, r1.Answer, "Approve reads its answer in its own transaction")
	require.Equal(t, approval.StatePendingApproval, r1.Campaign.State)
	require.Equal(t, 1, r1.Answer.Approvals, "the first answer counts the approvals as of its own commit")
	require.Equal(t, approval.DecisionPending, r1.Answer.Decision.Decision)
	require.Equal(t, 3, r1.Answer.Counts.Planned)
	require.Equal(t, 3, r1.Answer.Counts.NotStarted)

	require.Equal(t, approval.StateApproved, r2.Campaign.State)
	require.Equal(t, 2, r2.Answer.Approvals)
	require.Equal(t, approval.DecisionApproved, r2.Answer.Decision.Decision)

	// Read afresh, the first result's campaign shows what holds now, all of
	// it from one snapshot.
	r1.Answer = nil
	now, err := b.svc.Answer(b.ctx, r1, nil)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, now.Campaign.State)
	require.Equal(t, 2, now.Answer.Approvals)
	require.Equal(t, approval.DecisionApproved, now.Answer.Decision.Decision)
}
