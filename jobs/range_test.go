package jobs_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
)

// effectJobs counts the campaign's effect jobs and the most targets one
// carries.
func (w *world) effectJobs(t *testing.T) (jobs, most int) {
	t.Helper()
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT count(*), coalesce(max(coalesce((args ->> 'count')::int, 1)), 0) FROM river_job WHERE kind = 'onceplan_effect'`).Scan(&jobs, &most))
	return jobs, most
}

// slowHook is a webhook receiver that takes d over each call.
func slowHook(t *testing.T, d time.Duration) *sink.Webhook {
	t.Helper()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	hook.Delay(d)
	return hook
}

// TestRangeJobsSendEachTargetOnce: a plan of 200 targets on a queue of two
// workers goes into jobs of 25 consecutive targets; each target gets one
// effect, and resuming or requeueing afterwards sends nothing more.
func TestRangeJobsSendEachTargetOnce(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{WorkersPerQueue: 2}, "hook="+hook.URL())
	id := w.running(t, "hook", 200)
	n, most := w.effectJobs(t)
	require.Equal(t, 8, n, "jobs")
	require.Equal(t, 25, most, "targets per job")
	w.start(t)
	await.Until(t, 60*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 200)
	require.Equal(t, map[string]int{"done": 200}, w.states(t, id))

	_, err := w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	jobsAfter, _ := w.effectJobs(t)
	require.Equal(t, n, jobsAfter, "jobs after a resume of a finished campaign")
	exactlyOnce(t, hook, 200)
}

// TestRangeJobRetriesAreBoundedPerTarget: every call fails before it is
// sent, on jobs of 5 targets with 3 attempts: each target is split off to
// a job of its own and gets exactly 3 attempts — the same bound as a
// one-target job — and stays failed and visible.
func TestRangeJobRetriesAreBoundedPerTarget(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1, MaxAttempts: 3}, "down="+dead)
	id := w.running(t, "down", 20)
	_, most := w.effectJobs(t)
	require.Equal(t, 5, most, "targets per job")
	w.start(t)
	await.Until(t, 60*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Equal(t, map[string]int{"failed": 20}, w.states(t, id))
	require.Equal(t, 60, w.attempts(t), "three attempts per target")
	require.Equal(t, 20, w.jobStates(t)[rivertype.JobStateDiscarded], "one job given up per target")
}

// TestRangeJobPausedMidwayResumesWhereItStopped: a campaign paused while
// its jobs of 10 targets run: nothing is claimed while it is paused, and
// after the resume every target gets one effect.
func TestRangeJobPausedMidwayResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	hook := slowHook(t, 50*time.Millisecond)
	const snooze = 200 * time.Millisecond
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1, PausedSnooze: snooze}, "hook="+hook.URL())
	id := w.running(t, "hook", 40)
	w.start(t)
	await.Until(t, 30*time.Second, "a few effects", func() bool { return len(hook.Effects()) >= 5 })
	_, err := w.svc.Pause(w.ctx, w.operator, id, "checking the copy")
	require.NoError(t, err)
	await.Until(t, 30*time.Second, "the call in flight at the pause to settle, and no job running", func() bool {
		return w.states(t, id)["pending"] == 0 && w.jobStates(t)[rivertype.JobStateRunning] == 0
	})
	before := w.attempts(t)
	time.Sleep(5 * snooze) // each paused job looks again several times
	require.Equal(t, before, w.attempts(t), "attempts while paused")
	require.Less(t, before, 40, "paused before the end")

	_, err = w.svc.Resume(w.ctx, w.operator, id)
	require.NoError(t, err)
	await.Until(t, 30*time.Second, "the resumed campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 40)
	require.Equal(t, 40, w.attempts(t), "one attempt per target")
}

// TestRangeJobOverItsTimeBudgetHandsOnTheRest: with a slow provider and
// a short job timeout, a job of 10 targets cannot finish inside half its
// time (10 calls of at least 150 ms against a budget of 1 s); it goes on
// as the rest of its own range, and every target gets one effect.
//
// One attempt per target is what a quiet machine shows; on a machine busy
// enough that the job's deadline passes between a claim and its request,
// that attempt fails with nothing sent and its target is sent again. So
// the test asserts what a person would check: each target once at the
// receiver, every target done, and any attempt beyond the first of a
// target one that sent nothing.
func TestRangeJobOverItsTimeBudgetHandsOnTheRest(t *testing.T) {
	t.Parallel()
	hook := slowHook(t, 150*time.Millisecond)
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1, JobTimeout: 2 * time.Second}, "hook="+hook.URL())
	id := w.running(t, "hook", 40)
	w.start(t)
	await.Until(t, time.Minute, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 40)
	require.Equal(t, map[string]int{"done": 40}, w.states(t, id))
	for _, a := range w.failedAttempts(t) {
		require.True(t, a.sentNothing(), "an attempt beyond its target's first that may have sent: %+v", a)
		t.Logf("an attempt that sent nothing, its target sent again: %+v", a)
	}
	var snoozed int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect' AND (metadata ->> 'snoozes')::int > 0`).Scan(&snoozed))
	require.Positive(t, snoozed, "jobs that handed on the rest of their range")
}

// TestFirstStartSkipsAKeyDoneOutsideThePlan: a first start reads its
// targets without probing the ledger for each only when nothing in the
// ledger could block one; an attempt made outside any plan at a target's
// key (done) is such a thing, and that target gets no job.
func TestFirstStartSkipsAKeyDoneOutsideThePlan(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1}, "hook="+hook.URL())
	id := w.approved(t, "hook", 20)
	var key string
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT t.key FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1 AND t.ordinal = 7`, id).Scan(&key))
	store := ledger.NewStore(w.pool)
	claim, err := store.ClaimOne(w.ctx, ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: ledger.Key(key), Owner: "someone else"}}, ledger.Gate{})
	require.NoError(t, err)
	_, err = store.RecordResponse(w.ctx, claim.Effect.ID, ledger.ResponseSend, []byte("sent by hand"))
	require.NoError(t, err)
	_, err = store.Settle(w.ctx, ledger.SettleParams{EffectID: claim.Effect.ID, State: ledger.StateDone, Receipt: "by hand"})
	require.NoError(t, err)

	_, err = w.svc.Start(w.ctx, w.operator, id)
	require.NoError(t, err)
	var covered int
	require.NoError(t, w.pool.QueryRow(w.ctx, `
		SELECT count(*) FROM river_job j CROSS JOIN generate_series((j.args ->> 'ordinal')::int,
		       (j.args ->> 'ordinal')::int + coalesce((j.args ->> 'count')::int, 1) - 1) o
		WHERE j.kind = 'onceplan_effect' AND o = 7`).Scan(&covered))
	require.Zero(t, covered, "jobs carrying the target done outside the plan")
	w.start(t)
	await.Until(t, 30*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 19)
}

// TestStopHandsOnTheRestOfARangeJob: a clean stop while jobs of 10 targets
// run on a slow provider: each job finishes the call in hand and hands the
// rest of its range on, so the stop leaves no attempt pending or in doubt
// and cuts no call short; another process then sends the rest, each
// target once.
func TestStopHandsOnTheRestOfARangeJob(t *testing.T) {
	t.Parallel()
	hook := slowHook(t, 100*time.Millisecond)
	w := newWorld(t, jobs.Config{WorkersPerQueue: 1}, "hook="+hook.URL())
	id := w.running(t, "hook", 40)
	require.NoError(t, w.runner.Start(w.ctx, w.svc))
	await.Until(t, 20*time.Second, "a few effects", func() bool { return len(hook.Effects()) >= 3 })
	stopCtx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.runner.Stop(stopCtx))
	states := w.states(t, id)
	require.Zero(t, states["pending"], "attempts left pending by a clean stop: %v", states)
	require.Zero(t, states["unknown"], "attempts in doubt after a clean stop: %v", states)
	require.Less(t, states["done"], 20, "the stop waited for the jobs' whole ranges: %v", states)
	var moved int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM river_job WHERE kind = 'onceplan_effect' AND state = 'available'
		AND (args ->> 'ordinal')::int % 10 <> 1`).Scan(&moved))
	require.Positive(t, moved, "jobs handed on from the middle of their range")

	p, err := provider.ParseFlag("hook=" + hook.URL())
	require.NoError(t, err)
	reg, err := provider.NewRegistry(p)
	require.NoError(t, err)
	next, err := jobs.NewRunner(jobs.Config{Pool: w.pool, Providers: reg, WorkersPerQueue: 1, MaintenanceInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testLogOut, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	require.NoError(t, next.Start(w.ctx, approval.NewService(w.pool, next.Enqueuer())))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, next.Stop(ctx))
	})
	await.Until(t, 60*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	exactlyOnce(t, hook, 40)
	require.Equal(t, 40, w.attempts(t), "one attempt per target")
}
