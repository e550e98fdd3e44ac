package crashtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/ledger"
)

// TestCrashInTheMiddleOfAMultiTargetJob: jobs of ten targets each (issue
// 19), one worker working through them one at a time, SIGKILLed after the
// provider took the 15th target's call and before its answer was
// recorded — in the middle of the second job. The targets before it are
// settled, the one in flight is recovered as its provider allows (sent
// again with the same id and deduplicated, found by the probe, or unknown
// for a person with SMTP), and the rest are sent once, counted at the
// outside world.
func TestCrashInTheMiddleOfAMultiTargetJob(t *testing.T) {
	t.Parallel()
	const n, crashAt = 40, 15
	runs := 5
	if testing.Short() {
		runs = 1
	}
	for _, kind := range []string{"webhook-dedupe", "webhook-probe", "smtp"} {
		for run := range runs {
			t.Run(fmt.Sprintf("%s/%d", kind, run), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.enq.WorkersPerQueue = 1 // ranges of n/4 = 10 targets
				w := newWorld(t, kind)
				id := e.campaign(t, "p", n)
				targets := e.targets(t, id)
				var jobs, most int
				require.NoError(t, e.pool.QueryRow(e.ctx, `
					SELECT count(*), max(coalesce((args ->> 'count')::int, 1)) FROM river_job WHERE kind = 'onceplan_effect'`).Scan(&jobs, &most))
				require.Equal(t, 4, jobs, "jobs for %d targets", n)
				require.Equal(t, 10, most, "targets per job")

				crashing := e.startWorkerWith(t, []string{w.provider}, []string{"--workers-per-queue", "1"}, fmt.Sprintf("ONCEPLAN_CRASH_AT=after-send:%d", crashAt))
				crashing.waitExit(t, 60*time.Second)
				require.Contains(t, crashing.Logs(), "crash point after-send reached")

				// At the crash: the 14 targets before the one in flight
				// are done, the one in flight is pending, nothing else was
				// claimed; the outside world has the 15 calls made.
				byOrdinal := e.stateByOrdinal(t, id)
				for o := 1; o <= n; o++ { // ordinals count from 1
					want := ""
					switch {
					case o < crashAt:
						want = string(ledger.StateDone)
					case o == crashAt:
						want = string(ledger.StatePending)
					}
					require.Equal(t, want, byOrdinal[o], "target %d at the crash: %v", o, byOrdinal)
				}
				require.Len(t, w.effects(), crashAt, "targets reached at the crash")
				requireNoDuplicates(t, w, "right after the crash")

				survivor := e.startWorker(t, []string{w.provider})
				waitFor(t, 90*time.Second, "the campaign to complete", func() bool {
					return e.campaignState(t, id) == approval.StateCompleted
				}, survivor)
				requireNoDuplicates(t, w, "after recovery")
				states := e.states(t, id)
				if kind == "smtp" {
					require.Equal(t, map[string]int{"done": n - 1, "unknown": 1}, states)
					require.Equal(t, string(ledger.StateUnknown), e.stateByOrdinal(t, id)[crashAt], "the target in flight")
					require.Len(t, w.effects(), n, "every target reached once, the one in flight before the crash")
					return
				}
				require.Equal(t, map[string]int{"done": n}, states)
				requireExactlyOnce(t, w, targets)
			})
		}
	}
}
