package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

// The archive decides "finished" from the ledger (docs/ARCHITECTURE.md,
// "The archive"): campaign.state is the server's role's to write.

var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// attackAt runs stmts as the role of app in one transaction at iso and
// returns PostgreSQL's refusal (a statement's, or the commit's); nil when
// every statement was accepted and committed.
func attackAt(t *testing.T, ctx context.Context, app *pgxpool.Pool, iso pgx.TxIsoLevel, stmts ...string) *pgconn.PgError {
	t.Helper()
	err := pgx.BeginTxFunc(ctx, app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		t.Fatalf("%v at %s: %v", stmts, iso, err)
	}
	return pgErr
}

// hotAttempts counts the attempts at the keys of plan's targets in the hot
// table, and archived ones.
func hotAttempts(t *testing.T, ctx context.Context, admin *pgxpool.Pool, planID int64) (hot, archived int64) {
	t.Helper()
	require.NoError(t, admin.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM plan p JOIN target t ON t.list_id = p.list_id JOIN effect e ON e.key = t.key WHERE p.id = $1),
		       (SELECT count(*) FROM plan p JOIN target t ON t.list_id = p.list_id JOIN effect_archive e ON e.key = t.key WHERE p.id = $1)`,
		planID).Scan(&hot, &archived))
	return hot, archived
}

// TestHostileArchiveOfAnUnfinishedCampaign: the server's role marks a
// running campaign completed while one of its targets was never tried,
// and archives it — in plain SQL, at every isolation level. PostgreSQL
// refuses the archive (the ledger shows a target with nothing final;
// REPEATABLE READ and SERIALIZABLE are refused outright, their snapshot
// may be older than a bump or a resume) and nothing moves. Completed, the
// campaign is not archived while anything is left to send — a target
// never tried, a key bumped since — and it is archived once every target
// has a final outcome: the ledger decides, not the state.
func TestHostileArchiveOfAnUnfinishedCampaign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	s, err := audittest.Seed(ctx, admin, 1000)
	require.NoError(t, err)
	require.NoError(t, audittest.Settle(ctx, admin, s)) // nothing pending or unknown; target 7 never tried
	untried := targetKey(t, ctx, admin, s.PlanID, 7)
	hot, _ := hotAttempts(t, ctx, admin, s.PlanID)

	forge := fmt.Sprintf(`UPDATE campaign SET state = 'completed' WHERE id = '%s'`, s.CampaignID)
	archive := fmt.Sprintf(`SELECT archive_campaign('%s', 'mallory')`, s.CampaignID)
	for _, iso := range isolationLevels {
		pgErr := attackAt(t, ctx, app, iso, forge, archive)
		require.NotNilf(t, pgErr, "a running campaign marked completed and archived at %s", iso)
		require.Equalf(t, "OP002", pgErr.Code, "at %s: %s", iso, pgErr.Message)
		if iso == pgx.ReadCommitted {
			require.Contains(t, pgErr.Message, "it is completed, but 1 of its targets (person7@example.com among them) has nothing final yet")
		} else {
			require.Contains(t, pgErr.Message, "archived at READ COMMITTED only")
		}
		left, archived := hotAttempts(t, ctx, admin, s.PlanID)
		require.Equal(t, hot, left, "a refused archive moves nothing (%s)", iso)
		require.Zero(t, archived)
	}

	// The state forged and committed alone: still not archived, and the
	// campaign may still be resumed (completed is not the end).
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, forge))
	store := ledger.NewStore(app)
	_, err = store.ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	require.ErrorContains(t, err, "resume it to send them, and archive it once it completes")

	// Resumed, the untried target is sent and fails for good (no retries
	// left); a done target's key is bumped meanwhile: its new epoch has
	// nothing final, so the completed campaign is still refused.
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, fmt.Sprintf(`UPDATE campaign SET state = 'running' WHERE id = '%s'`, s.CampaignID)))
	c, err := store.Claim(ctx, ledger.ClaimParams{Key: ledger.Key(untried), Owner: "w1", PlanID: s.PlanID, Ordinal: 7})
	require.NoError(t, err)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte("421 try later"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateFailed, Failure: ledger.FailureExhausted,
		Reason: "421 try later (no retries left after 8 attempts)"})
	require.NoError(t, err)
	bumped := targetKey(t, ctx, admin, s.PlanID, 10)
	_, err = store.Bump(ctx, ledger.BumpParams{Key: ledger.Key(bumped), ActorKind: ledger.ActorHuman, Actor: "user:ann@example.com", Reason: "send it again"})
	require.NoError(t, err)
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, forge))
	_, err = store.ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.ErrorContains(t, err, "1 of its targets (person10@example.com among them) has nothing final yet")

	// Sent again at its new epoch: every target is final — done, failed
	// for good (rejected, exhausted), stranded, revoked — and the
	// completed campaign is archived.
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, fmt.Sprintf(`UPDATE campaign SET state = 'running' WHERE id = '%s'`, s.CampaignID)))
	c, err = store.Claim(ctx, ledger.ClaimParams{Key: ledger.Key(bumped), Owner: "w1", PlanID: s.PlanID, Ordinal: 10})
	require.NoError(t, err)
	require.Equal(t, 1, c.Effect.Epoch)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte("250 ok"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r-again"})
	require.NoError(t, err)
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, forge))
	before, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)
	require.Zero(t, before.Missing)
	a, err := store.ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.NoError(t, err)
	require.Equal(t, hot+2, a.Attempts)
	after, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, after, "the audit answers as before")
}

// TestArchiveOfACancelledCampaignKeepsWhatWasNotSent: a cancel is a
// person's decision, which the server's role records — so it can record
// one nobody made, and a cancelled campaign is archived with targets never
// sent (a cancelled campaign never runs again, archived or not). The
// archive loses nothing a person needs to know: the audit of the archived
// campaign names the targets that got nothing, and does not hold.
func TestArchiveOfACancelledCampaignKeepsWhatWasNotSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	s, err := audittest.Seed(ctx, admin, 1000)
	require.NoError(t, err)
	require.NoError(t, audittest.Settle(ctx, admin, s))
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted, fmt.Sprintf(`UPDATE campaign SET state = 'cancelled' WHERE id = '%s'`, s.CampaignID)))
	before, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)

	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.NoError(t, err)
	after, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, 1, after.Missing, "target 7 got nothing")
	require.False(t, after.Holds)
	require.Contains(t, fmt.Sprint(after.Reasons), "1 target has no effect of its own", "and says so")
}

// TestArchiveTakesAttemptsOutsideAnyPlan: attempts outside any plan on a
// finished campaign's keys (one settled done on a key the campaign never
// tried, one left pending on a key it failed) used to keep the campaign
// from being archived for ever. The server's role can no longer write
// one (an attempt outside any plan is a tool call's, after its intent);
// a database from before holds them, written here as the schema's owner.
// They go to the archive with the campaign: nothing of its keys stays in
// the hot table, the audit — which counts such attempts as outside the
// plan — answers as before, and the ledger's reads by key find them.
func TestArchiveTakesAttemptsOutsideAnyPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin, owner, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.Owner), pgtest.NewPool(t, urls.App)
	s, err := audittest.Seed(ctx, admin, 1000)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(ctx, admin, s))
	untried, rejected := targetKey(t, ctx, admin, s.PlanID, 7), targetKey(t, ctx, admin, s.PlanID, 5)
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		refused := attackAt(t, ctx, app, iso, fmt.Sprintf(`INSERT INTO effect (key, owner) VALUES ('%s', 'mallory')`, rejected))
		require.NotNil(t, refused, "the server's role writes no attempt outside any plan on a campaign's key, at %s", iso)
		require.Equal(t, "OP007", refused.Code, refused.Message)
	}
	require.Nil(t, attackAt(t, ctx, owner, pgx.ReadCommitted, fmt.Sprintf(`INSERT INTO effect (key, owner) VALUES ('%s', 'mallory')`, rejected)))
	require.Nil(t, attackAt(t, ctx, owner, pgx.ReadCommitted,
		fmt.Sprintf(`INSERT INTO effect (key, owner) VALUES ('%s', 'mallory')`, untried),
		fmt.Sprintf(`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'ok' FROM effect WHERE key = '%s'`, untried),
		fmt.Sprintf(`UPDATE effect SET state = 'done', receipt = 'forged' WHERE key = '%s'`, untried)))
	before, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)
	require.Equal(t, 2, before.Outside, "both keys are held outside the plan")
	hot, _ := hotAttempts(t, ctx, admin, s.PlanID)

	a, err := ledger.NewStore(app).ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.NoError(t, err)
	require.Equal(t, hot, a.Attempts, "every attempt at its keys moved, those outside the plan too")
	left, archived := hotAttempts(t, ctx, admin, s.PlanID)
	require.Zero(t, left, "nothing of its keys is left hot")
	require.Equal(t, hot, archived)
	after, err := audit.ForPlan(ctx, app, s.PlanID)
	require.NoError(t, err)
	require.Equal(t, before, after, "the audit answers as before")
	history, err := ledger.NewStore(app).History(ctx, ledger.Key(untried))
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, ledger.StateDone, history[0].State)
	require.Equal(t, "forged", history[0].Receipt)
}

// TestArchiveRefusesACampaignALegacyToolCallHolds: in a database from
// before single effects had a key space of their own (written at migration
// 0025), a tool call holds the key of a target a campaign never tried; the
// campaign is then finished. That attempt is its tool call's (the call's
// record and trail point at it), so it does not move: the archive is
// refused, naming the key, and nothing moves. (No call begun since can
// hold a campaign's key.)
func TestArchiveRefusesACampaignALegacyToolCallHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urls := pgtest.Database(t)
	admin, owner, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.Owner), pgtest.NewPool(t, urls.App)
	s, err := audittest.Seed(ctx, admin, 1000)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(ctx, admin, s))
	key := targetKey(t, ctx, admin, s.PlanID, 7)
	identity, err := ledger.CanonicalJSON(ledger.KeyInput{Event: s.CampaignID, Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "person7@example.com"}})
	require.NoError(t, err)

	_, err = migrations.DownTo(ctx, owner, 25)
	require.NoError(t, err)
	require.Nil(t, attackAt(t, ctx, app, pgx.ReadCommitted,
		`INSERT INTO tool_policy (tool, registered_by) VALUES ('email.send', 'agent:ann@example.com') ON CONFLICT DO NOTHING`,
		fmt.Sprintf(`INSERT INTO tool_call (key, identity, tool, event, args, created_by) VALUES ('%s', '%s', 'email.send', '%s', '{}', 'agent:ann@example.com')`,
			key, identity, s.CampaignID),
		fmt.Sprintf(`INSERT INTO effect (key, owner) VALUES ('%s', 'agent:ann@example.com')`, key),
		fmt.Sprintf(`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:ann@example.com', now() + interval '1 minute' FROM effect WHERE key = '%s'`, key),
		fmt.Sprintf(`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'ok' FROM effect WHERE key = '%s'`, key),
		fmt.Sprintf(`UPDATE effect SET state = 'done', receipt = 'agent-1' WHERE key = '%s'`, key)))
	_, err = migrations.Up(ctx, owner)
	require.NoError(t, err)
	hot, _ := hotAttempts(t, ctx, admin, s.PlanID)

	_, err = ledger.NewStore(app).ArchiveCampaign(ctx, s.CampaignID, "ops@example.com")
	require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	require.ErrorContains(t, err, "the key "+key+" of one of its targets is held by a tool call begun before single effects had a key space of their own")
	left, archived := hotAttempts(t, ctx, admin, s.PlanID)
	require.Equal(t, hot, left, "nothing moved")
	require.Zero(t, archived)
}
