package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// claimReqs is a claim request per key, for owner and job 9.
func claimReqs(owner string, keys ...ledger.Key) []ledger.ClaimRequest {
	out := make([]ledger.ClaimRequest, len(keys))
	for i, k := range keys {
		out[i] = ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: k, Owner: owner, JobID: 9}}
	}
	return out
}

// TestClaimCallStoresTheCallWithItsClaims: the attempts a call's claim won
// and the call that carries them — its key, its exact bytes and its
// attempts in the requests' order — are one commit; a key already held is
// not won and is not in the call.
func TestClaimCallStoresTheCallWithItsClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k1, held, k3 := newKey(t), newKey(t), newKey(t)
	_, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: held, Owner: "other", JobID: 1})
	require.NoError(t, err)

	var composed []ledger.Key
	call, won, err := b.store.ClaimCall(b.ctx, "mail", claimReqs("w1", k3, held, k1), ledger.Gate{}, func(won []ledger.Effect) (string, []byte, error) {
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
	require.Equal(t, "mail", got.Provider)
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
	k1, k2 := newKey(t), newKey(t)
	_, _, err := b.store.ClaimCall(b.ctx, "mail", claimReqs("w1", k1, k2), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "", nil, errors.New("cannot encode")
	})
	require.ErrorContains(t, err, "cannot encode")
	for _, k := range []ledger.Key{k1, k2} {
		c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: k, Owner: "w2", JobID: 2})
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
	k1, k2 := newKey(t), newKey(t)
	call, won, err := b.store.ClaimCall(b.ctx, "mail", claimReqs("w1", k1, k2), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
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

	// An attempt claimed and committed earlier, and a call of its own.
	earlier, err := store.Claim(ctx, ledger.ClaimParams{Key: newKey(t), Owner: "w1", JobID: 1})
	require.NoError(t, err)
	call, won, err := store.ClaimCall(ctx, "mail", claimReqs("w1", newKey(t)), ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "k-1", []byte("request"), nil
	})
	require.NoError(t, err)
	_, err = store.AnswerCall(ctx, call.ID, ledger.ResponseSend, []byte("answer"), call.Members, nil)
	require.NoError(t, err)
	var answerID int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT id FROM effect_batch_response WHERE batch_id = $1`, call.ID).Scan(&answerID))

	refusedTo := func(pool *pgxpool.Pool, code, what string, sql string, args ...any) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO effect_batch (provider, call_key, request, size) VALUES ('mail', '', 'x', 2)`)
			require.NoError(t, err, "the app role may store a call")
			_, err = tx.Exec(ctx, sql, args...)
			return err
		})
		requireSQLState(t, err, code, what)
	}
	refused := func(code, what string, sql string, args ...any) {
		t.Helper()
		refusedTo(app, code, what, sql, args...)
	}
	// An attempt outside any plan the application role may not write at
	// all (migration 0037: it is a tool call's, after its intent); the
	// call's rules on one hold for the owner too.
	owner := pgtest.NewPool(t, urls.Owner)
	refusedByCall := func(code, what string, sql string, args ...any) {
		t.Helper()
		refused("OP007", what+", as the application role", sql, args...)
		refusedTo(owner, code, what, sql, args...)
	}
	refused("OP004", "an attempt of an earlier transaction",
		`INSERT INTO effect_batch_member (batch_id, position, effect_id) VALUES (currval(pg_get_serial_sequence('effect_batch', 'id')), 0, $1)`, earlier.Effect.ID)
	refusedByCall("23505", "an attempt in two calls", `
		WITH e AS (INSERT INTO effect (key, owner) VALUES ($1, 'w1') RETURNING id),
		     first AS (INSERT INTO effect_batch_member (batch_id, position, effect_id)
		               SELECT currval(pg_get_serial_sequence('effect_batch', 'id')), 0, id FROM e RETURNING effect_id),
		     second AS (INSERT INTO effect_batch (provider, call_key, request, size) VALUES ('mail', '', 'y', 1) RETURNING id)
		INSERT INTO effect_batch_member (batch_id, position, effect_id) SELECT second.id, 0, first.effect_id FROM first, second`, string(newKey(t)))
	refusedByCall("OP004", "a position past the call's size", `
		WITH e AS (INSERT INTO effect (key, owner) VALUES ($1, 'w1') RETURNING id)
		INSERT INTO effect_batch_member (batch_id, position, effect_id)
		SELECT currval(pg_get_serial_sequence('effect_batch', 'id')), 2, id FROM e`, string(newKey(t)))

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
