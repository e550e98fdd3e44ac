package crashtest

import (
	"bytes"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
)

// TestArchiveKilledMidTransaction: `onceplan archive` is killed with
// SIGKILL in the middle of its transaction (held there by another
// session's lock on one of the campaign's attempts, after it moved the
// raw answers). Nothing moves, the audit answers as before — while the
// archive is under way and after the kill — and archiving again moves
// everything, with the same answer. The archived campaign never runs
// again.
func TestArchiveKilledMidTransaction(t *testing.T) {
	t.Parallel()
	const n = 40
	e := newEnv(t)
	w := newWorld(t, "maildir")
	id := e.campaign(t, "p", n)
	targets := e.targets(t, id)
	wk := e.startWorker(t, []string{w.provider})
	waitFor(t, 60*time.Second, "the campaign to complete with every target done", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted && e.states(t, id)["done"] == n
	}, wk)
	wk.kill()
	c, err := approval.GetCampaign(e.ctx, e.pool, id)
	require.NoError(t, err)
	before, err := audit.ForPlan(e.ctx, e.pool, c.PlanID)
	require.NoError(t, err)
	require.True(t, before.Holds)
	hot := func() (n int) {
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM effect WHERE plan_id = $1`, c.PlanID).Scan(&n))
		return n
	}
	attempts := hot()

	// Another session holds one attempt: the archive's move of the
	// attempts waits for it, its raw answers already moved.
	owner, err := pgx.Connect(e.ctx, e.owner)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(e.ctx) })
	hold, err := owner.Begin(e.ctx)
	require.NoError(t, err)
	_, err = hold.Exec(e.ctx, `SELECT 1 FROM effect WHERE id = (SELECT max(id) FROM effect WHERE plan_id = $1) FOR KEY SHARE`, c.PlanID)
	require.NoError(t, err)

	var out bytes.Buffer
	cmd := exec.Command(binary, "archive", "--database-url", e.url, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	archiving := func(waiting string) func() bool {
		return func() bool {
			var k int
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE query LIKE '%archive_campaign(%' AND pid <> pg_backend_pid() AND ($1 = '' OR wait_event_type = $1)`, waiting).Scan(&k))
			return k > 0
		}
	}
	waitFor(t, 60*time.Second, "the archive to wait for the held attempt", archiving("Lock"))
	during, err := audit.ForPlan(e.ctx, e.pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, during, "the audit while the archive is under way")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Error(t, cmd.Wait(), "the archive was killed: %s", out.String())
	require.NoError(t, hold.Rollback(e.ctx))
	waitFor(t, 60*time.Second, "the killed archive's transaction to end", func() bool { return !archiving("")() })

	var archived bool
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM campaign_archive WHERE campaign_id = $1)`, id).Scan(&archived))
	require.False(t, archived, "nothing of the killed archive was committed")
	require.Equal(t, attempts, hot(), "every attempt is where it was")
	after, err := audit.ForPlan(e.ctx, e.pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, after)

	again, err := exec.Command(binary, "archive", "--database-url", e.url, id).CombinedOutput()
	require.NoError(t, err, "%s", again)
	require.Contains(t, string(again), "archived campaign")
	require.Zero(t, hot(), "archived")
	archivedAudit, err := audit.ForPlan(e.ctx, e.pool, c.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, archivedAudit, "the audit of the archived campaign")
	_, err = e.svc.Resume(e.ctx, e.operator, id)
	require.Error(t, err, "an archived campaign never runs again")
	requireExactlyOnce(t, w, targets)
}
