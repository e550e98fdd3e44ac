package jobs_test

// The gate in the database (docs/ARCHITECTURE.md, "The gate"): the role
// serve runs as tried, in plain SQL, to record an attempt at a target the
// plan excludes (its address suppressed, its campaign never started or
// cancelled) and a suppressed outcome for a target whose address is not
// suppressed. PostgreSQL refuses each, at every isolation level and from
// an old snapshot; and the workers, run afterwards with maintenance, send
// nothing to those people — counted at the receiver.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
)

var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// gateRefused is the SQLSTATE of the gate's refusals.
const gateRefused = "OP008"

// target is a campaign's planned target, as the attacker reads it.
type target struct {
	plan    int64
	ordinal int
	address string
	key     string
}

func (w *world) target(t *testing.T, campaign string, ordinal int) target {
	t.Helper()
	tg := target{ordinal: ordinal}
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT p.id, t.target, t.key FROM campaign c JOIN plan p ON p.id = c.plan_id
		JOIN target t ON t.list_id = p.list_id AND t.ordinal = $2 WHERE c.id = $1`, campaign, ordinal).Scan(&tg.plan, &tg.address, &tg.key))
	return tg
}

// forgedAttempt is the review's statement: an attempt at the target's key,
// as a worker's claim would write it.
func forgedAttempt(tg target) string {
	return fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'x', %d, %d)`, tg.key, tg.plan, tg.ordinal)
}

// attackAt runs stmt as the application role in a transaction at iso and
// returns PostgreSQL's refusal (nil when it was accepted and committed).
func attackAt(t *testing.T, app *pgxpool.Pool, iso pgx.TxIsoLevel, stmt string) *pgconn.PgError {
	t.Helper()
	err := pgx.BeginTxFunc(context.Background(), app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), stmt)
		return err
	})
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		t.Fatalf("%s at %s: %v", stmt, iso, err)
	}
	return pgErr
}

// beginAt begins a transaction at iso on a connection of its own, rolled
// back and released when the test ends, whatever it asserted.
func beginAt(t *testing.T, app *pgxpool.Pool, iso pgx.TxIsoLevel) pgx.Tx {
	t.Helper()
	conn, err := app.Acquire(context.Background())
	require.NoError(t, err)
	tx, err := conn.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: iso})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		conn.Release()
	})
	return tx
}

func (w *world) refusedEverywhere(t *testing.T, app *pgxpool.Pool, stmt string) {
	t.Helper()
	for _, iso := range isolationLevels {
		pgErr := attackAt(t, app, iso, stmt)
		require.NotNilf(t, pgErr, "%s at %s: accepted", stmt, iso)
		require.Equalf(t, gateRefused, pgErr.Code, "%s at %s: %s", stmt, iso, pgErr.Message)
	}
}

func (w *world) attemptsAt(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM effect WHERE key = $1`, key).Scan(&n))
	return n
}

// TestHostileAttemptForSomeoneThePlanExcludes: an attempt at a suppressed
// address's target (an approved campaign never started, and a running
// one), and at a cancelled campaign's target, is refused; once the
// workers and maintenance have run, neither person got anything.
func TestHostileAttemptForSomeoneThePlanExcludes(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hook.Close)
	const maintenance = 200 * time.Millisecond
	w := newWorld(t, jobs.Config{MaintenanceInterval: maintenance}, "hook="+hook.URL())
	app := pgtest.NewPool(t, w.urls.App)

	// Every campaign of the world has the addresses t0000@…, t0001@… in
	// order: t0000 and t0001 are suppressed after the imports.
	never := w.approved(t, "hook", 2)
	running := w.running(t, "hook", 3)
	cancelled := w.running(t, "hook", 3)
	_, err := w.svc.Cancel(w.ctx, w.operator, cancelled, "wrong list")
	require.NoError(t, err)
	suppressedNever, suppressedRunning := w.target(t, never, 1), w.target(t, running, 2)
	for _, a := range []string{suppressedNever.address, suppressedRunning.address} {
		_, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: a, Reason: suppression.Unsubscribed,
			Source: suppression.FromActor, Actor: "ops@example.com"})
		require.NoError(t, err)
	}
	ofCancelled := w.target(t, cancelled, 3)
	notStarted := w.target(t, never, 2)

	for _, tg := range []target{suppressedNever, suppressedRunning, ofCancelled, notStarted} {
		w.refusedEverywhere(t, app, forgedAttempt(tg))
		require.Zero(t, w.attemptsAt(t, tg.key), "nothing recorded for %s", tg.address)
	}

	// The workers and maintenance run: the running campaign sends its one
	// address not suppressed; nobody else gets anything.
	w.start(t)
	await.Until(t, time.Minute, "the running campaign to complete", func() bool { return w.campaignState(t, running) == approval.StateCompleted })
	time.Sleep(5 * maintenance) // maintenance would recover a forged attempt within a round or two
	got := map[string]int{}
	for _, e := range hook.Effects() {
		got[e.Target]++
	}
	require.Equal(t, map[string]int{w.target(t, running, 3).address: 1}, got, "effects at the receiver")
}

// TestHostileAttemptFromAnOldSnapshot: a transaction that read the
// campaign as running, then a pause or a cancel committed by someone else,
// then the attempt: refused at every isolation level (at READ COMMITTED
// the gate reads the campaign as it is now; at the others the snapshot is
// older than the decision, so the row is refused outright).
func TestHostileAttemptFromAnOldSnapshot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	app := pgtest.NewPool(t, w.urls.App)
	for _, stop := range []string{"pause", "cancel"} {
		for _, iso := range isolationLevels {
			id := w.running(t, "outbox", 2)
			tg := w.target(t, id, 1)
			tx := beginAt(t, app, iso)
			var state string
			require.NoError(t, tx.QueryRow(w.ctx, `SELECT state FROM campaign WHERE id = $1`, id).Scan(&state))
			require.Equal(t, "running", state)

			var err error
			if stop == "pause" {
				_, err = w.svc.Pause(w.ctx, w.operator, id, "checking")
			} else {
				_, err = w.svc.Cancel(w.ctx, w.operator, id, "wrong list")
			}
			require.NoError(t, err)

			_, err = tx.Exec(w.ctx, forgedAttempt(tg))
			var pgErr *pgconn.PgError
			require.Truef(t, errors.As(err, &pgErr), "after a %s, at %s: %v", stop, iso, err)
			require.Equalf(t, gateRefused, pgErr.Code, "after a %s, at %s: %s", stop, iso, pgErr.Message)
			require.Zero(t, w.attemptsAt(t, tg.key), "after a %s, at %s", stop, iso)
		}
	}
}

// TestPauseWaitsForTheClaimsInFlight: a claim not yet committed holds the
// plan's gate; a pause waits for it, and an attempt after the pause is
// refused — the decision and the claims are ordered by a lock, never by
// timing.
func TestPauseWaitsForTheClaimsInFlight(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	app := pgtest.NewPool(t, w.urls.App)
	id := w.running(t, "outbox", 2)
	first, second := w.target(t, id, 1), w.target(t, id, 2)

	tx := beginAt(t, app, pgx.ReadCommitted)
	_, err := tx.Exec(w.ctx, forgedAttempt(first))
	require.NoError(t, err, "the gate is open: a claim goes in")
	paused := make(chan error, 1)
	go func() {
		_, err := w.svc.Pause(w.ctx, w.operator, id, "checking")
		paused <- err
	}()
	await.Until(t, time.Minute, "the pause waiting for the claim to commit", func() bool {
		var waiting bool
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Commit(w.ctx))
	require.NoError(t, await.Recv(t, paused, time.Minute, "the pause after the claim committed"))
	require.Equal(t, approval.StatePaused, w.campaignState(t, id))

	pgErr := attackAt(t, app, pgx.ReadCommitted, forgedAttempt(second))
	require.NotNil(t, pgErr, "an attempt after the pause")
	require.Equal(t, gateRefused, pgErr.Code, pgErr.Message)
	require.Equal(t, 1, w.attemptsAt(t, first.key))
	require.Zero(t, w.attemptsAt(t, second.key))
}

// forgedSuppressed is a suppressed outcome for tg citing suppression entry
// id, as the claim's statement writes one.
func forgedSuppressed(tg target, id int64) string {
	return fmt.Sprintf(`INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner) VALUES (%d, %d, '%s', %d, 'x')`,
		tg.plan, tg.ordinal, tg.key, id)
}

// TestHostileSuppressedOutcomeForSomeoneThePlanIncludes: a suppressed
// outcome citing another address's entry, or an entry of the target's
// address that was taken off, is refused at every isolation level, also
// from a snapshot older than the removal; the target is then sent, once.
func TestHostileSuppressedOutcomeForSomeoneThePlanIncludes(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{}, "hook="+hook.URL())
	app := pgtest.NewPool(t, w.urls.App)
	id := w.approved(t, "hook", 2)
	first, second := w.target(t, id, 1), w.target(t, id, 2)
	add := func(address string) int64 {
		e, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: address, Reason: suppression.Complaint,
			Source: suppression.FromActor, Actor: "ops@example.com"})
		require.NoError(t, err)
		return e.ID
	}
	other := add("someone-else@example.com")
	w.refusedEverywhere(t, app, forgedSuppressed(first, other))

	// A transaction that saw an entry of the target's address in force,
	// then its removal by an admin, then the outcome: refused.
	var removed int64
	for _, iso := range isolationLevels {
		removed = add(second.address)
		tx := beginAt(t, app, iso)
		var inForce *int64
		require.NoError(t, tx.QueryRow(w.ctx, `SELECT onceplan_suppressed($1)`, second.address).Scan(&inForce))
		require.Equal(t, &removed, inForce)
		_, err := suppression.Remove(w.ctx, w.pool, second.address, "admin@example.com", "asked to be mailed again")
		require.NoError(t, err)
		_, err = tx.Exec(w.ctx, forgedSuppressed(second, removed))
		var pgErr *pgconn.PgError
		require.Truef(t, errors.As(err, &pgErr), "at %s: %v", iso, err)
		require.Equalf(t, gateRefused, pgErr.Code, "at %s: %s", iso, pgErr.Message)
	}
	w.refusedEverywhere(t, app, forgedSuppressed(second, removed))
	var outcomes int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM target_suppressed`).Scan(&outcomes))
	require.Zero(t, outcomes)

	// Neither target was skipped: each gets its one effect.
	_, err := w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	w.start(t)
	await.Until(t, time.Minute, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 2)
}

// TestRemovalWaitsForASuppressedOutcomeInFlight: a suppressed outcome not
// yet committed holds its address's lock; a removal waits for it, and an
// outcome citing the entry after the removal is refused.
func TestRemovalWaitsForASuppressedOutcomeInFlight(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	app := pgtest.NewPool(t, w.urls.App)
	id := w.running(t, "outbox", 1)
	tg := w.target(t, id, 1)
	e, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: tg.address, Reason: suppression.Complaint,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)

	tx := beginAt(t, app, pgx.ReadCommitted)
	_, err = tx.Exec(w.ctx, forgedSuppressed(tg, e.ID))
	require.NoError(t, err, "an entry in force for the target's own address")
	removed := make(chan error, 1)
	go func() {
		_, err := suppression.Remove(w.ctx, w.pool, tg.address, "admin@example.com", "asked to be mailed again")
		removed <- err
	}()
	await.Until(t, time.Minute, "the removal waiting for the outcome's lock", func() bool {
		var waiting bool
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Rollback(w.ctx))
	require.NoError(t, await.Recv(t, removed, time.Minute, "the removal after the outcome ended"))
	pgErr := attackAt(t, app, pgx.ReadCommitted, forgedSuppressed(tg, e.ID))
	require.NotNil(t, pgErr, "an outcome citing a removed entry")
	require.Equal(t, gateRefused, pgErr.Code, pgErr.Message)
}

// TestHostileRemovalInSomeoneElsesName: the server's role takes an address
// off the list only in the name of an enabled admin; the schema's owner
// (the command line) in any name.
func TestHostileRemovalInSomeoneElsesName(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	app := pgtest.NewPool(t, w.urls.App)
	owner := pgtest.NewPool(t, w.urls.Owner)
	pgtest.User(t, w.pool, pgtest.UserOpts{Email: "admin@example.com", Roles: []string{"admin"}})
	gone := pgtest.User(t, w.pool, pgtest.UserOpts{Email: "former-admin@example.com", Roles: []string{"admin"}})
	_, err := w.pool.Exec(w.ctx, `UPDATE app_user SET disabled_at = now() WHERE id = $1`, gone)
	require.NoError(t, err)
	add := func() {
		_, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: "ann@example.com", Reason: suppression.Unsubscribed,
			Source: suppression.FromUnsubscribe})
		require.NoError(t, err)
	}
	add()
	for _, actor := range []string{"mallory", "operator@example.com", "former-admin@example.com"} {
		_, err := suppression.Remove(w.ctx, app, "ann@example.com", actor, "because")
		var pgErr *pgconn.PgError
		require.Truef(t, errors.As(err, &pgErr), "in the name of %s: %v", actor, err)
		require.Equal(t, "OP006", pgErr.Code, pgErr.Message)
		_, held, err := suppression.Lookup(w.ctx, w.pool, "ann@example.com")
		require.NoError(t, err)
		require.True(t, held, "still suppressed after a removal in the name of %s", actor)
	}
	_, err = suppression.Remove(w.ctx, app, "ann@example.com", "admin@example.com", "asked to be mailed again")
	require.NoError(t, err)
	add()
	_, err = suppression.Remove(w.ctx, owner, "ann@example.com", "root@ops-host", "asked to be mailed again")
	require.NoError(t, err)
}

// TestTargetSuppressionIsTheDatabasesRule: the claim's statement and
// PostgreSQL's own check of an attempt state one rule, "the oldest entry
// of the address without a removal" (the function target_suppression,
// over a plan target's address, inlined into the claim, and the function
// onceplan_suppressed): they agree for an address never listed, listed,
// listed twice, taken off and listed again.
func TestTargetSuppressionIsTheDatabasesRule(t *testing.T) {
	t.Parallel()
	w := newWorld(t, jobs.Config{}, "outbox=maildir://"+t.TempDir())
	campaign := w.approved(t, "outbox", 2)
	ann, bob := w.target(t, campaign, 1), w.target(t, campaign, 2)
	agree := func(tg target) *int64 {
		t.Helper()
		var ofTarget, ofAddress *int64
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT (SELECT suppression_id FROM target_suppression($1, $2)), onceplan_suppressed($3)`,
			tg.plan, tg.ordinal, tg.address).Scan(&ofTarget, &ofAddress))
		require.Equal(t, ofAddress, ofTarget, "for %s", tg.address)
		return ofAddress
	}
	add := func(address string) {
		_, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: address, Reason: suppression.Manual,
			Source: suppression.FromActor, Actor: "ops@example.com"})
		require.NoError(t, err)
	}
	require.Nil(t, agree(ann))
	add(ann.address)
	first := agree(ann)
	require.NotNil(t, first)
	_, err := w.pool.Exec(w.ctx, `INSERT INTO suppression (address, reason, source) VALUES ($1, 'complaint', 'actor')`, ann.address)
	require.NoError(t, err)
	require.Equal(t, first, agree(ann), "the oldest entry in force")
	_, err = suppression.Remove(w.ctx, w.pool, ann.address, "admin@example.com", "asked to be mailed again")
	require.NoError(t, err)
	require.Nil(t, agree(ann))
	add(ann.address)
	require.NotNil(t, agree(ann))
	require.Nil(t, agree(bob))
}
