package web

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestTestSendFormNeverMailsASuppressedReviewer: the test-send form shows
// a reviewer the suppression list holds, with why, and offers no box for
// it; a form posted with it anyway (an old page, a hand-made request) is
// refused in one sentence naming the address and why, and nothing is
// sent (counted at the outbox) while the others still get theirs.
func TestTestSendFormNeverMailsASuppressedReviewer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	ap := b.as["approver"]
	_, _, err := suppression.Add(t.Context(), b.pool, suppression.AddParams{Address: "viewer@example.com", Reason: suppression.Complaint,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)

	d := parse(t, ap.get("/campaigns/"+c.ID+"/approval"))
	var offered []string
	tid(d, "test-send-to").Each(func(_ int, s *goquerySelection) { offered = append(offered, s.AttrOr("value", "")) })
	require.Contains(t, offered, "approver@example.com")
	require.NotContains(t, offered, "viewer@example.com", "no box for a suppressed reviewer")
	held := tid(d, "test-send-suppressed")
	require.Equal(t, 1, held.Length())
	require.Contains(t, held.Text(), "viewer@example.com: on the suppression list (it complained of a message on ")

	rec := ap.post("/campaigns/"+c.ID+"/test", url.Values{"to": {"approver@example.com", "viewer@example.com"}, "back": {"approval"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "to[1]: viewer@example.com is on the suppression list (it complained of a message on ")
	require.Contains(t, rec.Body.String(), "a test send never mails a suppressed address: nothing was sent")
	require.Empty(t, b.outboxNew(), "nothing was sent")

	rec = ap.post("/campaigns/"+c.ID+"/test", url.Values{"to": {"approver@example.com"}, "back": {"approval"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Len(t, b.outboxNew(), 1)
}
