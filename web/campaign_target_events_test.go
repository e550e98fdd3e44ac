package web

import (
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
