package crashtest

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
)

// randomKills runs a 2,000-target campaign on a maildir and on a
// deduplicating webhook with the providers' concurrency set to
// concurrency: kill starts and SIGKILLs worker processes as it likes and
// returns the ones left running, which must then complete the campaign
// with exactly one effect per target.
func randomKills(t *testing.T, concurrency string, kill func(t *testing.T, e *env, w *world, prov string) []*worker) {
	if testing.Short() {
		t.Skip("the random-kill soak is not part of -short")
	}
	for _, kind := range append([]string{"maildir", "webhook-dedupe"}, emailServiceKinds...) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			w := newWorld(t, kind)
			prov := strings.Replace(w.provider, "concurrency=1", "concurrency="+concurrency, 1)
			n := 2000
			if slices.Contains(emailServiceKinds, kind) {
				n = 500 // the email services' stand-ins are slower per message; 500 still spans every kill
			}
			id := e.campaign(t, "p", n)
			targets := e.targets(t, id)

			running := kill(t, e, w, prov)
			waitFor(t, 3*time.Minute, "the campaign to complete", func() bool {
				return e.campaignState(t, id) == approval.StateCompleted
			}, running...)
			require.Equal(t, map[string]int{"done": n}, e.states(t, id))
			requireExactlyOnce(t, w, targets)
		})
	}
}

// TestRandomKills: a 2,000-target campaign, the worker killed with SIGKILL
// five times at random moments and restarted: no target gets two effects
// and none is forgotten.
func TestRandomKills(t *testing.T) {
	t.Parallel()
	randomKills(t, "8", func(t *testing.T, e *env, w *world, prov string) []*worker {
		for kill := range 5 {
			wk := e.startWorker(t, []string{prov})
			// Let it get going, then kill it mid-stride.
			time.Sleep(time.Duration(400+rand.IntN(1200)) * time.Millisecond)
			wk.kill()
			requireNoDuplicates(t, w, "after kill")
			t.Logf("kill %d: %d targets reached so far", kill+1, len(w.effects()))
		}
		return []*worker{e.startWorker(t, []string{prov})}
	})
}

// TestRandomKillsSeveralWorkers: the crash suite with several workers (issue
// 8, scale-out): three worker processes share a 2,000-target campaign, and
// one of them, picked at random, is killed with SIGKILL and replaced,
// eight times, while the others go on. The survivors recover the dead
// workers' attempts while they themselves keep sending: still no target
// gets two effects and none is forgotten.
func TestRandomKillsSeveralWorkers(t *testing.T) {
	t.Parallel()
	randomKills(t, "4", func(t *testing.T, e *env, w *world, prov string) []*worker {
		workers := make([]*worker, 3)
		for i := range workers {
			workers[i] = e.startWorker(t, []string{prov})
		}
		for kill := range 8 {
			time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
			i := rand.IntN(len(workers))
			workers[i].kill()
			requireNoDuplicates(t, w, "after a kill")
			workers[i] = e.startWorker(t, []string{prov})
			t.Logf("kill %d (worker %d): %d targets reached so far", kill+1, i, len(w.effects()))
		}
		return workers
	})
}

// TestConcurrentWorkersDuplicateJobsAndResumes: two worker processes on one
// database, every target's job enqueued twice, and "resume" pressed from
// several places at once — still one effect per target.
func TestConcurrentWorkersDuplicateJobsAndResumes(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"smtp", "webhook-probe"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			w := newWorld(t, kind)
			prov := strings.Replace(w.provider, "concurrency=1", "concurrency=4", 1)
			const n = 200
			id := e.campaign(t, "p", n)
			targets := e.targets(t, id)

			// Every target's job again, by hand (as a buggy enqueuer might).
			c, err := approval.GetCampaign(e.ctx, e.pool, id)
			require.NoError(t, err)
			p, err := plan.GetPlan(e.ctx, e.pool, c.PlanID)
			require.NoError(t, err)
			client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{})
			require.NoError(t, err)
			rows, err := e.pool.Query(e.ctx, `SELECT ordinal FROM target WHERE list_id = $1`, p.ListID)
			require.NoError(t, err)
			var params []river.InsertManyParams
			for rows.Next() {
				a := jobs.EffectArgs{PlanID: p.ID, Provider: p.Provider}
				require.NoError(t, rows.Scan(&a.Ordinal))
				params = append(params, river.InsertManyParams{Args: a})
			}
			require.NoError(t, rows.Err())
			_, err = client.InsertManyFast(e.ctx, params)
			require.NoError(t, err)

			w1 := e.startWorker(t, []string{prov})
			w2 := e.startWorker(t, []string{prov})
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						_, err := e.svc.Resume(e.ctx, e.operator, id)
						errs <- err
						time.Sleep(50 * time.Millisecond)
					}
				}()
			}
			await.Group(t, &wg, 5*time.Minute, "the concurrent resumes to end")
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			waitFor(t, 2*time.Minute, "the campaign to complete", func() bool {
				return e.campaignState(t, id) == approval.StateCompleted
			}, w1, w2)
			require.Equal(t, map[string]int{"done": n}, e.states(t, id))
			requireExactlyOnce(t, w, targets)
		})
	}
}
