package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// TestDiscardADraft: the draft page offers its proposer "Discard this
// draft" on a campaign never approved; once discarded it is cancelled, so
// it can no longer be submitted, approved or started, its page offers
// nothing of the kind, and its history says who discarded it and why. A
// viewer is not offered the button and is refused; a campaign with an
// approved version is not a draft to discard.
func TestDiscardADraft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	draft := "/campaigns/" + c.ID + "/draft"

	require.Equal(t, 0, tid(parse(t, b.as["viewer"].get(draft)), "discard").Length())
	require.Equal(t, http.StatusForbidden, b.as["viewer"].post("/campaigns/"+c.ID+"/discard", nil).Code)
	d := parse(t, b.as["proposer"].get(draft))
	require.Equal(t, "Discard this draft", strings.TrimSpace(tid(d, "discard").Text()))

	rec := b.as["proposer"].post("/campaigns/"+c.ID+"/discard", url.Values{"reason": {"the list was the wrong one"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, draft+"?flash=discarded", rec.Header().Get("Location"))
	require.Equal(t, approval.StateCancelled, b.campaign(c.ID).State)
	d = parse(t, b.as["proposer"].follow(rec))
	require.Contains(t, tid(d, "flash").Text(), "Draft discarded")
	require.Equal(t, 0, tid(d, "discard").Length())
	require.Equal(t, 0, tid(d, "submit-for-approval").Length())
	summary := tid(d, "history").Find(`[data-testid="event"][data-action="cancel"]`)
	require.Contains(t, summary.Text(), "Discarded the draft")
	require.Contains(t, summary.Text(), "the list was the wrong one")

	// Nothing of it can be approved, submitted or started any more.
	ctx := context.Background()
	_, err := b.svc.Approve(ctx, b.as["approver"].actor, c.ID, b.hash(c))
	require.ErrorIs(t, err, onceplan.ErrConflict)
	_, err = b.svc.Submit(ctx, b.as["proposer"].actor, c.ID)
	require.ErrorIs(t, err, onceplan.ErrConflict)
	_, err = b.svc.Start(ctx, b.as["operator"].actor, c.ID)
	require.ErrorIs(t, err, onceplan.ErrConflict)

	// Approved once: not a draft to discard (an operator cancels it).
	started, _ := b.started(campaignOpts{})
	_, err = b.svc.Discard(ctx, b.as["proposer"].actor, started.ID, "")
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Equal(t, approval.StateRunning, b.campaign(started.ID).State)
}
