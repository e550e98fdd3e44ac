package jobs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/jobs/riverdb"
)

// TestOverlappingPausesEndAtTheLatest: two quota answers pause a queue,
// the second for less time than the first (calls in flight answer one
// after the other). The shorter pause's resume leaves the queue paused,
// and the queue opens when the longer one ends, not before.
func TestOverlappingPausesEndAtTheLatest(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{}, "hook="+hook.URL())
	w.start(t)
	queue := jobs.QueueFor("hook")
	long := time.Now().Add(1500 * time.Millisecond)
	require.NoError(t, w.runner.PauseProvider(w.ctx, "hook", long))
	require.NoError(t, w.runner.PauseProvider(w.ctx, "hook", time.Now().Add(100*time.Millisecond)))

	states, err := riverdb.QueueStates(w.ctx, w.pool)
	require.NoError(t, err)
	require.True(t, states[queue].Paused)
	require.WithinDuration(t, long, states[queue].PausedUntil, time.Millisecond, "the pause ends with the later resume")

	resumes := func(state string) int {
		var n int
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = $2`,
			riverdb.ResumeQueueKind, state).Scan(&n))
		return n
	}
	await.Until(t, 10*time.Second, "the shorter pause's resume to run", func() bool { return resumes("completed") >= 1 })
	q, err := w.runner.Client().QueueGet(w.ctx, queue)
	require.NoError(t, err)
	if resumes("completed") == 1 {
		require.NotNil(t, q.PausedAt, "the queue is still paused for the longer pause")
	}

	await.Until(t, 10*time.Second, "the queue to open", func() bool {
		q, err := w.runner.Client().QueueGet(w.ctx, queue)
		return err == nil && q.PausedAt == nil
	})
	var opened time.Time
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT max(finalized_at) FROM river_job WHERE kind = $1`, riverdb.ResumeQueueKind).Scan(&opened))
	require.False(t, opened.Before(long), "opened at %s, before the longer pause's end %s", opened, long)
	require.Equal(t, 2, resumes("completed"))
}
