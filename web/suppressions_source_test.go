package web

import (
	"net/url"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestSuppressionsPageNamesSourcesInWords: the list says where each entry
// came from in words, names the person who added one, and names (and
// links) the campaign whose unsubscribe link was used, never its raw id
// or the word "actor".
func TestSuppressionsPageNamesSourcesInWords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{})
	_, _, err := suppression.Add(t.Context(), b.pool, suppression.AddParams{Address: "user0002@example.com",
		Reason: suppression.Unsubscribed, Source: suppression.FromUnsubscribe, CampaignID: c.ID})
	require.NoError(t, err)
	op := b.as["operator"]
	token := tid(parse(t, op.get("/suppressions")), "suppression-add-form").Find(`input[name=form_token]`).AttrOr("value", "")
	op.post("/suppressions", url.Values{"address": {"ann@example.com"}, "reason": {"manual"}, "form_token": {token}})

	d := parse(t, b.as["viewer"].get("/suppressions"))
	row := func(addr string) *goquery.Selection {
		return d.Find(`[data-testid="suppression"][data-address="` + addr + `"]`)
	}
	unsub := row("user0002@example.com")
	require.Equal(t, "unsubscribe link", unsub.Find(`[data-testid="suppression-source"]`).Text())
	link := unsub.Find(`[data-testid="suppression-campaign"]`)
	require.Equal(t, c.Name, link.Text())
	require.Equal(t, "/campaigns/"+c.ID, link.AttrOr("href", ""))
	require.NotContains(t, unsub.Find(`[data-testid="suppression-by"]`).Text(), c.ID, "the campaign's name, not its id")

	manual := row("ann@example.com")
	require.Equal(t, "added by a person", manual.Find(`[data-testid="suppression-source"]`).Text())
	require.Equal(t, "operator@example.com", manual.Find(`[data-testid="suppression-person"]`).Text())
	require.NotContains(t, d.Find(`[data-testid="suppressions"]`).Text(), "actor")
}
