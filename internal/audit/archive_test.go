package audit_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// The archive (docs/ARCHITECTURE.md, "The archive"): a finished campaign's
// attempts and answers leave the hot tables, and the audit, the export and
// the ledger's reads answer exactly as before.

func requireSQLState(t *testing.T, err error, code string, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want a PostgreSQL error, got %v", what, err)
	require.Equal(t, code, pgErr.Code, "%s: %s", what, pgErr.Message)
}

// targetKey is the key of plan's target at ordinal.
func targetKey(t *testing.T, ctx context.Context, db onceplan.DB, planID int64, ordinal int) string {
	t.Helper()
	var key string
	require.NoError(t, db.QueryRow(ctx, `SELECT t.key FROM frozen_plan() p JOIN list_target() t ON t.list_id = p.list_id
		WHERE p.id = $1 AND t.ordinal = $2`, planID, ordinal).Scan(&key))
	return key
}

// answers is what a reader of plan's ledger sees: the metric, the export
// of every target, and one attempt's history and raw answers.
func answers(t *testing.T, ctx context.Context, db onceplan.DB, planID int64) (audit.Metric, string, []ledger.Effect, []ledger.Response) {
	t.Helper()
	m, err := audit.ForPlan(ctx, db, planID)
	require.NoError(t, err)
	var csv bytes.Buffer
	require.NoError(t, audit.Export(ctx, db, planID, audit.ExportCSV, &csv))
	store := ledger.NewStore(db)
	history, err := store.History(ctx, ledger.Key(targetKey(t, ctx, db, planID, 1001)))
	require.NoError(t, err)
	require.NotEmpty(t, history)
	responses, err := store.Responses(ctx, history[0].ID)
	require.NoError(t, err)
	return m, csv.String(), history, responses
}

// finishedAndRunning is a database of its own (as its superuser and as the
// app role) with a finished seeded campaign of n targets, ready to be
// archived, and a running one of 1,000.
func finishedAndRunning(t *testing.T, n int) (admin, app *pgxpool.Pool, finished, running audittest.Seeded) {
	t.Helper()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin, app = pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	finished, err := audittest.Seed(ctx, admin, n)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(ctx, admin, finished))
	running, err = audittest.Seed(ctx, admin, 1000)
	require.NoError(t, err)
	return admin, app, finished, running
}

// keyBumps is a bumped key of plan's targets and how many bumps of them the
// hot table holds.
func keyBumps(t *testing.T, ctx context.Context, db onceplan.DB, planID int64) (ledger.Key, int64) {
	t.Helper()
	var key *string
	var n int64
	require.NoError(t, db.QueryRow(ctx, `SELECT min(b.key), count(*) FROM frozen_plan() p JOIN list_target() t ON t.list_id = p.list_id
		JOIN effect_bump b ON b.key = t.key WHERE p.id = $1`, planID).Scan(&key, &n))
	if key == nil {
		return "", n
	}
	return ledger.Key(*key), n
}

func TestArchivedCampaignAnswersAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, app, s, other := finishedAndRunning(t, 2000)

	var hot, hotAnswers int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM effect_response r JOIN effect e ON e.id = r.effect_id WHERE e.plan_id = $1)
		FROM effect WHERE plan_id = $1`, s.PlanID).Scan(&hot, &hotAnswers))
	m0, csv0, history0, responses0 := answers(t, ctx, app, s.PlanID)
	require.Len(t, history0, 2, "target 1001 failed once, then was done")
	bumpedKey, hotBumps := keyBumps(t, ctx, admin, s.PlanID)
	require.NotZero(t, hotBumps, "the seed bumps targets 8 and 1008")
	store := ledger.NewStore(app)
	bumps0, err := store.Bumps(ctx, bumpedKey)
	require.NoError(t, err)
	require.Len(t, bumps0, 1)
	_, otherBumps := keyBumps(t, ctx, admin, other.PlanID)
	otherMetric, err := audit.ForPlan(ctx, app, other.PlanID)
	require.NoError(t, err)

	// The command connects as the app role.
	a, err := store.ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.NoError(t, err)
	require.Equal(t, hot, a.Attempts)
	require.Equal(t, hotAnswers, a.Answers)
	require.Equal(t, hotBumps, a.Bumps)
	require.Equal(t, "ops@example.com", a.By)
	var left, archived int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM effect WHERE plan_id = $1), (SELECT count(*) FROM effect_archive WHERE plan_id = $1)`,
		s.PlanID).Scan(&left, &archived))
	require.Zero(t, left, "nothing of the campaign is left in the hot table")
	require.Equal(t, hot, archived)
	_, leftBumps := keyBumps(t, ctx, admin, s.PlanID)
	require.Zero(t, leftBumps, "the campaign's bumps left the hot table with its attempts")
	_, otherLeft := keyBumps(t, ctx, admin, other.PlanID)
	require.Equal(t, otherBumps, otherLeft, "another campaign's bumps stay")
	bumps1, err := store.Bumps(ctx, bumpedKey)
	require.NoError(t, err)
	require.Equal(t, bumps0, bumps1, "a key's bumps read as before")

	m1, csv1, history1, responses1 := answers(t, ctx, app, s.PlanID)
	require.Equal(t, m0, m1, "the audit answers as before")
	require.Equal(t, csv0, csv1, "the export lists every target as before")
	require.Equal(t, history0, history1)
	require.Equal(t, responses0, responses1)
	otherAfter, err := audit.ForPlan(ctx, app, other.PlanID)
	require.NoError(t, err)
	require.Equal(t, otherMetric, otherAfter, "another campaign is untouched")

	var recorded int64
	require.NoError(t, app.QueryRow(ctx, `SELECT attempts FROM campaign_archive WHERE campaign_id = $1`, s.CampaignID).Scan(&recorded))
	require.Equal(t, a.Attempts, recorded, "the archive's record of what moved")

	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	require.ErrorContains(t, err, "it is archived already")
	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, other.CampaignID, "ops@example.com")
	require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	require.ErrorContains(t, err, "it is running; only a completed or cancelled campaign is archived")
	_, err = admin.Exec(ctx, `UPDATE campaign SET state = 'completed' WHERE id = $1`, other.CampaignID)
	require.NoError(t, err)
	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, other.CampaignID, "ops@example.com")
	require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	require.ErrorContains(t, err, "attempts; they are settled or resolved before it is archived")
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM effect_archive WHERE plan_id = $1`, other.PlanID).Scan(&archived))
	require.Zero(t, archived, "a refused archive moves nothing")
}

// TestArchiveRulesAsTheAppRole tries, in plain SQL as the role the server
// runs as, what it never legitimately does with the archive.
func TestArchiveRulesAsTheAppRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, app, s, live := finishedAndRunning(t, 1000)
	var liveID int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT min(id) FROM effect WHERE plan_id = $1`, live.PlanID).Scan(&liveID))

	// Before any archive: no role deletes from the ledger.
	_, err := app.Exec(ctx, `DELETE FROM effect WHERE id = $1`, liveID)
	requireSQLState(t, err, "42501", "the app role deletes an attempt")
	_, err = admin.Exec(ctx, `DELETE FROM effect WHERE id = $1`, liveID)
	requireSQLState(t, err, "OP001", "the owner deletes an attempt outside an archive")
	_, err = admin.Exec(ctx, `DELETE FROM effect_response WHERE effect_id = $1`, liveID)
	requireSQLState(t, err, "OP001", "the owner deletes a raw answer outside an archive")
	_, err = app.Exec(ctx, `INSERT INTO campaign_archive (campaign_id, archived_by) VALUES ($1, 'x')`, s.CampaignID)
	requireSQLState(t, err, "42501", "the app role marks a campaign archived without moving it")
	_, err = app.Exec(ctx, `INSERT INTO effect_archive SELECT * FROM effect WHERE id = $1`, liveID)
	requireSQLState(t, err, "42501", "the app role writes the archive")
	liveBumped, _ := keyBumps(t, ctx, admin, live.PlanID)
	_, err = app.Exec(ctx, `DELETE FROM effect_bump WHERE key = $1`, liveBumped)
	requireSQLState(t, err, "42501", "the app role deletes a bump")
	_, err = admin.Exec(ctx, `DELETE FROM effect_bump WHERE key = $1`, liveBumped)
	requireSQLState(t, err, "OP001", "the owner deletes a bump outside an archive")
	bumpedKey, _ := keyBumps(t, ctx, admin, s.PlanID)

	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.NoError(t, err)
	var archivedID int64
	var archivedKey string
	require.NoError(t, admin.QueryRow(ctx, `SELECT id, key FROM effect_archive WHERE plan_id = $1 ORDER BY id LIMIT 1`, s.PlanID).Scan(&archivedID, &archivedKey))

	for _, sql := range []string{
		`UPDATE effect_archive SET state = 'revoked' WHERE id = $1`,
		`DELETE FROM effect_archive WHERE id = $1`,
		`DELETE FROM effect_response_archive WHERE effect_id = $1`,
	} {
		_, err = app.Exec(ctx, sql, archivedID)
		requireSQLState(t, err, "42501", "the app role: "+sql)
		_, err = admin.Exec(ctx, sql, archivedID)
		requireSQLState(t, err, "OP001", "and the archive is write-once for every role: "+sql)
	}
	// An archived campaign never runs again, by any path.
	for _, state := range []string{"running", "draft"} {
		_, err = app.Exec(ctx, `UPDATE campaign SET state = $2 WHERE id = $1`, s.CampaignID, state)
		requireSQLState(t, err, "OP002", "an archived campaign back to "+state)
	}
	// Its keys take no attempt outside a plan either, attempted or not
	// (target 7 was never started), and no bump.
	untried := targetKey(t, ctx, admin, s.PlanID, 7)
	for _, key := range []string{archivedKey, untried} {
		_, err = app.Exec(ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'w1')`, key)
		requireSQLState(t, err, "OP008", "an attempt outside any plan on an archived key")
	}
	for _, key := range []string{archivedKey, untried, string(bumpedKey)} {
		_, err = app.Exec(ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason)
			SELECT $1, coalesce(max(epoch), 0) + 1, 'human', 'user:x@example.com', 'again' FROM effect_bump WHERE key = $1`, key)
		requireSQLState(t, err, "OP008", "a bump of an archived key")
	}
	_, err = app.Exec(ctx, `DELETE FROM effect_bump_archive WHERE key = $1`, bumpedKey)
	requireSQLState(t, err, "42501", "the app role deletes an archived bump")
	_, err = admin.Exec(ctx, `DELETE FROM effect_bump_archive WHERE key = $1`, bumpedKey)
	requireSQLState(t, err, "OP001", "an archived bump is write-once for every role")
	// And the owner's archive of a live campaign is refused as well.
	_, err = admin.Exec(ctx, `SELECT archive_campaign($1, 'owner')`, live.CampaignID)
	requireSQLState(t, err, "OP002", "archiving a running campaign")
}

// TestBumpWaitsForAnArchiveUnderWay: a bump of a campaign's key made while
// the campaign is being archived waits for the archive, and is refused once
// it commits; it is not left in the hot table beside an archived campaign.
func TestBumpWaitsForAnArchiveUnderWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, app, s, _ := finishedAndRunning(t, 1000)
	key := targetKey(t, ctx, admin, s.PlanID, 1)

	archiving, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer archiving.Rollback(ctx)
	_, err = archiving.Exec(ctx, `SELECT archive_campaign($1, 'ops@example.com')`, s.CampaignID)
	require.NoError(t, err)

	bumped := make(chan error, 1)
	go func() {
		_, err := ledger.NewStore(app).Bump(ctx, ledger.BumpParams{Key: ledger.Key(key), ActorKind: ledger.ActorHuman,
			Actor: "user:x@example.com", Reason: "once more"})
		bumped <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%effect_bump%'`).Scan(&n))
		return n > 0
	}, time.Minute, 20*time.Millisecond, "the bump waits for the archive under way")
	require.NoError(t, archiving.Commit(ctx))

	err = <-bumped
	require.ErrorContains(t, err, "belongs to an archived campaign")
	var hot int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM effect_bump WHERE key = $1`, key).Scan(&hot))
	require.Zero(t, hot, "no bump of an archived key in the hot table")
}
