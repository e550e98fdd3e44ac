package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
)

// TestSuppressedAfterApprovalIsNeverSent: an address suppressed between the
// approval and its target's claim (it unsubscribed from another campaign,
// bounced, complained) gets nothing — counted at the receiver — and its
// target is recorded as suppressed; the audit adds up (approved = exactly
// once + suppressed), holds, and says how many; a resume queues nothing
// for it; taking the address off the list afterwards does not send it for
// this plan either.
func TestSuppressedAfterApprovalIsNeverSent(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{}, "hook="+hook.URL())
	id := w.approved(t, "hook", 5) // t0000@example.com … t0004@example.com

	// After the approval, before anything ran: two addresses are suppressed
	// (one as typed by a person, in another case).
	for _, a := range []string{"T0001@Example.com", "t0003@example.com"} {
		_, added, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{
			Address: a, Reason: suppression.Unsubscribed, Source: suppression.FromActor, Actor: "ops@example.com"})
		require.NoError(t, err)
		require.True(t, added)
	}
	w.start(t)
	_, err := w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 30*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })

	got := map[string]int{}
	for _, e := range hook.Effects() {
		got[e.Target]++
	}
	require.Equal(t, map[string]int{"t0000@example.com": 1, "t0002@example.com": 1, "t0004@example.com": 1}, got,
		"the suppressed addresses got nothing")
	require.Equal(t, 3, w.attempts(t), "no ledger row for a suppressed target")

	c, err := approval.GetCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)
	m, err := audit.ForPlan(w.ctx, w.pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, 5, m.Approved)
	require.Equal(t, 3, m.ExactlyOnce)
	require.Equal(t, 2, m.Suppressed)
	require.Zero(t, m.Missing)
	require.True(t, m.Holds, "%v", m.Reasons)
	require.Equal(t, "3/5 exactly once, 2 suppressed; holds", m.Headline())

	p, err := plan.GetPlan(w.ctx, w.pool, c.PlanID)
	require.NoError(t, err)
	counts, err := audit.ListCounts(w.ctx, w.pool, p.ListID, p.TargetCount)
	require.NoError(t, err)
	require.Equal(t, 2, counts.Suppressed)
	require.Equal(t, 3, counts.Done)
	require.Zero(t, counts.NotStarted)
	row, err := audit.TargetByOrdinal(w.ctx, w.pool, p.ListID, 2)
	require.NoError(t, err)
	require.Equal(t, audit.StateSuppressed, row.State)
	require.Equal(t, "unsubscribed (actor, by ops@example.com)", row.Reason)
	require.NotNil(t, row.LastAt, "when it was left out")
	page, err := audit.QueryTargets(w.ctx, w.pool, audit.TargetQuery{ListID: p.ListID, Count: p.TargetCount, State: audit.StateSuppressed, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Rows, 2)

	// Nothing to resume; taking the address off the list does not send it
	// for this plan (the outcome is final for the plan).
	rem, err := w.svc.Remaining(w.ctx, c)
	require.NoError(t, err)
	require.Zero(t, rem.Queue)
	_, err = suppression.Remove(w.ctx, w.pool, "t0001@example.com", "admin@example.com", "asked to be mailed again")
	require.NoError(t, err)
	res, err := w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	require.Equal(t, approval.StateCompleted, res.Campaign.State)
	require.Zero(t, w.jobStates(t)[rivertype.JobStateAvailable], "jobs queued by the resume")
	require.Len(t, hook.Effects(), 3)
}

// TestImportLeavesSuppressedAddressesOut: a suppressed address is not in
// a draft's list, and the import report names its line and reason.
func TestImportLeavesSuppressedAddressesOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	_, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{
		Address: "bob@example.com", Reason: suppression.HardBounce, Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	res, err := w.svc.Create(w.ctx, w.proposer, approvalCreate("outbox",
		"email,name\nann@example.com,Ann\nBOB@example.com,Bob\ncy@example.com,Cy\n"))
	require.NoError(t, err)
	require.Equal(t, 2, res.Import.Accepted)
	require.Equal(t, 1, res.Import.SuppressedCount)
	require.Equal(t, []plan.Suppressed{{Line: 3, Reason: "hard_bounce"}}, res.Import.Suppressed)
	require.Equal(t, 2, res.Import.TargetCount)
	require.Equal(t, res.Import.Rows, res.Import.Accepted+res.Import.Duplicate+res.Import.RejectedCount+res.Import.SuppressedCount)

	// Every row suppressed: refused as a whole, saying so.
	_, err = w.svc.Create(w.ctx, w.proposer, approvalCreate("outbox", "email\nbob@example.com\n"))
	require.ErrorContains(t, err, "1 suppressed")
	require.True(t, strings.Contains(err.Error(), "the list's one row is not a usable target"), err.Error())
}

// approvalCreate is a draft on providerName with the CSV list csv.
func approvalCreate(providerName, csv string) approval.CreateParams {
	return approval.CreateParams{
		Name: "suppression " + providerName, Provider: providerName,
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv)},
	}
}
