package web

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestArchivedCampaignPage: after `onceplan archive`, the campaign's pages
// say it is archived, and its counts and targets read as before.
func TestArchivedCampaignPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{})
	for ordinal := 1; ordinal <= 3; ordinal++ {
		b.effect(p, ordinal, ledger.StateDone, `{"ok":true}`)
	}
	_, err := b.svc.Cancel(ctx, b.as["operator"].actor, c.ID, "enough sent")
	require.NoError(t, err)

	run := "/campaigns/" + c.ID + "/run"
	before := parse(t, b.as["viewer"].get(run))
	require.Zero(t, tid(before, "archived").Length(), "not archived yet")
	require.Equal(t, "3", tid(before, "count-done").Text())

	_, err = ledger.NewStore(b.pool).ArchiveCampaign(ctx, c.ID, "ops@example.com")
	require.NoError(t, err)
	require.NotNil(t, b.campaign(c.ID).ArchivedAt)

	after := parse(t, b.as["viewer"].get(run))
	require.Regexp(t, `^archived \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`, tid(after, "archived").Text())
	for _, s := range []string{"done", "not_started", "planned"} {
		require.Equal(t, tid(before, "count-"+s).Text(), tid(after, "count-"+s).Text(), s)
	}
	targets := parse(t, b.as["viewer"].get("/campaigns/"+c.ID+"/audit"))
	require.Contains(t, tid(targets, "archived").Text(), "archived ", "every campaign page's heading says so")
}
