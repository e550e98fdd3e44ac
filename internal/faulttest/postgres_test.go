package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
)

// pgRun is a running system on a PostgreSQL of the test's own: an
// `onceplan serve` and an `onceplan worker` process, three providers (a
// maildir, a deduplicating webhook and an SMTP relay) and one campaign on
// each, running.
type pgRun struct {
	pg        *pgServer
	env       *env
	serve     *proc
	worker    *proc
	base      string // serve's URL
	providers []string
	worlds    []*world
	ids       []string
	targets   []map[string]ledger.Key
	// inFlight is how many calls can be out at once: each provider's
	// concurrency in each of the two processes.
	inFlight int
}

// pgTargets per campaign. Each of the two processes sends at most 20 a
// second per provider, so a campaign takes about 8 s undisturbed: long
// enough for a fault to land in the middle of it.
const pgTargets = 300

// pgRunOpts shape a pgRun.
type pgRunOpts struct {
	concurrency int      // calls in flight per provider and process
	flags       []string // recovery flags of both processes
}

// fastRecovery: processes silent for 1.5 s count as dead, so recovery by
// maintenance races the jobs of processes that are in fact alive.
var fastRecovery = pgRunOpts{concurrency: 4, flags: fastFlags}

// liveOwners: the default --owner-timeout (30 s) outlasts a restart, so
// nobody is declared dead and the jobs themselves must settle what the
// restart left in doubt; one call at a time per provider.
var liveOwners = pgRunOpts{concurrency: 1, flags: flagsWith("--owner-timeout", "30s")}

func startPGRun(t *testing.T, o pgRunOpts) *pgRun {
	t.Helper()
	r := &pgRun{pg: newPGServer(t)}
	r.env = newEnvAt(t, r.pg.url, ownerTimeoutOf(t, o.flags))
	hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hook.Close)
	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	opts := fmt.Sprintf("rate=20/s&concurrency=%d", o.concurrency)
	r.worlds = []*world{
		maildirWorld(t, "md", t.TempDir(), opts),
		webhookWorld("wh", hook, hook.URL(), opts),
		smtpWorld("sm", relay, relay.URL(), opts),
	}
	for _, w := range r.worlds {
		r.providers = append(r.providers, w.provider)
	}
	r.inFlight = len(r.worlds) * o.concurrency * 2
	r.serve, r.base = startServe(t, r.pg.url, r.providers, o.flags, nil)
	r.worker = startWorker(t, r.pg.url, r.providers, o.flags)
	for _, w := range r.worlds {
		id := r.env.campaign(t, w.name, w.name, pgTargets)
		r.ids = append(r.ids, id)
		r.targets = append(r.targets, r.env.targets(t, id))
	}
	return r
}

// reached is how many targets the outside worlds have seen, in total.
func (r *pgRun) reached() int {
	n := 0
	for _, w := range r.worlds {
		n += len(w.effects())
	}
	return n
}

// waitMidway waits until about a quarter of the targets have been reached.
func (r *pgRun) waitMidway(t *testing.T) {
	// (Every provider, SMTP included, is paced at the same rate.)
	t.Helper()
	waitFor(t, time.Minute, "the campaigns to be under way", func() bool {
		for _, w := range r.worlds {
			if len(w.effects()) < pgTargets/4 {
				return false
			}
		}
		return true
	}, r.serve, r.worker)
	for _, w := range r.worlds {
		require.Less(t, len(w.effects()), pgTargets, "the fault must land mid-campaign")
	}
}

// requireFinished waits for the campaigns to complete and checks them at
// the outside worlds (0 duplicates, 0 missing) and in the ledger (every
// target done, the audit holds). The maildir and the webhook settle every
// doubt themselves; on SMTP, which can neither deduplicate nor be asked,
// the attempts the fault caught in flight are unknown — never sent again —
// and a person resolves each from the relay's log, as in the crash suite.
func (r *pgRun) requireFinished(t *testing.T, procs ...*proc) {
	t.Helper()
	for i, id := range r.ids {
		name := r.worlds[i].name
		if name != "sm" {
			waitFor(t, 3*time.Minute, "campaign "+name+" to complete with every target done", func() bool {
				return r.env.completed(id, pgTargets)
			}, procs...)
			continue
		}
		waitFor(t, 3*time.Minute, "campaign "+name+" to complete", func() bool { return r.env.campaignDone(id) }, procs...)
		requireNoDuplicates(t, r.worlds[i], "before any resolution")
		got := r.worlds[i].effects()
		unknown, notDelivered := 0, 0
		for target, key := range r.targets[i] {
			cur, err := ledger.NewStore(r.env.pool).Current(r.env.ctx, key)
			require.NoError(t, err)
			if cur.State != ledger.StateUnknown {
				require.Equal(t, ledger.StateDone, cur.State, "%s: %+v", target, cur)
				continue
			}
			unknown++
			outcome := ledger.Delivered
			if got[target] == 0 {
				outcome, notDelivered = ledger.NotDelivered, notDelivered+1
			}
			_, err = r.env.svc.ResolveEffect(r.env.ctx, r.env.operator, id, string(key), outcome, "checked the relay's log")
			require.NoError(t, err)
		}
		_, err := r.env.svc.Resume(r.env.ctx, r.env.operator, id)
		require.NoError(t, err)
		t.Logf("sm: %d attempts in flight at the fault were unknown (%d of them had not reached the relay); resolved by a person", unknown, notDelivered)
		waitFor(t, 3*time.Minute, "campaign sm to complete with every target done after the resolutions", func() bool {
			return r.env.completed(id, pgTargets)
		}, procs...)
	}
	for i, id := range r.ids {
		requireExactlyOnce(t, r.worlds[i], r.targets[i])
		require.Equal(t, map[string]int{"done": pgTargets}, r.env.mustStates(t, id))
		r.env.requireHolds(t, id)
		rows, resent := 0, 0
		for _, a := range r.env.attempts(t, id) {
			rows++
			if slices.Contains(a.Kinds, "resend") {
				resent++
			}
		}
		t.Logf("%s: %d ledger rows for %d targets; %d settled by recovery sending again with the same effect id; %d job runs failed on the fault and were retried",
			r.worlds[i].name, rows, pgTargets, resent, r.env.jobErrors(t, id))
	}
}

// TestPostgresRestartFast: `pg_ctl restart -m fast` in the middle of three
// campaigns; the processes reconnect by themselves and every campaign
// completes with every target reached exactly once. The processes keep the
// default owner timeout, so no one is declared dead: the effects the
// restart caught between claim and answer are settled by their own jobs.
func TestPostgresRestartFast(t *testing.T) {
	slow(t)
	t.Parallel()
	r := startPGRun(t, liveOwners)
	r.waitMidway(t)
	before := r.reached()
	r.pg.restart("fast")
	t.Logf("PostgreSQL restarted (-m fast) after %d of %d effects", before, len(r.worlds)*pgTargets)
	r.requireFinished(t, r.serve, r.worker)
	requireAlive(t, r.serve, r.worker)
	require.Equal(t, 200, httpGet(r.base+"/readyz"))
}

// TestPostgresRestartImmediate: the same with `pg_ctl restart -m
// immediate`, which ends PostgreSQL without a checkpoint (its crash
// recovery replays the WAL on the way up).
func TestPostgresRestartImmediate(t *testing.T) {
	slow(t)
	t.Parallel()
	r := startPGRun(t, liveOwners)
	r.waitMidway(t)
	before := r.reached()
	r.pg.restart("immediate")
	t.Logf("PostgreSQL restarted (-m immediate) after %d of %d effects", before, len(r.worlds)*pgTargets)
	r.requireFinished(t, r.serve, r.worker)
	requireAlive(t, r.serve, r.worker)
	require.Equal(t, 200, httpGet(r.base+"/readyz"))
}

// outage is how long PostgreSQL stays away in TestPostgresUnreachable30s.
const outage = 30 * time.Second

// TestPostgresUnreachable30s: PostgreSQL stopped for 30 s in the middle of
// three campaigns. Meanwhile no effect starts (a claim must commit first),
// /readyz answers 503, the processes stay up and back off rather than spin;
// after PostgreSQL returns /readyz answers 200 again and every campaign
// completes with every target reached exactly once.
func TestPostgresUnreachable30s(t *testing.T) {
	slow(t)
	t.Parallel()
	r := startPGRun(t, fastRecovery)
	r.waitMidway(t)
	require.Equal(t, 200, httpGet(r.base+"/readyz"))

	r.pg.stop("fast")
	down := time.Now()
	logsBefore := len(r.serve.Logs()) + len(r.worker.Logs())
	linesBefore := strings.Count(r.serve.Logs(), "\n") + strings.Count(r.worker.Logs(), "\n")
	t.Logf("PostgreSQL stopped after %d of %d effects", r.reached(), len(r.worlds)*pgTargets)

	// Calls in flight at the stop may still land, but no call can start:
	// a claim must commit first. So whatever the timing, at most the
	// calls that can be out at once arrive after the stop.
	atStop := r.reached()
	statuses := map[int]int{}
	for time.Since(down) < outage {
		statuses[httpGet(r.base+"/readyz")]++
		time.Sleep(500 * time.Millisecond)
	}
	requireAlive(t, r.serve, r.worker)
	require.LessOrEqual(t, r.reached()-atStop, r.inFlight, "no effect may start while the ledger cannot record its claim")
	require.Positive(t, statuses[503], "/readyz answers 503 while the database is away: %v", statuses)
	require.Equal(t, statuses[503], statuses[503]+statuses[200]+statuses[0],
		"/readyz answered every request with 503 while the database was away: %v", statuses)
	lines := strings.Count(r.serve.Logs(), "\n") + strings.Count(r.worker.Logs(), "\n") - linesBefore
	bytes := len(r.serve.Logs()) + len(r.worker.Logs()) - logsBefore
	t.Logf("during the %s outage: /readyz %v; the two processes logged %d lines (%d bytes)", outage, statuses, lines, bytes)
	// Backing off: every loop that touches the database is paced — the
	// heartbeat (every --owner-timeout/6, here 250 ms), maintenance
	// (--maintenance-interval, here 300 ms), River's fetch poll (1 s per
	// queue) and its elector and notifier (growing sleeps) — so the two
	// processes log a few dozen lines a second with these test intervals,
	// a few a minute with the defaults. A process retrying in a tight loop
	// would log thousands a second.
	require.Less(t, lines, 100*int(outage/time.Second), "the processes must back off while the database is away")

	r.pg.start()
	back := time.Now()
	waitFor(t, 30*time.Second, "/readyz to answer 200 again", func() bool {
		return httpGet(r.base+"/readyz") == 200
	}, r.serve)
	t.Logf("/readyz answered 200 %s after PostgreSQL was back", time.Since(back).Round(10*time.Millisecond))
	r.requireFinished(t, r.serve, r.worker)
	requireAlive(t, r.serve, r.worker)
	t.Logf("every campaign completed %s after PostgreSQL was back", time.Since(back).Round(100*time.Millisecond))
}

// TestOnceplanAndPostgresKilledTogether: every Onceplan process SIGKILLed
// and PostgreSQL stopped with -m immediate at the same moment, then both
// started again: every campaign completes, every target reached exactly
// once. (Onceplan alone SIGKILLed while PostgreSQL keeps running, at each
// point of the effect protocol, is internal/crashtest's TestCrashMatrix
// and TestRandomKills.)
func TestOnceplanAndPostgresKilledTogether(t *testing.T) {
	slow(t)
	t.Parallel()
	r := startPGRun(t, fastRecovery)
	r.waitMidway(t)

	var wg sync.WaitGroup
	for _, p := range []*proc{r.serve, r.worker} {
		wg.Add(1)
		go func() { defer wg.Done(); p.kill() }()
	}
	r.pg.stop("immediate")
	wg.Wait()
	for _, w := range r.worlds {
		requireNoDuplicates(t, w, "right after the kill")
	}
	t.Logf("killed Onceplan and PostgreSQL after %d of %d effects", r.reached(), len(r.worlds)*pgTargets)

	r.pg.start()
	serve, _ := startServe(t, r.pg.url, r.providers, fastRecovery.flags, nil)
	worker := startWorker(t, r.pg.url, r.providers, fastRecovery.flags)
	r.requireFinished(t, serve, worker)
	requireAlive(t, serve, worker)
}
