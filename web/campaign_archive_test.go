package web

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
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

// TestArchivedCampaignTakesNoAction: a campaign that completed with every
// target done is archived. Its run page shows no action (it showed
// "Resume" for every target: the hot ledger holds none of them), its
// target and draft pages no decision and no form; the resume button's
// request, posted anyway, answers 409 with the sentence that says why, and
// changes nothing (the campaign stays completed, no job is queued).
func TestArchivedCampaignTakesNoAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	for ordinal := 1; ordinal <= 3; ordinal++ {
		b.effect(p, ordinal, ledger.StateDone, `{"ok":true}`)
	}
	// Its jobs ran to the end, as workers would have run them (none runs here).
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'onceplan_effect'`)
	require.NoError(t, err)
	completed, err := b.svc.CompleteIfDone(ctx, c.ID, func(context.Context, pgx.Tx, approval.Campaign) (bool, error) { return true, nil })
	require.NoError(t, err)
	require.True(t, completed)
	_, err = ledger.NewStore(b.pool).ArchiveCampaign(ctx, c.ID, "ops@example.com")
	require.NoError(t, err)
	jobs := func() (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
		return n
	}
	queued := jobs()

	base := "/campaigns/" + c.ID
	op := b.as["operator"]
	run := parse(t, op.get(base+"/run"))
	require.Equal(t, "3", tid(run, "count-done").Text())
	require.Zero(t, run.Find(`[data-testid^="action-"]`).Length(), "no action on an archived campaign")
	target := parse(t, op.get(base+"/targets/1"))
	require.Zero(t, target.Find(`form[action*="/targets/1/"]`).Length(), "no decision on an archived campaign's target")
	draft := parse(t, b.as["proposer"].get(base+"/draft"))
	require.Zero(t, tid(draft, "payload-form").Length(), "no edit of an archived campaign")
	require.Zero(t, tid(draft, "import-form").Length())

	rec := op.post(base+"/resume", nil)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Regexp(t, `campaign `+c.ID+` was archived on \d{4}-\d\d-\d\d \d\d:\d\d UTC, and an archived campaign never runs or changes again; clone it to send it anew$`,
		tid(parse(t, rec), "error-message").Text())
	require.Equal(t, approval.StateCompleted, b.campaign(c.ID).State)
	require.Equal(t, queued, jobs(), "nothing was queued")
}
