package migrations_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/migrations"
	"github.com/onceplan/onceplan/plan"
)

// TestUpgradeKeepsPendingApprovals: a database migrated before 0014 holds
// a campaign pending approval, with one of the two approvals it needs. The
// upgrade gives it the submission its submit recorded (hash from the
// trail, authorship from the draft), so the second approver's approval
// freezes it, counting the first; and the proposer still may not approve.
func TestUpgradeKeepsPendingApprovals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)
	owner := pgtest.NewPool(t, urls.Owner)
	admin := pgtest.NewPool(t, urls.Admin)
	app := pgtest.NewPool(t, urls.App)
	client, err := river.NewClient(riverpgxv5.New(app), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(app, jobs.NewEnqueuer(client))
	user := func(email string, roles ...auth.Role) auth.Actor {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		return auth.Actor{UserID: pgtest.User(t, admin, pgtest.UserOpts{Email: email, Roles: names}), Email: email, Roles: roles}
	}
	proposer := user("pat@example.com", auth.RoleProposer, auth.RoleApprover)
	first, second := user("amy@example.com", auth.RoleApprover), user("abe@example.com", auth.RoleApprover)

	created, err := svc.Create(ctx, proposer, approval.CreateParams{
		Name: "before the upgrade", Provider: "outbox", RequiredApprovals: 2,
		Payload: plan.Payload{From: "a@example.com", Subject: "Hello", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\nann@example.com\nbob@example.com\n")},
	})
	require.NoError(t, err)
	id, hash := created.Campaign.ID, created.PlanHash

	// Back to 0013, and the submit and first approval as 0013 wrote them.
	_, err = migrations.DownTo(ctx, owner, 13)
	require.NoError(t, err)
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE campaign SET state = 'pending_approval' WHERE id = $1`, []any{id}},
		{`INSERT INTO campaign_event (campaign_id, action, actor_id, version, plan_hash) VALUES ($1, 'submit', $3, 1, $2)`, []any{id, hash, proposer.UserID}},
		{`INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ($1, 1, $2, $3)`, []any{id, hash, first.UserID}},
	} {
		_, err := admin.Exec(ctx, st.sql, st.args...)
		require.NoError(t, err, st.sql)
	}
	res, err := migrations.Up(ctx, owner)
	require.NoError(t, err)
	require.Equal(t, versionsFrom(14), res.Applied)

	_, err = svc.Approve(ctx, proposer, id, hash)
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	approved, err := svc.Approve(ctx, second, id, hash)
	require.NoError(t, err)
	require.Equal(t, approval.StateApproved, approved.Campaign.State, "the approval given before the upgrade counts")

	// The submission the approval answered is the one 0014 recorded for
	// the draft already pending, with its authorship.
	events, err := approval.Events(ctx, app, id)
	require.NoError(t, err)
	i := slices.IndexFunc(events, func(e approval.Event) bool { return e.Action == "approve" && e.ActorID == second.UserID })
	require.GreaterOrEqual(t, i, 0, "the approval's trail entry")
	sub, err := approval.SubmissionOf(ctx, app, events[i])
	require.NoError(t, err)
	require.Equal(t, approval.Submission{ID: sub.ID, CampaignID: id, Version: 1, PlanHash: hash, ListID: created.Draft.ListID, TargetCount: 2,
		ProposedBy: proposer.UserID, LastEditedBy: proposer.UserID, SubmittedBy: proposer.UserID, CreatedAt: sub.CreatedAt}, sub)
}
