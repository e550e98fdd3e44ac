package cli

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
)

// TestArchiveCommand archives a finished campaign as the app role: the
// audit prints the same before and after, and what may not be archived
// is refused in one sentence with nothing moved.
func TestArchiveCommand(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	b := &cliBundle{ctx: context.Background(), url: urls.App, pool: app}
	finished, err := audittest.Seed(b.ctx, admin, 1000)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(b.ctx, admin, finished))
	running, err := audittest.Seed(b.ctx, admin, 1000)
	require.NoError(t, err)

	before := b.run(t, runAudit, "", finished.CampaignID, "--json")
	r := b.run(t, runArchive, "", finished.CampaignID, "--json")
	require.NoError(t, r.err)
	var out archiveOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, finished.CampaignID, out.Campaign)
	var attempts int64
	require.NoError(t, admin.QueryRow(b.ctx, `SELECT count(*) FROM effect_archive WHERE plan_id = $1`, finished.PlanID).Scan(&attempts))
	require.Equal(t, attempts, out.Attempts)
	require.Greater(t, out.Answers, int64(0))
	after := b.run(t, runAudit, "", finished.CampaignID, "--json")
	require.Equal(t, before, after, "the audit answers as before")

	r = b.run(t, runArchive, "", finished.CampaignID)
	requireOneLine(t, r.err)
	require.Regexp(t, `^archive: campaign "audit seed \d+" was not archived: it is archived already$`, r.err.Error())
	r = b.run(t, runArchive, "", running.CampaignID)
	requireOneLine(t, r.err)
	require.Regexp(t, `^archive: campaign "audit seed \d+" was not archived: it is running; only a completed or cancelled campaign is archived$`, r.err.Error())
	require.NoError(t, admin.QueryRow(b.ctx, `SELECT count(*) FROM effect_archive WHERE plan_id = $1`, running.PlanID).Scan(&attempts))
	require.Zero(t, attempts)
	r = b.run(t, runArchive, "", "no such campaign")
	requireOneLine(t, r.err)
}
