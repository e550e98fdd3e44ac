package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestUnsubscribePageNamesSenderAndCampaign: the page a message's link
// opens says which campaign the link came in and who sent it (the
// approved plan's From), before and after the reader confirms.
func TestUnsubscribePageNamesSenderAndCampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.started(campaignOpts{})
	token, err := suppression.NewLinks(b.pool, "").Token(t.Context(), c.ID, "user0001@example.com")
	require.NoError(t, err)
	anon := b.anon()

	d := parse(t, anon.get("/u/"+token))
	require.Equal(t, "This link came in “Invoice reminder”, from Billing <billing@example.com>.", squash(tid(d, "unsubscribe-campaign").Text()))
	require.Contains(t, squash(d.Find("form").Parent().Text()), "Stop every campaign message from Billing <billing@example.com> to user0001@example.com?")

	req := httptest.NewRequest(http.MethodPost, "/u/"+token, strings.NewReader("List-Unsubscribe=One-Click"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	d = parse(t, anon.do(req))
	require.Equal(t, "You are unsubscribed: user0001@example.com will get no more campaign messages from Billing <billing@example.com>.",
		tid(d, "unsubscribe-done").Text())
	require.Equal(t, "You followed the link in “Invoice reminder”.", tid(d, "unsubscribe-campaign").Text())
}
