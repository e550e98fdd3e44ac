package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
)

// TestUnsubscribePageNamesSenderAndCampaign: the page a message's link
// opens says which campaign the link came in and who sent it (the
// approved plan's From), and truthfully what unsubscribing covers: every
// campaign sent through this Onceplan, whoever its sender — as a later
// campaign of another sender shows, which leaves the address out. Opened
// again, the link says the address is already unsubscribed instead of
// asking again.
func TestUnsubscribePageNamesSenderAndCampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.started(campaignOpts{})
	token, err := suppression.NewLinks(b.pool, "").Token(t.Context(), c.ID, "user0001@example.com")
	require.NoError(t, err)
	anon := b.anon()

	d := parse(t, anon.get("/u/"+token))
	require.Equal(t, "This link came in “Invoice reminder”, from Billing <billing@example.com>.", squash(tid(d, "unsubscribe-campaign").Text()))
	require.Equal(t, "Unsubscribing stops every campaign message sent through this mailing service to user0001@example.com: "+
		"those from Billing <billing@example.com>, and those from every other sender that uses it — not only this campaign's.",
		squash(tid(d, "unsubscribe-scope").Text()))
	require.Equal(t, 1, tid(d, "unsubscribe-form").Length())

	req := httptest.NewRequest(http.MethodPost, "/u/"+token, strings.NewReader("List-Unsubscribe=One-Click"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	d = parse(t, anon.do(req))
	require.Equal(t, "You are unsubscribed: user0001@example.com will get no more campaign messages sent through this mailing service, "+
		"from Billing <billing@example.com> or from any other sender that uses it.", tid(d, "unsubscribe-done").Text())
	require.Equal(t, "You followed the link in “Invoice reminder”.", tid(d, "unsubscribe-campaign").Text())

	// Opened again: already unsubscribed, nothing to confirm.
	d = parse(t, anon.get("/u/"+token))
	require.Equal(t, 0, tid(d, "unsubscribe-form").Length())
	already := squash(tid(d, "unsubscribe-already").Text())
	require.Regexp(t, `^user0001@example\.com is already unsubscribed, since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: `+
		`no campaign message sent through this mailing service goes to it, whoever the sender\. There is nothing more to do\.$`, already)

	// What the page said holds: another sender's later campaign leaves
	// the address out.
	other := b.draft(campaignOpts{Targets: "email,first_name\nuser0001@example.com,Ann\nuser0002@example.com,Bob\n",
		Payload: plan.Payload{From: "Shop <shop@example.com>", Subject: "Sale {{.first_name}}", Text: "Hi {{.first_name}}"}})
	d = parse(t, b.as["proposer"].get("/campaigns/"+other.ID+"/draft"))
	require.Equal(t, "1", tid(d, "target-count").Text(), "the unsubscribed address is left out of another sender's campaign")
}
