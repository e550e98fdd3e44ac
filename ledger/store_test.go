package ledger_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *ledger.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	return &bundle{ctx: context.Background(), pool: pool, store: ledger.NewStore(pool)}
}

// newKey returns the key of a fresh effect: a random event, so tests never
// share keys.
func newKey(t testing.TB) ledger.Key {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	target, err := ledger.NewEmailTarget("ann@example.com")
	require.NoError(t, err)
	k, err := ledger.NewKey(ledger.KeyInput{Event: "campaign-" + hex.EncodeToString(b[:]), Tool: "email.send", Target: target})
	require.NoError(t, err)
	return k
}

// settleDone records a raw answer and settles the attempt done, as a worker does.
func (b *bundle) settleDone(t *testing.T, id int64) ledger.Effect {
	t.Helper()
	_, err := b.store.RecordResponse(b.ctx, id, ledger.ResponseSend, []byte("250 2.0.0 Ok: queued as ABC"))
	require.NoError(t, err)
	e, err := b.store.Settle(b.ctx, ledger.SettleParams{EffectID: id, State: ledger.StateDone, Receipt: "ABC"})
	require.NoError(t, err)
	return e
}

func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1", JobID: 7})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	require.Equal(t, ledger.StatePending, c.Effect.State)
	require.Equal(t, 0, c.Effect.Epoch)
	require.Equal(t, 1, c.Effect.Attempt)
	require.EqualValues(t, 7, c.Effect.JobID)

	// While pending, a second claim (a rescued duplicate job) must not call.
	c2, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w2"})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimInDoubt, c2.Outcome)
	require.Equal(t, c.Effect.ID, c2.Effect.ID)

	done := b.settleDone(t, c.Effect.ID)
	require.Equal(t, ledger.StateDone, done.State)
	require.Equal(t, "ABC", done.Receipt)
	require.False(t, done.SettledAt.IsZero())

	c3, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w3"})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimDone, c3.Outcome)

	resp, err := b.store.Responses(b.ctx, c.Effect.ID)
	require.NoError(t, err)
	require.Len(t, resp, 1)
	require.Equal(t, "250 2.0.0 Ok: queued as ABC", string(resp[0].Body))
}

func TestFailedFreesTheKeyForANewAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
	require.NoError(t, err)
	_, err = b.store.RecordResponse(b.ctx, c.Effect.ID, ledger.ResponseSend, []byte("550 mailbox unavailable"))
	require.NoError(t, err)
	_, err = b.store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateFailed, Reason: "550 mailbox unavailable"})
	require.NoError(t, err)

	c2, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c2.Outcome)
	require.Equal(t, 2, c2.Effect.Attempt)

	hist, err := b.store.History(b.ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, ledger.StateFailed, hist[0].State)
	require.Equal(t, ledger.StatePending, hist[1].State)
}

func TestSettleNeedsTheRawResponseFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: newKey(t), Owner: "w1"})
	require.NoError(t, err)

	for _, st := range []ledger.State{ledger.StateDone, ledger.StateFailed, ledger.StateStranded} {
		_, err = b.store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: st, Receipt: "x", Reason: "x"})
		require.ErrorIs(t, err, ledger.ErrMissingEvidence, st)
	}
	// Unknown needs no answer: that is the point of it.
	e, err := b.store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateUnknown, Reason: "owner died during the call"})
	require.NoError(t, err)
	require.Equal(t, ledger.StateUnknown, e.State)
}

func TestSettleUnknownEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Settle(b.ctx, ledger.SettleParams{EffectID: 424242, State: ledger.StateUnknown, Reason: "x"})
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

func TestResolveUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)

	toUnknown := func(key ledger.Key) ledger.Effect {
		c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
		require.NoError(t, err)
		e, err := b.store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateUnknown, Reason: "timeout after DATA"})
		require.NoError(t, err)
		return e
	}

	t.Run("NotDeliveredFreesTheKey", func(t *testing.T) {
		key := newKey(t)
		toUnknown(key)
		c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w2"})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimInDoubt, c.Outcome, "unknown is never treated as didn't happen")

		e, err := b.store.Resolve(b.ctx, ledger.ResolveParams{Key: key, Outcome: ledger.NotDelivered, Actor: "user:op@example.com", Reason: "recipient confirmed nothing arrived"})
		require.NoError(t, err)
		require.Equal(t, ledger.StateFailed, e.State)
		require.Equal(t, "user:op@example.com", e.ResolvedBy)

		c, err = b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w2"})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimWon, c.Outcome)
	})

	t.Run("DeliveredBlocks", func(t *testing.T) {
		key := newKey(t)
		toUnknown(key)
		e, err := b.store.Resolve(b.ctx, ledger.ResolveParams{Key: key, Outcome: ledger.Delivered, Actor: "user:op@example.com", Reason: "seen in the relay log"})
		require.NoError(t, err)
		require.Equal(t, ledger.StateDone, e.State)
		c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w2"})
		require.NoError(t, err)
		require.Equal(t, ledger.ClaimDone, c.Outcome)

		// Resolving again: it is done, not unknown.
		_, err = b.store.Resolve(b.ctx, ledger.ResolveParams{Key: key, Outcome: ledger.NotDelivered, Actor: "user:x", Reason: "y"})
		require.ErrorIs(t, err, ledger.ErrIllegalTransition)
	})

	t.Run("NeedsActorAndReason", func(t *testing.T) {
		key := newKey(t)
		toUnknown(key)
		_, err := b.store.Resolve(b.ctx, ledger.ResolveParams{Key: key, Outcome: ledger.Delivered, Actor: "", Reason: "x"})
		require.ErrorIs(t, err, ledger.ErrMissingEvidence)
		_, err = b.store.Resolve(b.ctx, ledger.ResolveParams{Key: key, Outcome: "maybe", Actor: "user:x", Reason: "x"})
		require.ErrorIs(t, err, ledger.ErrMissingEvidence)
	})

	t.Run("NoSuchKey", func(t *testing.T) {
		_, err := b.store.Resolve(b.ctx, ledger.ResolveParams{Key: newKey(t), Outcome: ledger.Delivered, Actor: "user:x", Reason: "x"})
		require.ErrorIs(t, err, onceplan.ErrNotFound)
	})
}

func TestBumpAllowsOneMoreEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
	require.NoError(t, err)

	// In doubt: no bump until the doubt is settled.
	_, err = b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorHuman, Actor: "user:op", Reason: "resend"})
	require.ErrorIs(t, err, onceplan.ErrConflict)

	b.settleDone(t, c.Effect.ID)
	epoch, err := b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorHuman, Actor: "user:op", Reason: "customer asked for the corrected invoice"})
	require.NoError(t, err)
	require.Equal(t, 1, epoch)

	c2, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
	require.NoError(t, err)
	require.Equal(t, ledger.ClaimWon, c2.Outcome)
	require.Equal(t, 1, c2.Effect.Epoch)
	require.Equal(t, 1, c2.Effect.Attempt)

	cur, err := b.store.CurrentEpoch(b.ctx, key)
	require.NoError(t, err)
	require.Equal(t, 1, cur)

	// A bump needs a reason.
	b.settleDone(t, c2.Effect.ID)
	_, err = b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorHuman, Actor: "user:op", Reason: " "})
	require.ErrorIs(t, err, ledger.ErrMissingEvidence)
}

func TestPolicyBumpNeedsARegisteredPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	_, err := b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorPolicy, Actor: "scheduler", Policy: "monthly-reminder", Reason: "next month"})
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	require.NoError(t, b.store.RegisterPolicy(b.ctx, "monthly-reminder", "one reminder per calendar month", "user:admin"))
	epoch, err := b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorPolicy, Actor: "scheduler", Policy: "monthly-reminder", Reason: "next month"})
	require.NoError(t, err)
	require.Equal(t, 1, epoch)

	// A policy bump must name its policy; a human bump must not.
	_, err = b.store.Bump(b.ctx, ledger.BumpParams{Key: key, ActorKind: ledger.ActorPolicy, Actor: "scheduler", Reason: "x"})
	require.Error(t, err)
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	_, err := b.store.Revoke(b.ctx, ledger.RevokeParams{Key: key, Actor: "user:op", Reason: "x"})
	require.ErrorIs(t, err, onceplan.ErrNotFound)

	c, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: "w1"})
	require.NoError(t, err)
	_, err = b.store.Revoke(b.ctx, ledger.RevokeParams{Key: key, Actor: "user:op", Reason: "x"})
	require.ErrorIs(t, err, ledger.ErrIllegalTransition, "a pending effect cannot be revoked")

	b.settleDone(t, c.Effect.ID)
	e, err := b.store.Revoke(b.ctx, ledger.RevokeParams{Key: key, Actor: "user:op", Reason: "payout reversed"})
	require.NoError(t, err)
	require.Equal(t, ledger.StateRevoked, e.State)
	require.Equal(t, "payout reversed", e.RevokeReason)

	_, err = b.store.Current(b.ctx, key)
	require.ErrorIs(t, err, onceplan.ErrNotFound, "revoked does not block")
}

func TestClaimRejectsMalformedKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Claim(b.ctx, ledger.ClaimParams{Key: "v1:nothex", Owner: "w1"})
	require.Error(t, err)
	_, err = b.store.Claim(b.ctx, ledger.ClaimParams{Key: newKey(t), Owner: " "})
	require.ErrorIs(t, err, ledger.ErrMissingEvidence)
}

// TestSettleFindsTheResponseByIndex: rule 3's check in the settle trigger
// finds the raw response through its index however much effect_response
// has grown since the connection's first settles (migration 0010). The
// plan PL/pgSQL cached while the table was small scanned the whole table
// on every later settle (docs/BENCHMARKS.md).
func TestSettleFindsTheResponseByIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// As the owner: an attempt outside any plan, the server writes only a
	// tool call's (migration 0037), and the settle's plan is the same.
	cfg, err := pgxpool.ParseConfig(pgtest.Database(t).Owner)
	require.NoError(t, err)
	cfg.MaxConns = 1 // one session: one PL/pgSQL plan cache
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := &bundle{ctx: ctx, pool: pool, store: ledger.NewStore(pool)}
	settleOne := func() int64 {
		c, err := b.store.Claim(ctx, ledger.ClaimParams{Key: newKey(t), Owner: "w1"})
		require.NoError(t, err)
		b.settleDone(t, c.Effect.ID)
		return c.Effect.ID
	}
	seqScans := func() int64 {
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'effect_response'`).Scan(&n))
		return n
	}

	var id int64
	for range 10 { // PL/pgSQL settles on a generic plan at the sixth call
		id = settleOne()
	}
	_, err = pool.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body)
		SELECT $1, 'probe', '\x00'::bytea FROM generate_series(1, 20000)`, id)
	require.NoError(t, err)

	before := seqScans()
	for range 10 {
		settleOne()
	}
	require.Zero(t, seqScans()-before, "settles on a grown ledger scanned effect_response instead of using its index")
}
