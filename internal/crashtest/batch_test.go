package crashtest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Batch calls (docs/ARCHITECTURE.md, "Batch sending"): a job's targets go
// to Resend's POST /emails/batch or Postmark's POST /email/batch, size at a
// time, each target its own ledger row and key. The crash points are the
// call's: before its claim commit, after it, after the service accepted
// the call, after its answer was recorded.

// batchKinds are the batch worlds.
var batchKinds = []string{"resend-batch", "postmark-batch"}

// batchTargets is the campaign of the batch crash tests: with one worker
// per queue its jobs carry 6 targets each (jobs.targetsPerJob), three
// calls of two.
const batchTargets = 24

// batchEnv is newEnv whose campaigns' jobs are sized for workersPerQueue
// workers: a call carries at most one job's targets.
func batchEnv(t *testing.T, workersPerQueue int) *env {
	e := newEnv(t)
	e.enq.WorkersPerQueue = workersPerQueue
	return e
}

// batchWorld is the stand-in of kind ("resend-batch" or "postmark-batch")
// with batch=size: Resend re-sent under the call's key, Postmark probed per
// message by its metadata.
func batchWorld(t *testing.T, kind string, size int) *world {
	t.Helper()
	opts := "concurrency=1&batch=" + strconv.Itoa(size)
	switch kind {
	case "resend-batch":
		rs := sink.NewResend(sink.ResendOpts{})
		t.Cleanup(rs.Close)
		return &world{kind: kind, provider: "p=" + sink.WithOption(rs.URL(), opts), effects: rs.CountByRecipient,
			loseAnswer: func() { rs.ApplyThenDrop(1) }, resend: rs}
	case "postmark-batch":
		pm := sink.NewPostmark(sink.PostmarkOpts{})
		t.Cleanup(pm.Close)
		return &world{kind: kind, provider: "p=" + sink.WithOption(pm.URL(), opts+"&settle=1s"), effects: pm.CountByRecipient,
			loseAnswer: func() { pm.AcceptThenDrop(1) }}
	}
	t.Fatalf("unknown batch world %q", kind)
	return nil
}

// TestBatchCrashMatrix kills a worker with SIGKILL at each point of a batch
// call (its second call, of two targets), for each service, restarts one,
// and counts messages at the service: every target exactly once.
func TestBatchCrashMatrix(t *testing.T) {
	t.Parallel()
	runs := 2
	if testing.Short() {
		runs = 1
	}
	for _, kind := range batchKinds {
		for _, point := range []string{"before-claim", "after-claim", "after-send", "after-raw"} {
			for run := range runs {
				t.Run(fmt.Sprintf("%s/%s/%d", kind, point, run), func(t *testing.T) {
					t.Parallel()
					e := batchEnv(t, 1)
					w := newWorld(t, kind)
					id := e.campaign(t, "p", batchTargets)
					targets := e.targets(t, id)

					crashThenRecover(t, e, w, id, point, 2)
					require.Equal(t, map[string]int{"done": batchTargets}, e.states(t, id))
					requireExactlyOnce(t, w, targets)
				})
			}
		}
	}
}

// TestBatchRandomKillsWithLostAnswers: a 2,000-target campaign in calls of
// 100, the worker killed with SIGKILL at random moments and restarted,
// while the service loses the answer of a call it accepted now and then:
// every target exactly once at the service.
func TestBatchRandomKillsWithLostAnswers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the random-kill soak is not part of -short")
	}
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := batchEnv(t, 4)
			w := batchWorld(t, kind, 100)
			prov := strings.Replace(w.provider, "concurrency=1", "concurrency=4", 1)
			const n = 2000
			id := e.campaign(t, "p", n)
			targets := e.targets(t, id)

			var lost atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(200+rand.IntN(400)) * time.Millisecond):
						w.loseAnswer()
						lost.Add(1)
					}
				}
			}()
			for kill := range 5 {
				wk := e.startWorker(t, []string{prov})
				time.Sleep(time.Duration(400+rand.IntN(1200)) * time.Millisecond)
				wk.kill()
				requireNoDuplicates(t, w, "after a kill")
				t.Logf("kill %d: %d targets reached so far", kill+1, len(w.effects()))
			}
			close(stop)
			<-done
			survivor := e.startWorker(t, []string{prov})
			// A campaign completes with targets unknown (they wait for
			// recovery or a person, not for the queue), and maintenance
			// then asks the service about each: a lost answer's targets
			// end done a round or two later.
			waitFor(t, 3*time.Minute, "the campaign to complete with every target done", func() bool {
				return e.campaignState(t, id) == approval.StateCompleted && e.states(t, id)["done"] == n
			}, survivor)
			require.Equal(t, map[string]int{"done": n}, e.states(t, id))
			requireExactlyOnce(t, w, targets)
			t.Logf("%d answers were lost on command", lost.Load())
		})
	}
}

// TestBatchRecoveredAfterTheWindowIsUnknown: a worker killed after Resend
// accepted a call, and recovery only after the call's key has expired
// (dedupe_window made short): every target of that call is unknown, for a
// person, and nothing is sent again.
func TestBatchRecoveredAfterTheWindowIsUnknown(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := newWorld(t, "resend-batch")
	prov := sink.WithOption(w.provider, "dedupe_window=2s")
	id := e.campaign(t, "p", batchTargets)
	crashing := e.startWorker(t, []string{prov}, "ONCEPLAN_CRASH_AT=after-send:2")
	crashing.waitExit(t, 60*time.Second)
	before := w.effects()
	time.Sleep(3 * time.Second) // the window closes
	survivor := e.startWorker(t, []string{prov})
	waitFor(t, 60*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, survivor)
	require.Equal(t, map[string]int{"done": batchTargets - 2, "unknown": 2}, e.states(t, id), "the call's two targets")
	got := w.effects()
	for target, n := range before {
		require.Equal(t, n, got[target], "%s: nothing more after the window closed", target)
	}
	require.Len(t, got, batchTargets, "the unknown ones were sent once, before the crash")
	requireNoDuplicates(t, w, "after recovery")
	require.Contains(t, survivor.Logs(), "has closed: sending it again could be a second message")
}

// TestBatchResendWithAClosedGateIsUnknown: a worker killed after Resend
// accepted a call of two; one of the two addresses is suppressed before
// recovery. The call cannot be sent again under its key without that
// target, so both go to a person as unknown, with the reason, and nothing
// is sent again.
func TestBatchResendWithAClosedGateIsUnknown(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := newWorld(t, "resend-batch")
	id := e.campaign(t, "p", batchTargets)
	crashing := e.startWorker(t, []string{w.provider}, "ONCEPLAN_CRASH_AT=after-send:2")
	crashing.waitExit(t, 60*time.Second)
	before := w.effects()
	states := e.stateByOrdinal(t, id)
	var pending []int
	for o, s := range states {
		if s == "pending" {
			pending = append(pending, o)
		}
	}
	require.Len(t, pending, 2, "the call in flight: %v", states)
	address := func(ordinal int) string { a, _ := e.targetAt(t, id, ordinal); return a }
	_, _, err := suppression.Add(e.ctx, e.pool, suppression.AddParams{
		Address: address(pending[0]), Reason: suppression.Manual, Source: suppression.FromActor, Actor: "crash test"})
	require.NoError(t, err)

	survivor := e.startWorker(t, []string{w.provider})
	waitFor(t, 60*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, survivor)
	after := e.stateByOrdinal(t, id)
	for _, o := range pending {
		require.Equal(t, "unknown", after[o], "target %d of the call", o)
	}
	require.Equal(t, map[string]int{"done": batchTargets - 2, "unknown": 2}, e.states(t, id))
	got := w.effects()
	for _, o := range pending {
		addr := address(o)
		require.Equal(t, before[addr], got[addr], "%s: nothing sent again", addr)
	}
	requireNoDuplicates(t, w, "after recovery")
	require.Contains(t, survivor.Logs(), "the call cannot be sent again under its key without it")
}

// TestBatchRecoveryKilledWhileResolvingItsCallEndsDone: Resend creates a
// call's two messages and the answer is lost, so both targets are unknown;
// recovery sends the call again under its key, records the answer and
// resolves the first target from it, and is killed before the second. The
// next process resolves the second from the recorded answer: every target
// done, each message once at the service — the half-resolved call does not
// wait for a person.
func TestBatchRecoveryKilledWhileResolvingItsCallEndsDone(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := newWorld(t, "resend-batch")
	id := e.campaign(t, "p", batchTargets)
	targets := e.targets(t, id)
	w.resend.ApplyThenDrop(1)
	crashing := e.startWorker(t, []string{w.provider}, "ONCEPLAN_CRASH_AT=after-resolve:1")
	crashing.waitExit(t, 60*time.Second)
	require.Equal(t, 1, e.states(t, id)["unknown"], "the call's second target, not yet resolved")
	requireNoDuplicates(t, w, "after the kill")

	survivor := e.startWorker(t, []string{w.provider})
	waitFor(t, 60*time.Second, "the campaign to complete with every target done", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted && e.states(t, id)["done"] == batchTargets
	}, crashing, survivor)
	requireExactlyOnce(t, w, targets)
	var resolvers []string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT array_agg(resolved_by ORDER BY resolved_by) FROM effect WHERE resolved_by IS NOT NULL`).Scan(&resolvers))
	require.Equal(t, []string{"recovery:resend", "recovery:resend"}, resolvers, "both resolved from the service's answer to the call sent again")
}

// TestBatchCallIsNotSentAgainOnceAPersonResolvedOneOfIt: Resend answers a
// call of two with a 500 and creates nothing, so both targets are unknown;
// before recovery sends the call again, a person resolves one of them as
// not delivered, and that target is sent on its own. The call can then not
// be sent again under its key (it would reach that target a second time):
// the other target waits for a person, and the service holds one message
// for the first.
func TestBatchCallIsNotSentAgainOnceAPersonResolvedOneOfIt(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := newWorld(t, "resend-batch")
	rs, prov := w.resend, w.provider
	id := e.campaign(t, "p", 8)
	rs.FailNext(1, 500, nil, "")

	// No maintenance round while the person looks: nothing recovers the
	// unknowns behind their back.
	first := e.startWorkerWith(t, []string{prov}, []string{"--maintenance-interval", "1h"})
	waitFor(t, 60*time.Second, "six done and the failed call's two unknown", func() bool {
		s := e.states(t, id)
		return s["done"] == 6 && s["unknown"] == 2
	}, first)
	first.kill()

	var unknown []int
	for o, s := range e.stateByOrdinal(t, id) {
		if s == "unknown" {
			unknown = append(unknown, o)
		}
	}
	require.Len(t, unknown, 2)
	resolved, resolvedKey := e.targetAt(t, id, unknown[0])
	other, otherKey := e.targetAt(t, id, unknown[1])
	require.Zero(t, rs.CountByRecipient()[resolved], "the failed call created nothing")
	_, err := e.svc.ResolveEffect(e.ctx, e.operator, id, resolvedKey, ledger.NotDelivered, "not in Resend's log")
	require.NoError(t, err)
	_, err = e.svc.Resume(e.ctx, e.operator, id)
	require.NoError(t, err)

	survivor := e.startWorker(t, []string{prov})
	waitFor(t, 60*time.Second, "the resolved target sent on its own", func() bool {
		return e.stateByOrdinal(t, id)[unknown[0]] == "done"
	}, survivor)
	// Maintenance has looked at the other unknown (and sent nothing).
	waitFor(t, 60*time.Second, "maintenance to look at the other unknown", func() bool {
		for _, line := range strings.Split(survivor.Logs(), "\n") {
			if strings.Contains(line, otherKey) && strings.Contains(line, `"msg":"recovered"`) {
				return true
			}
		}
		return false
	}, survivor)
	waitFor(t, 60*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, survivor)
	require.Equal(t, "unknown", e.stateByOrdinal(t, id)[unknown[1]], "the other target waits for a person")
	got := rs.CountByRecipient()
	require.Equal(t, 1, got[resolved], "the resolved target reached once")
	require.Zero(t, got[other], "the call was not sent again")
	requireNoDuplicates(t, w, "in the end")
}

// TestBatchCallOverQuotaIsSentAgainAsACall: Resend answers a call 429
// (nothing created). The call's targets are claimed again, after the
// pause, as a new call under a key of its own — not the first call's key,
// which would be a repeat of a call the service refused, and not one call
// per target: every target once, every message through a batch call.
func TestBatchCallOverQuotaIsSentAgainAsACall(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := newWorld(t, "resend-batch")
	rs, prov := w.resend, w.provider
	id := e.campaign(t, "p", batchTargets)
	targets := e.targets(t, id)
	rs.FailNext(1, 429, map[string]string{"Retry-After": "1"}, "")

	// No process dies here: an owner timeout a busy machine cannot
	// outlast by accident, or maintenance takes the worker for dead and
	// requeues the remainder in jobs that may hold one target, which go
	// as single sends (exactly once still, but not the shape under test).
	wk := e.startWorkerWith(t, []string{prov}, []string{"--owner-timeout", "30s"})
	waitFor(t, 90*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, wk)
	require.Equal(t, map[string]int{"done": batchTargets}, e.states(t, id))
	requireExactlyOnce(t, w, targets)
	for key, n := range rs.CountByIdempotencyKey() {
		require.True(t, strings.HasPrefix(key, "onceplan-batch-"), "%d messages sent under %q, not in a batch call", n, key)
		require.Equal(t, 2, n, "a call of two under %s", key)
	}
}

// TestBatchCallsStayWithinPostmarksCallSize: Postmark takes at most 50 MB
// in one batch call and rejects a larger one whole (the stand-in answers
// it 413). Messages of 8.4 MB each (HTML whose every character JSON
// escapes to six bytes) in jobs of six make calls of five and of one:
// every target done, exactly once, and fewer calls than targets.
func TestBatchCallsStayWithinPostmarksCallSize(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	w := &world{kind: "postmark-batch", provider: "p=" + sink.WithOption(pm.URL(), "concurrency=1&batch=100&settle=1s"), effects: pm.CountByRecipient}
	id := e.campaignOf(t, "p", batchTargets, plan.Payload{
		From: "sender@example.com", Subject: "Hello {{.name}}", HTML: strings.Repeat("&", 1_400_000),
	})
	targets := e.targets(t, id)

	// The default job timeout, not the crash tests' 5 s: a job here sends
	// and records 50 MB, which a busy machine does not do in 5 s, and a
	// job cut short starts over from its claim.
	wk := e.startWorkerWith(t, []string{w.provider}, []string{"--job-timeout", jobs.DefaultJobTimeout.String(),
		"--rescue-after", (jobs.DefaultJobTimeout + jobs.DefaultRescueMargin).String()})
	waitFor(t, 5*time.Minute, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, wk)
	require.Equal(t, map[string]int{"done": batchTargets}, e.states(t, id))
	requireExactlyOnce(t, w, targets)
	require.Less(t, pm.Requests(), batchTargets, "the messages went in calls, not one request each")
}

// TestBatchCallWhoseClaimFailsIsClaimedAgain: a call's claim that fails
// (here the job's time runs out while another transaction holds
// effect_batch, so nothing of the call commits) leaves its targets to the
// job's retry, which claims and sends them: none is skipped, and the
// campaign does not complete with targets never tried.
func TestBatchCallWhoseClaimFailsIsClaimedAgain(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 1)
	w := batchWorld(t, "postmark-batch", 2)
	lock, err := pgtest.NewPool(t, e.owner).Begin(e.ctx)
	require.NoError(t, err)
	defer lock.Rollback(e.ctx) //nolint:errcheck // released below; a failed test leaves it here
	_, err = lock.Exec(e.ctx, `LOCK TABLE effect_batch IN SHARE MODE`)
	require.NoError(t, err)
	id := e.campaign(t, "p", batchTargets)
	targets := e.targets(t, id)

	wk := e.startWorker(t, []string{w.provider})
	waitFor(t, 90*time.Second, "a job to fail its call's claim", func() bool {
		var failed bool
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE kind = 'onceplan_effect' AND cardinality(errors) > 0)`).Scan(&failed))
		return failed
	}, wk)
	require.NoError(t, lock.Rollback(e.ctx))
	waitFor(t, 90*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, wk)
	require.Equal(t, map[string]int{"done": batchTargets}, e.states(t, id))
	requireExactlyOnce(t, w, targets)
}
