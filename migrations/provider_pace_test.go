package migrations_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
)

// takeTurn asks provider_pace_take for a turn of provider name.
func takeTurn(t *testing.T, pool *pgxpool.Pool, name string, every, maxWait time.Duration) (taken bool, wait time.Duration, at time.Time, err error) {
	t.Helper()
	var us int64
	err = pool.QueryRow(t.Context(), `SELECT taken, wait_us, at FROM provider_pace_take($1, $2, $3)`,
		name, every.Microseconds(), maxWait.Microseconds()).Scan(&taken, &us, &at)
	return taken, time.Duration(us) * time.Microsecond, at, err
}

// TestProviderPaceSpacesTurnsAcrossConnections: callers on separate
// connections — as separate processes are — ask provider_pace_take for
// turns of one provider at once; every turn given is at least the
// interval after the one before it, on the database's clock, so the
// processes together keep the account's rate. A turn further away than
// the caller can wait is not taken, and does not push the next one back.
func TestProviderPaceSpacesTurnsAcrossConnections(t *testing.T) {
	urls := pgtest.Database(t)
	const every = 20 * time.Millisecond
	var (
		mu    sync.Mutex
		turns []time.Time
		wg    sync.WaitGroup
	)
	for range 3 {
		pool := pgtest.NewPool(t, urls.App)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				taken, _, at, err := takeTurn(t, pool, "acct", every, time.Hour)
				if err != nil || !taken {
					t.Errorf("provider_pace_take: taken %v, %v", taken, err)
					return
				}
				mu.Lock()
				turns = append(turns, at)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	require.Len(t, turns, 30)
	slices.SortFunc(turns, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(turns); i++ {
		require.GreaterOrEqual(t, turns[i].Sub(turns[i-1]), every, "turn %d came %v after turn %d", i, turns[i].Sub(turns[i-1]), i-1)
	}

	// A slow provider: its second turn is an hour away; asked with a
	// minute to spare, nothing is taken, and the turn stays where it was.
	pool := pgtest.NewPool(t, urls.App)
	taken, _, first, err := takeTurn(t, pool, "slow", time.Hour, 0)
	require.NoError(t, err)
	require.True(t, taken, "the first turn of a provider is now")
	taken, wait, _, err := takeTurn(t, pool, "slow", time.Hour, time.Minute)
	require.NoError(t, err)
	require.False(t, taken, "a turn an hour away is not taken by a caller that can wait a minute")
	require.Greater(t, wait, 59*time.Minute)
	var last time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT last_at FROM provider_pace WHERE name = 'slow'`).Scan(&last))
	require.True(t, last.Equal(first), "the refused turn moved the schedule: %v, want %v", last, first)
}

// TestPaceHorizonIsTheDatabases: the bounds internal/provider states —
// the longest it waits for a turn, the slowest rate it takes — are the
// database's horizon (provider_pace_horizon, migration 0038), which
// provider_pace_take refuses to exceed and beyond which it repairs a turn.
func TestPaceHorizonIsTheDatabases(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.Database(t).App)
	var us int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT (extract(epoch FROM provider_pace_horizon()) * 1e6)::bigint`).Scan(&us))
	horizon := time.Duration(us) * time.Microsecond
	require.Equal(t, horizon, provider.MaxPaceWait, "the longest wait for a turn")
	require.Equal(t, horizon, provider.MaxRateInterval, "the slowest rate's interval")
}

// TestProviderPaceWrittenOnlyThroughTheTake: as the server's role, in plain
// SQL at READ COMMITTED, REPEATABLE READ and SERIALIZABLE, a provider's
// schedule is neither written directly — a turn pushed two hours or for
// ever ahead (every process would send nothing), moved back (a burst past
// the account's limit), inserted ahead, deleted — nor through its function
// with arguments no process sends (an interval or a wait beyond the
// horizon, which would push the turn as far). PostgreSQL refuses each, and
// the schedule stays as it was; a take with the process's own arguments
// still works at every level.
func TestProviderPaceWrittenOnlyThroughTheTake(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	app := pgtest.NewPool(t, pgtest.Database(t).App)
	taken, _, _, err := takeTurn(t, app, "acct", time.Second, 0)
	require.NoError(t, err)
	require.True(t, taken)
	schedule := func() string {
		var s string
		require.NoError(t, app.QueryRow(ctx, `SELECT name || '@' || last_at::text FROM provider_pace WHERE name = 'acct'`).Scan(&s))
		return s
	}
	before := schedule()

	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		for _, attack := range []struct{ sql, code string }{
			{`UPDATE provider_pace SET last_at = last_at + interval '2 hours' WHERE name = 'acct'`, "42501"},
			{`UPDATE provider_pace SET last_at = 'infinity' WHERE name = 'acct'`, "42501"},
			{`UPDATE provider_pace SET last_at = last_at - interval '1 hour' WHERE name = 'acct'`, "42501"},
			{`INSERT INTO provider_pace (name, last_at) VALUES ('other', 'infinity')`, "42501"},
			{`INSERT INTO provider_pace (name, last_at) VALUES ('acct', now() + interval '2 hours') ON CONFLICT (name) DO UPDATE SET last_at = EXCLUDED.last_at`, "42501"},
			{`DELETE FROM provider_pace WHERE name = 'acct'`, "42501"},
			{`TRUNCATE provider_pace`, "42501"},
			// Through the function: an interval of two hours would give
			// the next turn two hours on; a wait of two hours would take it.
			{`SELECT * FROM provider_pace_take('acct', 7200000000, 0)`, "22023"},
			{`SELECT * FROM provider_pace_take('acct', 1000000, 7200000000)`, "22023"},
			{`SELECT * FROM provider_pace_take('acct', 9223372036854775807, 9223372036854775807)`, "22023"},
			{`SELECT * FROM provider_pace_take('acct', 0, 0)`, "22023"},
			{`SELECT * FROM provider_pace_take('acct', 1000000, -1)`, "22023"},
		} {
			err := pgx.BeginTxFunc(ctx, app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, attack.sql)
				return err
			})
			var pgErr *pgconn.PgError
			require.Truef(t, errors.As(err, &pgErr), "%s at %s: want PostgreSQL to refuse, got %v", attack.sql, iso, err)
			require.Equalf(t, attack.code, pgErr.Code, "%s at %s: %s", attack.sql, iso, pgErr.Message)
		}
		require.Equal(t, before, schedule(), "a refused write changes no turn (%s)", iso)

		// The process's own take, at this level: the next turn of a
		// provider of its own, a second after the one before.
		name := "acct-" + strings.ReplaceAll(strings.ToLower(string(iso)), " ", "-")
		var turns []time.Time
		for range 2 {
			require.NoError(t, pgx.BeginTxFunc(ctx, app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				var taken bool
				var at time.Time
				if err := tx.QueryRow(ctx, `SELECT taken, at FROM provider_pace_take($1, 1000000, 3600000000)`, name).Scan(&taken, &at); err != nil {
					return err
				}
				require.True(t, taken)
				turns = append(turns, at)
				return nil
			}), iso)
		}
		require.GreaterOrEqual(t, turns[1].Sub(turns[0]), time.Second, "turns a second apart (%s)", iso)
	}
}

// TestProviderPacePushedTurnIsRepaired: a database whose schedule a server
// pushed before its role lost the table (written here as the superuser)
// holds a turn two hours ahead, and one at infinity. Neither blocks for
// ever: no take gives a turn further ahead than the horizon, so the next
// take treats such a turn as none and gives its turn now. A turn inside
// the horizon is one a take gave, and is kept.
func TestProviderPacePushedTurnIsRepaired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	_, err := admin.Exec(ctx, `INSERT INTO provider_pace (name, last_at) VALUES
		('pushed', now() + interval '2 hours'), ('forever', 'infinity'), ('kept', now() + interval '30 minutes')`)
	require.NoError(t, err)

	for _, name := range []string{"pushed", "forever"} {
		start := time.Now()
		taken, wait, at, err := takeTurn(t, app, name, time.Second, time.Minute)
		require.NoError(t, err, name)
		require.True(t, taken, "%s: the next turn is now", name)
		require.Less(t, wait, time.Second, name)
		require.WithinDuration(t, start, at, time.Minute, name)
		// And the schedule goes on from it, a second at a time.
		taken, wait, _, err = takeTurn(t, app, name, time.Second, time.Minute)
		require.NoError(t, err, name)
		require.True(t, taken, name)
		require.InDelta(t, time.Second.Seconds(), wait.Seconds(), 0.5, "%s: the turn after it", name)
	}

	taken, wait, _, err := takeTurn(t, app, "kept", time.Second, time.Minute)
	require.NoError(t, err)
	require.False(t, taken, "a turn half an hour ahead is one a take gave: a caller that waits a minute does not take the next")
	require.Greater(t, wait, 29*time.Minute)
	taken, wait, _, err = takeTurn(t, app, "kept", time.Second, provider.MaxPaceWait)
	require.NoError(t, err)
	require.True(t, taken, "a caller that waits the longest takes it")
	require.Greater(t, wait, 29*time.Minute)
}
