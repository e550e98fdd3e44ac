package pgnotify_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const channel = "onceplan_pgnotify_test"

// TestWaitAnswersOnTheNotification: a waiter reads again when its payload
// is notified at a commit, goes on waiting while the state is not the one
// it waits for, and stops at it, before its wait ends.
func TestWaitAnswersOnTheNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE waited (k text PRIMARY KEY, v int NOT NULL)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO waited VALUES ('a', 0), ('b', 0)`)
	require.NoError(t, err)
	set := func(k string, v int) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE waited SET v = $2 WHERE k = $1`, k, v); err != nil {
				return err
			}
			return pgnotify.Notify(ctx, tx, channel, k)
		}))
	}
	h := pgnotify.New(pool, channel)

	type answer struct {
		v   int
		err error
	}
	answers := make(chan answer, 1)
	var reads atomic.Int32
	start := time.Now()
	go func() {
		var v int
		err := pgnotify.Wait(ctx, h, "a", time.Minute, func(ctx context.Context) (bool, error) {
			reads.Add(1)
			if err := pool.QueryRow(ctx, `SELECT v FROM waited WHERE k = 'a'`).Scan(&v); err != nil {
				return false, err
			}
			return v == 2, nil
		})
		answers <- answer{v, err}
	}()
	await.Until(t, time.Minute, "the waiter listening", func() bool { return pgtest.Listeners(t, pool, channel) == 1 })

	set("b", 2) // another payload: not the waiter's
	set("a", 1) // the waiter's, but not what it waits for
	await.Until(t, time.Minute, "the waiter reading again on its notification", func() bool { return reads.Load() >= 2 })
	select {
	case a := <-answers:
		t.Fatalf("the wait ended before its state: %+v", a)
	default:
	}
	set("a", 2)
	a := await.Recv(t, answers, time.Minute, "the wait's answer")
	require.NoError(t, a.err)
	require.Equal(t, 2, a.v, "the state the check read last")
	require.Less(t, time.Since(start), 50*time.Second, "answered at the notification, not at the end of the wait")
	await.Until(t, time.Minute, "the last waiter out closing the listening connection", func() bool {
		return pgtest.Listeners(t, pool, channel) == 0
	})
}

// TestWaitEnds: a wait that runs out reads once more and returns without
// error; a wait of 0 returns at once without reading or listening; a
// caller that goes away ends its wait with ctx's error; a failed read is
// the wait's error.
func TestWaitEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	h := pgnotify.New(pool, channel)
	never := func(reads *int) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { *reads++; return false, nil }
	}

	var reads int
	require.NoError(t, pgnotify.Wait(ctx, h, "x", 0, never(&reads)))
	require.Zero(t, reads, "a wait of 0 reads nothing")
	require.Zero(t, pgtest.Listeners(t, pool, channel), "and does not listen")

	start := time.Now()
	require.NoError(t, pgnotify.Wait(ctx, h, "x", 300*time.Millisecond, never(&reads)))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.Positive(t, reads, "the state read once more when the wait ran out")

	cctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- pgnotify.Wait(cctx, h, "x", time.Minute, never(new(int))) }()
	await.Until(t, time.Minute, "the waiter listening", func() bool { return pgtest.Listeners(t, pool, channel) == 1 })
	cancel()
	require.ErrorIs(t, await.Recv(t, ended, time.Minute, "the cancelled wait"), context.Canceled)

	broken := errors.New("the read failed")
	go func() {
		ended <- pgnotify.Wait(ctx, h, "x", time.Minute, func(context.Context) (bool, error) { return false, broken })
	}()
	require.ErrorIs(t, await.Recv(t, ended, time.Minute, "the failed wait"), broken)
	await.Until(t, time.Minute, "the listening connection closed", func() bool { return pgtest.Listeners(t, pool, channel) == 0 })
}
