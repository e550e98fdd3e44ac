package approval_test

// An adversarial review connected as onceplan_app, the role serve runs as,
// and found five ways around the ledger's and the plan's rules. Each test
// here performs that attack in plain SQL as that role, on a campaign made
// the way the server makes it, and requires PostgreSQL to refuse it with
// nothing changed — in every isolation level, and, where a snapshot could
// decide, from a real second connection holding an old snapshot across the
// approval (docs/ARCHITECTURE.md, "The guarantee against the server's own
// role").

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
	"github.com/onceplan/onceplan/plan"
)

// hostile is a database whose service runs as the application role (as
// serve does) and a pool of that role for the attacker's statements.
type hostile struct {
	*bundle
	app   *pgxpool.Pool // onceplan_app: the attacker
	admin *pgxpool.Pool // the superuser: only to look
}

func setupHostile(t *testing.T) *hostile {
	t.Helper()
	urls := pgtest.Database(t)
	admin := pgtest.NewPool(t, urls.Admin)
	app := pgtest.NewPool(t, urls.App)
	client, err := river.NewClient(riverpgxv5.New(app), &river.Config{})
	require.NoError(t, err)
	b := &bundle{
		ctx:      context.Background(),
		pool:     admin,
		svc:      approval.NewService(app, jobs.NewEnqueuer(client)),
		proposer: actor(t, admin, "pat@example.com", auth.RoleProposer, auth.RoleApprover),
		approver: actor(t, admin, "amy@example.com", auth.RoleApprover),
		second:   actor(t, admin, "abe@example.com", auth.RoleApprover),
		operator: actor(t, admin, "oli@example.com", auth.RoleOperator),
	}
	b.agent = actor(t, admin, "bot-owner@example.com", auth.RoleProposer)
	b.agent.Agent = true
	var role string
	require.NoError(t, app.QueryRow(b.ctx, `SELECT current_user`).Scan(&role))
	require.Equal(t, migrations.AppRole, role)
	return &hostile{bundle: b, app: app, admin: admin}
}

// approved makes a campaign of n targets, submitted by the proposer and
// approved by approvals distinct approvers, and returns it with its plan.
func (h *hostile) approved(t *testing.T, approvals, n int) (approval.Campaign, plan.Plan) {
	t.Helper()
	created := h.create(t, approvals, n)
	sub, err := h.svc.Submit(h.ctx, h.proposer, created.Campaign.ID)
	require.NoError(t, err)
	var res approval.Result
	for _, a := range []auth.Actor{h.approver, h.second}[:approvals] {
		res, err = h.svc.Approve(h.ctx, a, created.Campaign.ID, sub.PlanHash)
		require.NoError(t, err)
	}
	require.Equal(t, approval.StateApproved, res.Campaign.State)
	p, err := plan.GetPlan(h.ctx, h.admin, res.Campaign.PlanID)
	require.NoError(t, err)
	return res.Campaign, p
}

// frozenTables are the tables the attacks aim at.
var frozenTables = []string{"campaign", "draft", "submission", "approval", "plan", "target_list", "target",
	"run", "effect", "effect_bump", "bump_policy", "campaign_event"}

// contents is every row of the frozen tables, as text, to show that a
// refused attack changed nothing.
func (h *hostile) contents(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range frozenTables {
		var s string
		require.NoError(t, h.admin.QueryRow(h.ctx, fmt.Sprintf(
			`SELECT coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '') FROM %s x`, table)).Scan(&s), table)
		out[table] = s
	}
	return out
}

var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// attack runs stmts as the application role in one transaction at iso
// and returns PostgreSQL's error (the statement's, or the commit's).
func (h *hostile) attack(t *testing.T, iso pgx.TxIsoLevel, stmts ...string) *pgconn.PgError {
	t.Helper()
	err := pgx.BeginTxFunc(h.ctx, h.app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(h.ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s at %s: want PostgreSQL to refuse, got %v", strings.Join(stmts, "; "), iso, err)
	return pgErr
}

// refused requires PostgreSQL to refuse the attack with one of codes, at
// every isolation level, with nothing changed.
func (h *hostile) refused(t *testing.T, codes []string, stmts ...string) {
	t.Helper()
	before := h.contents(t)
	for _, iso := range isolationLevels {
		pgErr := h.attack(t, iso, stmts...)
		require.Containsf(t, codes, pgErr.Code, "%s at %s: refused with %s (%s), want one of %v",
			strings.Join(stmts, "; "), iso, pgErr.Code, pgErr.Message, codes)
	}
	require.Equal(t, before, h.contents(t), "a refused attack changes nothing")
}

const (
	insufficientPrivilege = "42501"
	foreignKeyViolation   = "23503"
	writeOnce             = "OP001"
	immutableColumn       = "OP003"
	notSelf               = "OP006"
	notApproved           = "OP007"
)

// Finding 1: a target added to an approved plan got the email. Now a
// list's rows come only from the transaction that made the list: a row
// for any other list has no list to point at, whichever transaction id it
// claims (the role may not name one).
func TestHostileTargetAddedToFrozenList(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	_, p := h.approved(t, 1, 3)
	mallory := func(ordinal int) string {
		_, key, err := plan.TargetKey(p.CampaignID, p.Tool, fmt.Sprintf("mallory%d@example.com", ordinal))
		require.NoError(t, err)
		return fmt.Sprintf(`INSERT INTO target (list_id, ordinal, target, key, vars, line)
			VALUES (%d, %d, 'mallory%d@example.com', '%s', '{}', 99)`, p.ListID, ordinal, ordinal, key)
	}
	h.refused(t, []string{foreignKeyViolation}, mallory(4))
	// Beside a new list of its own, in one statement or with COPY's help.
	h.refused(t, []string{foreignKeyViolation},
		`INSERT INTO target_list (id, campaign_id, target_count, digest, created_by)
		 SELECT nextval(pg_get_serial_sequence('target_list', 'id')), campaign_id, 1, digest, created_by FROM target_list WHERE id = `+fmt.Sprint(p.ListID),
		mallory(5))
	// Naming the list's transaction itself.
	h.refused(t, []string{insufficientPrivilege},
		fmt.Sprintf(`INSERT INTO target (list_id, list_xact, ordinal, target, key, vars, line)
			SELECT id, created_xact, 6, 'mallory@example.com', 'v1:%s', '{}', 99 FROM target_list WHERE id = %d`, strings.Repeat("a", 64), p.ListID))
	// Or making a list that claims an old transaction.
	h.refused(t, []string{insufficientPrivilege},
		`INSERT INTO target_list (campaign_id, target_count, digest, created_by, created_xact)
		 SELECT campaign_id, 1, digest, created_by, created_xact FROM target_list WHERE id = `+fmt.Sprint(p.ListID))

	// And an attempt that names a plan's target with another key (which
	// the audit would count as that target's effect) is refused too.
	var other string
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT key FROM target WHERE list_id = $1 AND ordinal = 2`, p.ListID).Scan(&other))
	h.refused(t, []string{notApproved},
		fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'mallory', %d, 1)`, other, p.ID))
	h.refused(t, []string{"OP004"},
		fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id) VALUES ('%s', 'mallory', %d)`, other, p.ID))
	// Nor may an attempt name a plan, or a plan's target, that is not
	// there: the same check refuses it (no foreign key to plan since 0023,
	// and a plan, once there, is never deleted).
	h.refused(t, []string{notApproved},
		fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'mallory', %d, 2)`, other, p.ID+1000))
	h.refused(t, []string{notApproved},
		fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'mallory', %d, 4)`, other, p.ID))
}

// Finding 1, second half: an attempt made outside any plan, on a planned
// key, moved through unknown to done with a resolver. The application
// role may not write it (an attempt outside any plan is a tool call's,
// migration 0037); the owner may, and one may be there from before: it
// never counts as the target's effect: the audit counts the target
// missing and says why, and the target list shows it.
func TestHostileEffectOutsideThePlanNeverCounts(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	c, p := h.approved(t, 1, 3)
	_, err := h.svc.Start(h.ctx, h.operator, c.ID)
	require.NoError(t, err)
	var key string
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT key FROM target WHERE list_id = $1 AND ordinal = 2`, p.ListID).Scan(&key))
	_, err = ledger.NewStore(h.app).Claim(h.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "mallory"})
	var refused *pgconn.PgError
	require.ErrorAs(t, err, &refused, "refused to the application role")
	require.Equal(t, "OP007", refused.Code, refused.Message)
	store := ledger.NewStore(h.admin)
	cl, err := store.Claim(h.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "mallory"})
	require.NoError(t, err)
	_, err = store.Settle(h.ctx, ledger.SettleParams{EffectID: cl.Effect.ID, State: ledger.StateUnknown, Reason: "forged"})
	require.NoError(t, err)
	_, err = store.Resolve(h.ctx, ledger.ResolveParams{Key: ledger.Key(key), Outcome: ledger.Delivered, Actor: "user:mallory", Reason: "forged"})
	require.NoError(t, err)
	// The other two targets get their effects the normal way.
	for _, ordinal := range []int{1, 3} {
		var k string
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT key FROM target WHERE list_id = $1 AND ordinal = $2`, p.ListID, ordinal).Scan(&k))
		cl, err := store.Claim(h.ctx, ledger.ClaimParams{Key: ledger.Key(k), Owner: "w", PlanID: p.ID, Ordinal: ordinal})
		require.NoError(t, err)
		_, err = store.RecordResponse(h.ctx, cl.Effect.ID, ledger.ResponseSend, []byte("250 ok"))
		require.NoError(t, err)
		_, err = store.Settle(h.ctx, ledger.SettleParams{EffectID: cl.Effect.ID, State: ledger.StateDone, Receipt: "r"})
		require.NoError(t, err)
	}

	m, err := audit.ForCampaign(h.ctx, h.app, c.ID)
	require.NoError(t, err)
	require.True(t, m.PlanIntact)
	require.False(t, m.Holds)
	require.Equal(t, []int{3, 2, 1, 1}, []int{m.Approved, m.ExactlyOnce, m.Missing, m.Outside})
	require.Equal(t, "2/3 exactly once; does not hold: 1 missing", m.Headline())
	require.Len(t, m.Reasons, 1)
	require.Contains(t, m.Reasons[0], "held by a ledger row made outside any plan")

	counts, err := audit.ListCounts(h.ctx, h.app, p.ListID, p.TargetCount)
	require.NoError(t, err)
	require.Equal(t, audit.Counts{Planned: 3, Done: 2, Outside: 1}, counts)
	row, err := audit.TargetByOrdinal(h.ctx, h.app, p.ListID, 2)
	require.NoError(t, err)
	require.Equal(t, audit.StateOutside, row.State)
}

// Finding 2: a second session began REPEATABLE READ before the approval,
// and after it deleted two frozen targets. The role may not delete target
// rows at all, and a list goes only whole, which the foreign keys of the
// draft and the plan stop: PostgreSQL checks those against the latest
// rows, not the old snapshot.
func TestHostileDeleteFromAnOldSnapshot(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	for _, iso := range isolationLevels {
		created := h.create(t, 1, 5)
		sub, err := h.svc.Submit(h.ctx, h.proposer, created.Campaign.ID)
		require.NoError(t, err)
		list := sub.Draft.ListID

		// The old snapshot: a real second connection of the role, in a
		// transaction that read before the approval.
		old, err := h.app.Acquire(h.ctx)
		require.NoError(t, err)
		tx, err := old.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		var n int
		require.NoError(t, tx.QueryRow(h.ctx, `SELECT count(*) FROM target WHERE list_id = $1`, list).Scan(&n))
		require.Equal(t, 5, n)

		app, err := h.svc.Approve(h.ctx, h.approver, created.Campaign.ID, sub.PlanHash)
		require.NoError(t, err)
		require.Equal(t, approval.StateApproved, app.Campaign.State)
		before := h.contents(t)

		for _, stmt := range []struct {
			sql   string
			codes []string
		}{
			{`DELETE FROM target WHERE list_id = $1 AND ordinal IN (2, 4)`, []string{insufficientPrivilege}},
			{`DELETE FROM target_list WHERE id = $1`, []string{foreignKeyViolation, writeOnce, "40001"}},
		} {
			_, err := tx.Exec(h.ctx, "SAVEPOINT s")
			require.NoError(t, err)
			_, err = tx.Exec(h.ctx, stmt.sql, list)
			var pgErr *pgconn.PgError
			require.Truef(t, errors.As(err, &pgErr), "%s at %s: %v", stmt.sql, iso, err)
			require.Containsf(t, stmt.codes, pgErr.Code, "%s at %s: %s", stmt.sql, iso, pgErr.Message)
			_, err = tx.Exec(h.ctx, "ROLLBACK TO SAVEPOINT s")
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(h.ctx))
		old.Release()
		require.Equal(t, before, h.contents(t), "at %s: nothing changed", iso)
		require.Equal(t, 5, h.count(t, `SELECT count(*) FROM target WHERE list_id = $1`, list))
	}
}

// Finding 3: authorship rewritten around a self-approval (rewrite
// proposed_by and last_edited_by, insert the proposer's approval, restore,
// commit) counted toward a quorum of two. Authorship is fixed at submit in
// the submission, which is what the approval rule reads; the draft's
// authorship and content cannot change once submitted.
func TestHostileSelfApprovalByRewrittenAuthorship(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	created := h.create(t, 2, 3)
	id := created.Campaign.ID
	sub, err := h.svc.Submit(h.ctx, h.proposer, id)
	require.NoError(t, err)
	_, err = h.svc.Approve(h.ctx, h.approver, id, sub.PlanHash)
	require.NoError(t, err)

	draft := fmt.Sprintf(`UPDATE draft SET %%s WHERE campaign_id = '%s'`, id)
	selfApproval := fmt.Sprintf(`INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ('%s', 1, '%s', %d)`,
		id, sub.PlanHash, h.proposer.UserID)
	// The exact sequence of the review.
	h.refused(t, []string{insufficientPrivilege},
		fmt.Sprintf(draft, fmt.Sprintf("proposed_by = %d, last_edited_by = %d", h.second.UserID, h.second.UserID)),
		selfApproval,
		fmt.Sprintf(draft, fmt.Sprintf("proposed_by = %d, last_edited_by = %d", h.proposer.UserID, h.proposer.UserID)))
	// The column it may write, while the draft is submitted.
	h.refused(t, []string{notApproved},
		fmt.Sprintf(draft, fmt.Sprintf("last_edited_by = %d", h.second.UserID)), selfApproval)
	h.refused(t, []string{notApproved}, fmt.Sprintf(draft, "subject = 'changed after the submit'"))
	// The approval alone, and a submission that would carry other authors.
	h.refused(t, []string{notSelf}, selfApproval)
	h.refused(t, []string{notSelf},
		fmt.Sprintf(`INSERT INTO submission (campaign_id, version, plan_hash, proposed_by, last_edited_by) VALUES ('%s', 1, '%s', %d, %d)`,
			id, sub.PlanHash, h.second.UserID, h.second.UserID),
		selfApproval)
	h.refused(t, []string{insufficientPrivilege}, `UPDATE submission SET proposed_by = last_edited_by`)
	// So the one real approval still waits for a second.
	c, err := approval.GetCampaign(h.ctx, h.admin, id)
	require.NoError(t, err)
	require.Equal(t, approval.StatePendingApproval, c.State)
	res, err := h.svc.Approve(h.ctx, h.second, id, sub.PlanHash)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, res.Campaign.State)
}

// Finding 4: a plan inserted for an agent's never-submitted draft, the
// campaign pointed at it and moved to approved, was started and audited
// "holds". A plan needs its submission and the quorum of distinct,
// non-author approvals of its exact hash, checked at commit.
func TestHostilePlanWithoutApproval(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	res, err := h.svc.Create(h.ctx, h.agent, approval.CreateParams{
		Name: "never submitted", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(3))},
	})
	require.NoError(t, err)
	id, hash := res.Campaign.ID, res.PlanHash
	insertPlan := fmt.Sprintf(`INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
		list_id, target_count, plan_hash, proposed_by)
		SELECT d.campaign_id, d.version, 'outbox', 'email.send', d.from_addr, d.subject, d.text_body, d.html_body,
		       d.list_id, l.target_count, '%s', d.proposed_by
		FROM draft d JOIN target_list l ON l.id = d.list_id WHERE d.campaign_id = '%s'`, hash, id)
	pointAt := fmt.Sprintf(`UPDATE campaign SET plan_id = (SELECT max(id) FROM plan WHERE campaign_id = '%s') WHERE id = '%s'`, id, id)
	toState := func(s string) string { return fmt.Sprintf(`UPDATE campaign SET state = '%s' WHERE id = '%s'`, s, id) }

	// The review's sequence, with the deferred check made immediate or not.
	h.refused(t, []string{notApproved}, insertPlan, pointAt, toState("pending_approval"), toState("approved"))
	h.refused(t, []string{notApproved}, `SET CONSTRAINTS ALL DEFERRED`, insertPlan, pointAt, toState("pending_approval"), toState("approved"))
	h.refused(t, []string{notApproved}, `SET CONSTRAINTS ALL IMMEDIATE`, insertPlan)
	// Submitted by the server as it would, but approved by nobody.
	h.refused(t, []string{notApproved}, toState("pending_approval"),
		fmt.Sprintf(`INSERT INTO submission (campaign_id, version, plan_hash) VALUES ('%s', 1, '%s')`, id, hash),
		insertPlan)
	// Approved by the proposer (the agent's owner) itself.
	h.refused(t, []string{notSelf}, toState("pending_approval"),
		fmt.Sprintf(`INSERT INTO submission (campaign_id, version, plan_hash) VALUES ('%s', 1, '%s')`, id, hash),
		fmt.Sprintf(`INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ('%s', 1, '%s', %d)`, id, hash, h.agent.UserID))
	// Approved states with no plan of their own, or another campaign's.
	h.refused(t, []string{notApproved}, toState("pending_approval"), toState("approved"))
	_, other := h.approved(t, 1, 2)
	h.refused(t, []string{foreignKeyViolation, notApproved},
		fmt.Sprintf(`UPDATE campaign SET plan_id = %d WHERE id = '%s'`, other.ID, id))
	h.refused(t, []string{insufficientPrivilege}, fmt.Sprintf(`UPDATE campaign SET required_approvals = 0 WHERE id = '%s'`, id))
	// Started without a start.
	h.refused(t, []string{notApproved}, fmt.Sprintf(`UPDATE campaign SET state = 'running' WHERE id = '%s'`, other.CampaignID))

	// The audit of a plan frozen before these rules (the owner writes one
	// here, as an old database may hold) says what is wrong with it.
	legacy := h.legacyPlanWithoutApproval(t)
	m, err := audit.ForPlan(h.ctx, h.app, legacy)
	require.NoError(t, err)
	require.False(t, m.PlanIntact)
	require.False(t, m.Holds)
	require.Equal(t, 0, m.Integrity.Approvals)
	require.Contains(t, strings.Join(m.Reasons, " "), "it has 0 of the 1 approvals it needs")
}

// legacyPlanWithoutApproval writes, as the owner with the freeze check
// switched off (as a database frozen before 0014 could hold), a plan that
// nobody approved, and returns its id.
func (h *hostile) legacyPlanWithoutApproval(t *testing.T) int64 {
	t.Helper()
	created := h.create(t, 1, 2)
	var id int64
	err := pgx.BeginFunc(h.ctx, h.admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(h.ctx, `ALTER TABLE plan DISABLE TRIGGER plan_approved`); err != nil {
			return err
		}
		err := tx.QueryRow(h.ctx, `INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
			list_id, target_count, plan_hash, proposed_by)
			SELECT d.campaign_id, d.version, 'outbox', 'email.send', d.from_addr, d.subject, d.text_body, d.html_body,
			       d.list_id, l.target_count, $2, d.proposed_by
			FROM draft d JOIN target_list l ON l.id = d.list_id WHERE d.campaign_id = $1 RETURNING id`,
			created.Campaign.ID, created.PlanHash).Scan(&id)
		if err != nil {
			return err
		}
		_, err = tx.Exec(h.ctx, `ALTER TABLE plan ENABLE TRIGGER plan_approved`)
		return err
	})
	require.NoError(t, err)
	return id
}

// Finding 5: the running server registered its own bump policy, then
// bumped "under a registered policy". Policies are the owner's to
// register; the role uses them, never makes one.
func TestHostileServerRegistersItsOwnBumpPolicy(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	_, p := h.approved(t, 1, 1)
	var key string
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT key FROM target WHERE list_id = $1`, p.ListID).Scan(&key))
	h.refused(t, []string{insufficientPrivilege},
		`INSERT INTO bump_policy (name, description, registered_by) VALUES ('resend-daily', 'resend every day', 'server')`)
	// Then bump under it anyway.
	h.refused(t, []string{foreignKeyViolation},
		fmt.Sprintf(`INSERT INTO effect_bump (key, epoch, actor_kind, actor, policy, reason) VALUES ('%s', 1, 'policy', 'server', 'resend-daily', 'because')`, key))
	h.refused(t, []string{insufficientPrivilege}, `UPDATE bump_policy SET description = 'changed'`, `DELETE FROM bump_policy`)
}

// A submission keeps the text it asked to be approved (the diff against a
// rejected version reads it), and PostgreSQL copies that text from the
// draft under the campaign's lock: a submission written by the server's
// role with other text gets the draft's.
func TestHostileSubmissionTextIsTheDraft(t *testing.T) {
	t.Parallel()
	h := setupHostile(t)
	created := h.create(t, 2, 3)
	id := created.Campaign.ID
	sub, err := h.svc.Submit(h.ctx, h.proposer, id)
	require.NoError(t, err)
	_, err = h.app.Exec(h.ctx, `INSERT INTO submission (campaign_id, version, plan_hash, subject, text_body, html_body, from_addr)
		VALUES ($1, 1, $2, 'forged', 'forged', 'forged', 'forged@example.com')`, id, sub.PlanHash)
	require.NoError(t, err)
	rows, err := h.app.Query(h.ctx, `SELECT from_addr, subject, text_body, html_body FROM submission WHERE campaign_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ From, Subject, Text, HTML string }])
	require.NoError(t, err)
	want := struct{ From, Subject, Text, HTML string }{created.Draft.Payload.From, created.Draft.Payload.Subject,
		created.Draft.Payload.Text, created.Draft.Payload.HTML}
	require.Equal(t, []struct{ From, Subject, Text, HTML string }{want, want}, got)
	h.refused(t, []string{insufficientPrivilege}, `UPDATE submission SET subject = 'changed'`)
}
