package web

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// TestTargetPageShowsProviderEvents: the bounces a provider reported about
// a target's message (tied through our Message-ID or its receipt) are on
// the target page, soft bounces counted; another target's page shows none.
func TestTargetPageShowsProviderEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{})
	b.effect(p, 1, ledger.StateDone, "250 2.0.0 queued as ABC")
	key := b.keyOf(p, 1)
	base := "/campaigns/" + c.ID + "/targets/"

	d := parse(t, b.as["viewer"].get(base+"1"))
	require.Equal(t, 1, tid(d, "no-provider-events").Length())

	for _, body := range []string{
		`{"id":"s1","type":"soft_bounce","address":"user0001@example.com","message_id":"` + provider.MessageID(key, 0) + `"}`,
		`{"id":"s2","type":"soft_bounce","address":"user0001@example.com","message_id":"` + provider.MessageID(key, 0) + `"}`,
		`{"id":"h1","type":"hard_bounce","address":"user0001@example.com","message_id":"` + provider.MessageID(key, 0) + `"}`,
	} {
		events, err := inbound.Parse(inbound.Generic, []byte(body))
		require.NoError(t, err)
		_, err = inbound.Record(t.Context(), b.pool, events)
		require.NoError(t, err)
	}
	d = parse(t, b.as["viewer"].get(base+"1"))
	require.Equal(t, 3, tid(d, "provider-event").Length())
	require.Equal(t, "hard_bounce", tid(d, "provider-event").Last().AttrOr("data-type", ""))
	require.Contains(t, tid(d, "soft-bounce-count").Text(), "2 soft bounces")

	d = parse(t, b.as["viewer"].get(base+"2"))
	require.Equal(t, 1, tid(d, "no-provider-events").Length())
}

// TestTargetPageShowsAnAddressBounce: a hard bounce that names no message
// of ours (only the address, as many providers' reports and the generic
// webhook may) suppresses the address; the target's page shows that
// bounce and the suppression it caused, never "No bounce or complaint
// reported". The suppression names the campaign, not its id.
func TestTargetPageShowsAnAddressBounce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{})
	b.effect(p, 1, ledger.StateDone, "250 2.0.0 queued as ABC")
	base := "/campaigns/" + c.ID + "/targets/"

	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"hb1","type":"hard_bounce","address":"User0001@Example.com"}`))
	require.NoError(t, err)
	res, err := inbound.Record(t.Context(), b.pool, events)
	require.NoError(t, err)
	require.Equal(t, 1, res.Suppressed)
	require.Equal(t, 0, res.Tied, "the bounce names no message")

	d := parse(t, b.as["viewer"].get(base+"1"))
	require.Equal(t, 0, tid(d, "no-provider-events").Length(), "the bounce is on the page")
	require.Equal(t, 1, tid(d, "provider-event").Length())
	require.Equal(t, "hard_bounce", tid(d, "provider-event").AttrOr("data-type", ""))
	require.Equal(t, "the address (no message of ours named)", tid(d, "provider-event-about").Text())
	sup := tid(d, "address-suppressed")
	require.Equal(t, "hard_bounce", sup.AttrOr("data-reason", ""))
	require.Contains(t, squash(sup.Text()), "This address is suppressed since")
	require.Contains(t, squash(sup.Text()), "hard bounce, reported by the provider")
	require.Contains(t, squash(sup.Text()), "No campaign mails it until an admin takes it off the suppression list.")

	// Another target's address bounced nothing.
	d = parse(t, b.as["viewer"].get(base+"2"))
	require.Equal(t, 1, tid(d, "no-provider-events").Length())
	require.Equal(t, 0, tid(d, "address-suppressed").Length())
}

// squash is text with its runs of white space made one space.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
