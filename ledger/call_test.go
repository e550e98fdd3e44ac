package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// callProvider is the provider of audittest's campaigns, and so of their
// calls.
const callProvider = "outbox"

// claimReqs is a claim request per plan target, for owner and job 9.
func claimReqs(owner string, targets ...audittest.Target) []ledger.ClaimRequest {
	out := make([]ledger.ClaimRequest, len(targets))
	for i, t := range targets {
		out[i] = ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: t.Key, Owner: owner, JobID: 9, PlanID: t.PlanID, Ordinal: t.Ordinal}}
	}
	return out
}

// running is a running campaign of n targets on pool (the superuser's).
func running(t *testing.T, pool *pgxpool.Pool, n int) audittest.Campaign {
	t.Helper()
	return audittest.NewFixture(t, pool).Campaign(fmt.Sprintf("calls %s", t.Name()), audittest.Addresses(n))
}

// TestClaimCallStoresTheCallWithItsClaims: the attempts a call's claim won
// and the call that carries them — its key, its exact bytes and its
// attempts in the requests' order — are one commit; a key already held is
// not won and is not in the call.
func TestClaimCallStoresTheCallWithItsClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := running(t, b.pool, 3)
	t1, held, t3 := c.Targets[0], c.Targets[1], c.Targets[2]
	k1, k3 := t1.Key, t3.Key
	_, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: held.Key, Owner: "other", JobID: 1, PlanID: held.PlanID, Ordinal: held.Ordinal})
	require.NoError(t, err)

	var composed []ledger.Key
	call, won, err := b.store.ClaimCall(b.ctx, callProvider, claimReqs("w1", t3, held, t1), ledger.Gate{}, func(won []ledger.Effect) (string, []byte, error) {
		for _, e := range won {
			composed = append(composed, e.Key)
		}
		return "call-key-1", []byte(`[{"to":"c"},{"to":"a"}]`), nil
	})
	require.NoError(t, err)
	require.Equal(t, []ledger.Key{k3, k1}, composed, "compose gets the attempts won, in the requests' order")
	require.Len(t, won, 2)
	require.Equal(t, []int64{won[0].ID, won[1].ID}, call.Members)

	got, pos, err := b.store.CallOf(b.ctx, won[1].ID)
	require.NoError(t, err)
	require.Equal(t, 1, pos)
	require.Equal(t, "call-key-1", got.Key)
	require.Equal(t, `[{"to":"c"},{"to":"a"}]`, string(got.Request), "the exact bytes are stored")
	require.Equal(t, callProvider, got.Provider)
	require.Equal(t, c.PlanID, got.PlanID, "the call names its plan")
	require.Equal(t, call.Members, got.Members)

	members, err := b.store.Members(b.ctx, got)
	require.NoError(t, err)
	require.Equal(t, []ledger.Key{k3, k1}, []ledger.Key{members[0].Key, members[1].Key})

	_, _, err = b.store.CallOf(b.ctx, 1<<40)
	require.Error(t, err, "an attempt no call carried")
}

// TestClaimCallClaimsNothingWhenTheCallCannotBeComposed: a call that cannot
// be built rolls its claims back: the keys stay free.
func TestClaimCallClaimsNothingWhenTheCallCannotBeComposed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	camp := running(t, b.pool, 2)
	_, _, err := b.store.ClaimCall(b.ctx, callProvider, claimReqs("w1", camp.Targets...), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "", nil, errors.New("cannot encode")
	})
	require.ErrorContains(t, err, "cannot encode")
	for _, tg := range camp.Targets {
		c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: tg.Key, Owner: "w2", JobID: 2, PlanID: tg.PlanID, Ordinal: tg.Ordinal})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimWon, c.Outcome, "the failed call left no attempt behind")
		require.Equal(t, 1, c.Effect.Attempt)
	}
}

// TestAnswerCallRecordsOneAnswerForEveryAttempt: a call's answer is stored
// once; each attempt's raw answer is that answer, with its position, and
// the settles commit with it.
func TestAnswerCallRecordsOneAnswerForEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	camp := running(t, b.pool, 2)
	call, won, err := b.store.ClaimCall(b.ctx, callProvider, claimReqs("w1", camp.Targets...), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "", []byte("request"), nil
	})
	require.NoError(t, err)
	answer := []byte(`{"data":[{"id":"a"}],"errors":[{"index":1,"message":"bad"}]}`)
	settled, err := b.store.AnswerCall(b.ctx, call.ID, ledger.ResponseSend, answer, call.Members, []ledger.SettleParams{
		{EffectID: won[0].ID, State: ledger.StateDone, Receipt: "a"},
		{EffectID: won[1].ID, State: ledger.StateFailed, Reason: "bad", Failure: ledger.FailureRejected},
	})
	require.NoError(t, err)
	require.ElementsMatch(t, call.Members, settled)

	for pos, id := range call.Members {
		rs, err := b.store.Responses(b.ctx, id)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, string(answer), string(rs[0].Body), "the call's one answer")
		require.Equal(t, call.ID, rs[0].Call)
		require.Equal(t, pos, rs[0].Position)
	}
	var stored int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effect_batch_response WHERE batch_id = $1`, call.ID).Scan(&stored))
	require.Equal(t, 1, stored, "stored once, not once per attempt")

	var latest []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT body FROM effect_latest_response($1)`, won[1].ID).Scan(&latest))
	require.Equal(t, string(answer), string(latest), "the published read gives the call's answer too")

	// A second answer for the same call (a concurrent recovery's) is
	// recorded; the settles it brings for attempts settled meanwhile are
	// skipped.
	_, err = b.store.AnswerCall(b.ctx, call.ID, ledger.ResponseResend, answer, call.Members, []ledger.SettleParams{
		{EffectID: won[0].ID, State: ledger.StateDone, Receipt: "a"},
	})
	require.NoError(t, err)
	rs, err := b.store.Responses(b.ctx, won[0].ID)
	require.NoError(t, err)
	require.Len(t, rs, 2)
}

// TestBatchCallRulesAsTheAppRole: what the server never does to a call,
// PostgreSQL refuses to the role it runs as, in plain SQL: a call carrying
// an attempt of an earlier transaction (it may have been sent already, and
// a new key would send it again), an attempt in two calls, a position past
// the call's size, a change to anything recorded, and an attempt's pointer
// to an answer of a call that did not carry it, or with bytes of its own.
func TestBatchCallRulesAsTheAppRole(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	ctx := context.Background()
	store := ledger.NewStore(admin)
	c := running(t, admin, 5)
	attempt := func(i int) string {
		tg := c.Targets[i]
		return fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'w1', %d, %d)`, tg.Key, tg.PlanID, tg.Ordinal)
	}

	// An attempt claimed and committed earlier, and a call of its own.
	earlier, err := store.Claim(ctx, ledger.ClaimParams{Key: c.Targets[0].Key, Owner: "w1", JobID: 1, PlanID: c.PlanID, Ordinal: c.Targets[0].Ordinal})
	require.NoError(t, err)
	call, won, err := store.ClaimCall(ctx, callProvider, claimReqs("w1", c.Targets[1]), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "k-1", []byte("request"), nil
	})
	require.NoError(t, err)
	_, err = store.AnswerCall(ctx, call.ID, ledger.ResponseSend, []byte("answer"), call.Members, nil)
	require.NoError(t, err)
	var answerID int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT id FROM effect_batch_response WHERE batch_id = $1`, call.ID).Scan(&answerID))

	refused := func(code, what string, sql string, args ...any) {
		t.Helper()
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO effect_batch (provider, plan_id, call_key, request, size) VALUES ($1, $2, '', 'x', 2)`, callProvider, c.PlanID)
			require.NoError(t, err, "the app role may store a call")
			_, err = tx.Exec(ctx, sql, args...)
			return err
		})
		requireSQLState(t, err, code, what)
	}
	refused("OP004", "an attempt of an earlier transaction",
		`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (currval(pg_get_serial_sequence('effect_batch', 'id')), 0, $1)`, earlier.Effect.ID)
	refused("23505", "an attempt in two calls", `
		WITH e AS (`+attempt(2)+` RETURNING id),
		     first AS (INSERT INTO effect_batch_member (batch_id, position, effect_id)
		               SELECT currval(pg_get_serial_sequence('effect_batch', 'id')), 0, id FROM e RETURNING effect_id),
		     second AS (INSERT INTO effect_batch (provider, plan_id, call_key, request, size) VALUES ($1, $2, '', 'y', 1) RETURNING id)
		INSERT INTO effect_batch_member (batch_id, position, effect_id) SELECT second.id, 0, first.effect_id FROM first, second`, callProvider, c.PlanID)
	refused("OP004", "a position past the call's size", `
		WITH e AS (`+attempt(3)+` RETURNING id)
		INSERT INTO effect_batch_member (batch_id, position, effect_id)
		SELECT currval(pg_get_serial_sequence('effect_batch', 'id')), 2, id FROM e`)

	for _, sql := range []string{
		`UPDATE effect_batch SET request = 'other' WHERE id = $1`,
		`DELETE FROM effect_batch WHERE id = $1`,
		`UPDATE effect_batch_member SET position = 5 WHERE batch_id = $1`,
		`DELETE FROM effect_batch_member WHERE batch_id = $1`,
		`UPDATE effect_batch_response SET body = 'other' WHERE batch_id = $1`,
		`DELETE FROM effect_batch_response WHERE batch_id = $1`,
	} {
		_, err := app.Exec(ctx, sql, call.ID)
		requireSQLState(t, err, "42501", "the app role has no such privilege: "+sql)
		_, err = admin.Exec(ctx, sql, call.ID)
		requireSQLState(t, err, "OP001", "and the rows are write-once for every role: "+sql)
	}
	_, err = app.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body, batch_response_id) VALUES ($1, 'send', '', $2)`, earlier.Effect.ID, answerID)
	requireSQLState(t, err, "OP004", "an answer of a call that did not carry the attempt")
	_, err = app.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body, batch_response_id) VALUES ($1, 'send', 'mine', $2)`, won[0].ID, answerID)
	requireSQLState(t, err, "OP004", "bytes of its own beside the call's answer")
	_, err = app.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body, batch_response_id) VALUES ($1, 'resend', '', $2)`, won[0].ID, answerID)
	requireSQLState(t, err, "OP004", "another kind than the answer's")

	var request []byte
	require.NoError(t, admin.QueryRow(ctx, `SELECT request FROM effect_batch WHERE id = $1`, call.ID).Scan(&request))
	require.Equal(t, "request", string(request), "nothing changed")
}

// isolationLevels are the levels every rule holds at.
var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// refusedAt runs stmts as the application role in one transaction at iso
// and returns PostgreSQL's refusal (nil when every statement was accepted
// and the transaction committed).
func refusedAt(t *testing.T, app *pgxpool.Pool, iso pgx.TxIsoLevel, stmts ...string) *pgconn.PgError {
	t.Helper()
	ctx := context.Background()
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
		t.Fatalf("at %s: %v", iso, err)
	}
	return pgErr
}

// TestBatchCallBoundToItsMembersAsTheAppRole: the rules that bind a call
// to its attempts (migration 0036), tried in plain SQL as the role the
// server runs as, at READ COMMITTED, REPEATABLE READ and SERIALIZABLE. The
// role writes calls (so it may store one of its own plan's targets, through
// that plan's provider, in one transaction), but never:
//   - a call through another provider than its plan's, or naming no plan;
//   - a call carrying a target of another plan (two campaigns in one call);
//   - an attempt added to a call another transaction committed;
//   - a send answer of its own for an attempt a call carried, on which it
//     could then be settled — before the call is stored or after;
//   - a call carrying fewer attempts than its size.
//
// At REPEATABLE READ and SERIALIZABLE an attempt at a plan's target is
// refused outright (the gate, OP008: it is recorded at READ COMMITTED
// only); the rules that need none are refused there by their own check.
func TestBatchCallBoundToItsMembersAsTheAppRole(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	ctx := context.Background()
	fx := audittest.NewFixture(t, admin)
	a := fx.Campaign("campaign A", audittest.Addresses(24))
	b := fx.Campaign("campaign B", audittest.Addresses(24))
	next := 0 // the next target of A no attempt has touched
	attemptAt := func(tg audittest.Target) string {
		return fmt.Sprintf(`INSERT INTO effect (key, owner, plan_id, ordinal) VALUES ('%s', 'mallory', %d, %d)`, tg.Key, tg.PlanID, tg.Ordinal)
	}
	freshA := func() string {
		next++
		return attemptAt(a.Targets[next-1])
	}
	callOf := func(c audittest.Campaign, provider string, size int) string {
		return fmt.Sprintf(`INSERT INTO effect_batch (provider, plan_id, call_key, request, size) VALUES ('%s', %d, '', '[]', %d)`, provider, c.PlanID, size)
	}
	const (
		thisCall   = `currval(pg_get_serial_sequence('effect_batch', 'id'))`
		thisEffect = `currval(pg_get_serial_sequence('effect', 'id'))`
	)
	memberAt := func(pos int) string {
		return fmt.Sprintf(`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (%s, %d, %s)`, thisCall, pos, thisEffect)
	}

	// What the server does, as the role does it, at READ COMMITTED: a call
	// of one of A's targets, committed. And an attempt of A's, committed
	// pending, that no call carries.
	require.Nil(t, refusedAt(t, app, pgx.ReadCommitted, freshA(), callOf(a, callProvider, 1), memberAt(0)), "a call as the server stores one")
	var call, member int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT batch_id, effect_id FROM effect_batch_member ORDER BY batch_id LIMIT 1`).Scan(&call, &member))
	require.Nil(t, refusedAt(t, app, pgx.ReadCommitted, freshA()))
	var loose int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT max(id) FROM effect`).Scan(&loose))
	// And a call committed with a position free, as a version before
	// these rules let the role commit one (restored here by the schema's
	// owner, whose rules do not run in replica mode).
	var unfilled int64
	require.NoError(t, pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, freshA()); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO effect_batch (provider, call_key, request, size) VALUES ($1, '', '[]', 2) RETURNING id`, callProvider).Scan(&unfilled); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (%d, 0, %s)`, unfilled, thisEffect))
		return err
	}))

	type attack struct {
		what  string
		stmts []string
		// needsAttempt: the attack records an attempt at a plan's target,
		// refused at REPEATABLE READ and SERIALIZABLE by the gate first.
		needsAttempt bool
	}
	for _, iso := range isolationLevels {
		attacks := []attack{
			{"a call through another provider than its plan's", []string{callOf(a, "elsewhere", 1)}, false},
			{"a call naming no plan", []string{`INSERT INTO effect_batch (provider, call_key, request, size) VALUES ('outbox', 'k', '[]', 1)`}, false},
			{"a call of A carrying a target of B", []string{attemptAt(b.Targets[next]), callOf(a, callProvider, 1), memberAt(0)}, true},
			{"a call of A carrying one of A's targets and one of B's", []string{
				freshA(), callOf(a, callProvider, 2), memberAt(0), attemptAt(b.Targets[next]), memberAt(1)}, true},
			{"an attempt added to a call committed earlier", []string{
				fmt.Sprintf(`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (%d, 1, %d)`, call, loose)}, false},
			{"a fresh attempt added to a call committed earlier, at its free position", []string{
				freshA(), fmt.Sprintf(`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (%d, 1, %s)`, unfilled, thisEffect)}, true},
			{"a send answer of its own for an attempt a call carried", []string{
				fmt.Sprintf(`INSERT INTO effect_response (effect_id, kind, body) VALUES (%d, 'send', '')`, member)}, false},
			{"a resend answer of its own for an attempt a call carried", []string{
				fmt.Sprintf(`INSERT INTO effect_response (effect_id, kind, body) VALUES (%d, 'resend', '')`, member)}, false},
			{"an attempt with an answer of its own put into a call", []string{
				freshA(), fmt.Sprintf(`INSERT INTO effect_response (effect_id, kind, body) VALUES (%s, 'send', '')`, thisEffect),
				callOf(a, callProvider, 1), memberAt(0)}, true},
			{"a call of two carrying one attempt", []string{freshA(), callOf(a, callProvider, 2), memberAt(0)}, true},
		}
		for _, at := range attacks {
			pgErr := refusedAt(t, app, iso, at.stmts...)
			require.NotNilf(t, pgErr, "%s, at %s: accepted", at.what, iso)
			want := "OP004"
			if at.needsAttempt && iso != pgx.ReadCommitted {
				want = "OP008"
			}
			require.Equalf(t, want, pgErr.Code, "%s, at %s: %s", at.what, iso, pgErr.Message)
		}
	}

	// The member is then never settled done: it has no answer to be
	// settled on but its call's.
	_, err := app.Exec(ctx, `UPDATE effect SET state = 'done', receipt = 'forged' WHERE id = $1`, member)
	requireSQLState(t, err, "OP004", "done without an answer")
	var calls, members, own int
	require.NoError(t, admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM effect_batch), (SELECT count(*) FROM effect_batch_member),
		(SELECT count(*) FROM effect_response WHERE batch_response_id IS NULL)`).Scan(&calls, &members, &own))
	require.Equal(t, [3]int{2, 2, 0}, [3]int{calls, members, own}, "nothing of the attacks was recorded")
}

// TestClaimCallCarriesOnePlan: a call's targets are of one plan; the store
// refuses to compose one of two before anything is written.
func TestClaimCallCarriesOnePlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fx := audittest.NewFixture(t, b.pool)
	one, two := fx.Campaign("one", audittest.Addresses(1)), fx.Campaign("two", audittest.Addresses(1))
	_, _, err := b.store.ClaimCall(b.ctx, callProvider, claimReqs("w1", one.Targets[0], two.Targets[0]), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "", []byte("[]"), nil
	})
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effect`).Scan(&n))
	require.Zero(t, n)
}
