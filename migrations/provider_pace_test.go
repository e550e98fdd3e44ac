package migrations_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
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

// TestProviderPaceRefusesTheAppRoleTurningBack: the server only gives
// turns; as its role, deleting a provider's schedule or moving its latest
// turn back — which would hand out turns past the account's limit — is
// refused by PostgreSQL, and the row stays as it was.
func TestProviderPaceRefusesTheAppRoleTurningBack(t *testing.T) {
	urls := pgtest.Database(t)
	app := pgtest.NewPool(t, urls.App)
	taken, _, at, err := takeTurn(t, app, "acct", time.Second, 0)
	require.NoError(t, err)
	require.True(t, taken)

	_, err = app.Exec(t.Context(), `DELETE FROM provider_pace WHERE name = 'acct'`)
	require.ErrorContains(t, err, "permission denied")
	_, err = app.Exec(t.Context(), `UPDATE provider_pace SET last_at = last_at - interval '1 hour' WHERE name = 'acct'`)
	require.ErrorContains(t, err, "moved back")
	_, err = app.Exec(t.Context(), `UPDATE provider_pace SET name = 'other' WHERE name = 'acct'`)
	require.ErrorContains(t, err, "not changed")
	_, err = app.Exec(t.Context(), `TRUNCATE provider_pace`)
	require.ErrorContains(t, err, "permission denied")

	var last time.Time
	require.NoError(t, app.QueryRow(t.Context(), `SELECT last_at FROM provider_pace WHERE name = 'acct'`).Scan(&last))
	require.True(t, last.Equal(at), "the schedule changed: %v, want %v", last, at)
}
