package web

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRejectionReachesTheProposer: an approver rejects with a reason; the
// proposer's draft page says who rejected the version, and why, until it
// is submitted again; the draft's history lists the import with the line
// it refused, the submission and the rejection with its reason; and the
// audit page of the campaign, never approved, shows that history instead
// of answering 404.
func TestRejectionReachesTheProposer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{Targets: "email,first_name\nann@example.com,Ann\nnot an address,Broken\nbob@example.com,Bob\n"})
	rec := b.as["approver"].post("/campaigns/"+c.ID+"/reject", url.Values{"reason": {"the subject names the wrong month"}})
	require.Equal(t, http.StatusSeeOther, rec.Code)

	p := b.as["proposer"]
	d := parse(t, p.get("/campaigns/"+c.ID+"/draft"))
	notice := tid(d, "rejection-notice").Text()
	require.Contains(t, notice, "rejected by approver@example.com")
	require.Contains(t, notice, "the subject names the wrong month")
	history := tid(d, "history")
	reject := history.Find(`[data-testid="event"][data-action="reject"]`)
	require.Equal(t, 1, reject.Length())
	require.Equal(t, "the subject names the wrong month", reject.Find(`[data-testid="event-reason"]`).Text())
	require.Equal(t, "approver@example.com", reject.Find(`[data-testid="event-actor"]`).Text())
	require.Equal(t, 1, history.Find(`[data-testid="event"][data-action="submit"]`).Length())
	imp := history.Find(`[data-testid="event"][data-action="import"]`)
	require.Contains(t, imp.Find(`[data-testid="event-summary"]`).Text(), "3 lines, 2 accepted, 0 duplicate, 1 rejected")
	require.Equal(t, "3", imp.Find(`[data-testid="event-rejected-line"]`).AttrOr("data-line", ""))
	// Newest first on the draft page.
	require.Equal(t, "reject", history.Find(`[data-testid="event"]`).First().AttrOr("data-action", ""))

	// The approval page of the draft says it too.
	d = parse(t, p.get("/campaigns/"+c.ID+"/approval"))
	require.Contains(t, tid(d, "rejection-notice").Text(), "the subject names the wrong month")

	// The campaign was never approved: its audit page is its history.
	require.Equal(t, "/campaigns/"+c.ID+"/audit", tid(d, "tab-history").AttrOr("href", ""))
	rec = p.get("/campaigns/" + c.ID + "/audit")
	require.Equal(t, http.StatusOK, rec.Code)
	d = parse(t, rec)
	require.Equal(t, 1, tid(d, "no-plan").Length())
	require.Equal(t, 0, tid(d, "audit").Length(), "no metric without a plan")
	var actions []string
	tid(d, "event").Each(func(_ int, s *goquerySelection) { actions = append(actions, s.AttrOr("data-action", "")) })
	require.Equal(t, []string{"create", "import", "submit", "reject"}, actions)

	// Submitted again, the notice is gone.
	_, err := b.svc.Submit(t.Context(), p.actor, c.ID)
	require.NoError(t, err)
	d = parse(t, p.get("/campaigns/"+c.ID+"/draft"))
	require.Equal(t, 0, tid(d, "rejection-notice").Length())
}
