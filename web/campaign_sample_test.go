package web

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// TestApprovalSamplesAreOfPeopleWhoWillBeMailed: the approval page of a
// second version samples the targets it will send — not those version 1
// already sent to, not one unsubscribed since the import — and shows the
// warning the submit showed: a target whose merge variable is blank.
func TestApprovalSamplesAreOfPeopleWhoWillBeMailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{Targets: csvOf(5)})
	b.effect(p, 1, ledger.StateDone, "250 ok")
	b.effect(p, 2, ledger.StateDone, "250 ok")

	// Version 2: the same people and one more, one of them with a blank
	// first name; then user0004 unsubscribes.
	proposer := b.as["proposer"].actor
	v2 := strings.Replace(csvOf(5), "user0005@example.com,Name 5", "user0005@example.com,", 1) + "user0006@example.com,Name 6\n"
	_, err := b.svc.ImportTargets(ctx, proposer, c.ID, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(v2)})
	require.NoError(t, err)
	_, _, err = suppression.Add(ctx, b.pool, suppression.AddParams{Address: "user0004@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	res, err := b.svc.Submit(ctx, proposer, c.ID)
	require.NoError(t, err)
	require.Equal(t, 1, res.Check.EmptyCount, "the submit warned of the blank first name")

	d := parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/approval"))
	var to []string
	tid(d, "preview-to").Each(func(_ int, s *goquerySelection) { to = append(to, s.Text()) })
	require.Equal(t, []string{"user0003@example.com", "user0005@example.com", "user0006@example.com"}, to,
		"no sample of a target done by version 1 or unsubscribed")
	require.Contains(t, tid(d, "sample-note").Text(), "passed by")
	require.Equal(t, 1, tid(d, "empty-vars").Length())
	require.Contains(t, tid(d, "empty-warning").Text(), "line 6, user0005@example.com")
	require.Equal(t, 1, tid(d, "empty-var").Length())
}
