package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// finishJobs marks a plan's jobs finished, as River does once they ran.
func (b *bundle) finishJobs(p plan.Plan) {
	b.t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), finalized_at = now()
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint = $1`, p.ID)
	require.NoError(b.t, err)
}

// complete marks a running campaign completed, as maintenance does.
func (b *bundle) complete(id string) {
	b.t.Helper()
	done, err := b.svc.CompleteIfDone(context.Background(), id, func(context.Context, pgx.Tx, approval.Campaign) (bool, error) { return true, nil })
	require.NoError(b.t, err)
	require.True(b.t, done)
}

// TestResumeOfferedOnlyWhenItQueues: a completed campaign with nothing
// left offers no resume, and a press anyway (an old page, a script) leaves
// it completed and the trail as it was; with a failed target the button
// says how many targets it queues.
func TestResumeOfferedOnlyWhenItQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	op := b.as["operator"]
	run := "/campaigns/" + c.ID + "/run"

	// Running, every target with its job: nothing to resume.
	d := parse(t, op.get(run))
	require.Equal(t, 0, tid(d, "action-resume").Length())
	require.Equal(t, 1, tid(d, "action-pause").Length())

	for i := 1; i <= 3; i++ {
		b.effect(p, i, ledger.StateDone, "250 ok")
	}
	b.finishJobs(p)
	b.complete(c.ID)
	d = parse(t, op.get(run))
	require.Equal(t, "completed", tid(d, "campaign-name").Parent().Find(`[data-testid="state"]`).AttrOr("data-state", ""))
	require.Equal(t, 0, tid(d, "action-resume").Length(), "nothing would be resumed")

	trail := b.events(c.ID)
	rec := op.post(run[:len(run)-len("/run")]+"/resume", nil)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, run+"?flash=nothing-to-resume", rec.Header().Get("Location"))
	require.Equal(t, approval.StateCompleted, b.campaign(c.ID).State)
	require.Equal(t, trail, b.events(c.ID), "no resume, no second complete")
	require.Contains(t, tid(parse(t, op.follow(rec)), "flash").Text(), "stays completed")

	// A target the provider refused for good: resume queues it, and says so.
	c, p = b.started(campaignOpts{Targets: csvOf(3)})
	run = "/campaigns/" + c.ID + "/run"
	b.effect(p, 1, ledger.StateDone, "250 ok")
	b.effect(p, 2, ledger.StateDone, "250 ok")
	b.effect(p, 3, ledger.StateFailed, "550 mailbox full")
	b.finishJobs(p)
	b.complete(c.ID)
	d = parse(t, op.get(run))
	require.Equal(t, "Resume the remainder: 1 target", strings.TrimSpace(tid(d, "action-resume").Text()))
	require.Equal(t, http.StatusSeeOther, op.post("/campaigns/"+c.ID+"/resume", nil).Code)
	require.Equal(t, approval.StateRunning, b.campaign(c.ID).State)
	rem, err := b.svc.Remaining(context.Background(), b.campaign(c.ID))
	require.NoError(t, err)
	require.Zero(t, rem.Queue, "the failed target has its job again")

	// Paused, resume always runs it again; the button says what it sends:
	// the failed target, whose job waits.
	require.Equal(t, http.StatusSeeOther, op.post("/campaigns/"+c.ID+"/pause", nil).Code)
	require.Equal(t, "Resume and send the 1 target left", strings.TrimSpace(tid(parse(t, op.get(run)), "action-resume").Text()))
}

// TestResumeOfAPausedCampaignSaysHowManyItSends: a paused campaign's
// targets keep their jobs (they wait), so a resume queues nothing new —
// and its button still says how many targets it sends, and how many it
// queues anew when some have no job.
func TestResumeOfAPausedCampaignSaysHowManyItSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	op := b.as["operator"]
	run := "/campaigns/" + c.ID + "/run"
	b.effect(p, 1, ledger.StateDone, "250 ok")
	require.Equal(t, http.StatusSeeOther, op.post("/campaigns/"+c.ID+"/pause", nil).Code)
	require.Equal(t, "Resume and send the 2 targets left", strings.TrimSpace(tid(parse(t, op.get(run)), "action-resume").Text()))

	// Their jobs ended (as a failure with no try left ends one): a resume
	// queues them anew, and says so.
	b.finishJobs(p)
	require.Equal(t, "Resume and send the 2 targets left (2 queued anew)", strings.TrimSpace(tid(parse(t, op.get(run)), "action-resume").Text()))
}

// stallJobs makes a plan's jobs for ordinals look held by a worker
// process last heard from silentFor ago (as after a kill -9).
func (b *bundle) stallJobs(p plan.Plan, silentFor time.Duration, ordinals ...int) {
	b.t.Helper()
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `INSERT INTO worker_process (owner, host, pid, seen_at) VALUES ('killed/1', 'test', 1, now() - $1::interval)
		ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at`, silentFor.String())
	require.NoError(b.t, err)
	_, err = b.pool.Exec(ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['killed/1']
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint = $1 AND (args ->> 'ordinal')::int = ANY($2)`, p.ID, ordinals)
	require.NoError(b.t, err)
}

// TestRestartNoteSaysWhenTargetsAreRequeued: after a worker process died
// holding targets, the run page says that they are requeued by themselves
// and when, and offers no resume while they are.
func TestRestartNoteSaysWhenTargetsAreRequeued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(5)})
	op := b.as["operator"]
	run := "/campaigns/" + c.ID + "/run"

	// Heard from 3 s ago: alive as far as anyone can tell.
	b.stallJobs(p, 3*time.Second, 1, 2)
	require.Equal(t, 0, tid(parse(t, op.get(run)), "restart-note").Length())

	// Silent for 12 s, inside the owner timeout (30 s by default).
	b.stallJobs(p, 12*time.Second, 1, 2)
	d := parse(t, op.get(run))
	note := tid(d, "restart-note").Text()
	require.Contains(t, note, "A worker process stopped (not heard from for 12 s) while it held 2 targets")
	require.Contains(t, note, "requeued automatically within 18 s, once it has been silent for the owner timeout (30 s)")
	require.Equal(t, 0, tid(d, "action-resume").Length(), "there is nothing to press")
	require.Equal(t, "5", tid(d, "count-not_started").Text())

	// Past the owner timeout: maintenance's next round requeues them; a
	// resume would too, and says how many.
	b.stallJobs(p, 40*time.Second, 1, 2)
	d = parse(t, op.get(run))
	require.Contains(t, tid(d, "restart-note").Text(), "at the next maintenance round")
	require.Equal(t, "Resume the remainder: 2 targets", strings.TrimSpace(tid(d, "action-resume").Text()))

	// A target it held that is done is not requeued, nor counted.
	b.effect(p, 1, ledger.StateDone, "250 ok")
	require.Contains(t, tid(parse(t, op.get(run)), "restart-note").Text(), "while it held 1 target:")
}

// TestRunLiveParts: the live fragment is the page's notes and its page of
// the target table as they are now, for the page's filter and cursor.
func TestRunLiveParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(120)})
	op := b.as["operator"]
	live := "/campaigns/" + c.ID + "/run/live"

	d := parse(t, op.get("/campaigns/"+c.ID+"/run"))
	require.Equal(t, live, tid(d, "live").AttrOr("data-live-url", ""))
	require.Equal(t, 1, d.Find("#run-targets").Length())
	require.Equal(t, 1, d.Find("#run-notes").Length())

	rec := op.get(live + "?after=50")
	require.Equal(t, http.StatusOK, rec.Code)
	d = parse(t, rec)
	require.Equal(t, 0, tid(d, "signed-in-as").Length(), "the parts alone, no layout")
	require.Equal(t, "51", tid(d, "target-row").First().AttrOr("data-ordinal", ""))
	require.Equal(t, "not_started", tid(d, "target-row").First().AttrOr("data-state", ""))
	require.Equal(t, "/campaigns/"+c.ID+"/run?after=100", tid(d, "next-page").AttrOr("href", ""))

	b.effect(p, 51, ledger.StateDone, "250 ok")
	b.effect(p, 52, ledger.StateUnknown, "timeout")
	d = parse(t, op.get(live+"?after=50"))
	require.Equal(t, "done", tid(d, "target-row").First().AttrOr("data-state", ""))
	require.Equal(t, 1, d.Find("#run-notes").Length())

	d = parse(t, op.get(live+"?"+url.Values{"state": {"done"}}.Encode()))
	require.Equal(t, 1, tid(d, "target-row").Length())
	require.Equal(t, http.StatusBadRequest, op.get(live+"?state=bogus").Code)
	require.Equal(t, http.StatusSeeOther, b.anon().get(live).Code, "signed-in users only")
}

// TestWhoStartsIsSaid: a user who may not start a campaign is told who
// may, and a proposer told to let someone else approve is told who may
// and where approvers are added.
func TestWhoStartsIsSaid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	d := parse(t, b.as["proposer"].get("/campaigns/"+c.ID+"/approval"))
	why := tid(d, "cannot-approve").Text()
	require.Contains(t, why, "approver@example.com")
	require.Contains(t, why, "Admin page")
	require.Contains(t, why, "onceplan user add --email EMAIL --role approver")

	_, err := b.svc.Approve(context.Background(), b.as["approver"].actor, c.ID, b.hash(c))
	require.NoError(t, err)
	run := "/campaigns/" + c.ID + "/run"
	d = parse(t, b.as["approver"].get(run))
	require.Equal(t, 0, tid(d, "action-start").Length())
	hint := tid(d, "operator-hint").Text()
	require.Contains(t, hint, "An operator starts this campaign")
	require.Contains(t, hint, "operator@example.com")
	require.NotContains(t, hint, "approver@example.com")
	d = parse(t, b.as["operator"].get(run))
	require.Equal(t, 1, tid(d, "action-start").Length())
	require.Equal(t, 0, tid(d, "operator-hint").Length())
}

// TestRunPageSaysNoLiveWorkerServesTheProvider: a started campaign whose
// provider no live worker process serves says so on its run page (and in
// the page's live part), until a process serving it beats.
func TestRunPageSaysNoLiveWorkerServesTheProvider(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.started(campaignOpts{Targets: csvOf(2)})
	op := b.as["operator"]
	run := "/campaigns/" + c.ID + "/run"
	want := `No live worker process serves provider "` + c.Provider + `", so nothing of this campaign is sent: run onceplan serve or onceplan worker with --provider ` + c.Provider + `=URL.`
	require.Equal(t, want, strings.TrimSpace(tid(parse(t, op.get(run)), "no-worker-note").Text()))
	require.Equal(t, want, strings.TrimSpace(tid(parse(t, op.get(run+"/live")), "no-worker-note").Text()))

	_, err := b.pool.Exec(context.Background(), `INSERT INTO worker_process (owner, host, pid, providers) VALUES ('w/1/x', 'w', 1, $1)`, []string{c.Provider})
	require.NoError(t, err)
	require.Equal(t, 0, tid(parse(t, op.get(run)), "no-worker-note").Length())
}

// TestRunPageSaysWhenTheRestIsSentAtTheRateLimit: while a campaign runs
// through a rate-limited provider, the run page says how long its targets
// not sent yet take at the configured rate — the account's one budget, or
// one per live worker process for a process's own — and says nothing for
// a provider without a limit or a campaign that does not run.
func TestRunPageSaysWhenTheRestIsSentAtTheRateLimit(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	note := func(b *bundle, id string) string {
		b.srv.cfg.Now = func() time.Time { return at }
		return strings.TrimSpace(tid(parse(t, b.as["operator"].get("/campaigns/"+id+"/run/live")), "eta-note").Text())
	}

	account := setupWith(t, "rate=2/s&rate_scope=account")
	c, _ := account.started(campaignOpts{Targets: csvOf(240)})
	require.Equal(t, "At outbox's configured rate (the account's limit of 2 calls a second, shared by every process), the 240 targets not sent yet take at least 2 min: done around 10:02 UTC.", note(account, c.ID))

	perProcess := setupWith(t, "rate=30/m")
	c, _ = perProcess.started(campaignOpts{Targets: csvOf(30)})
	require.Equal(t, "At outbox's configured rate (its limit of 1 call every 2 s per process, with 1 live worker process), the 30 targets not sent yet take at least 60 s: done around 10:01 UTC.", note(perProcess, c.ID))
	for _, owner := range []string{"w/1/a", "w/2/b"} {
		_, err := perProcess.pool.Exec(context.Background(), `INSERT INTO worker_process (owner, host, pid, providers) VALUES ($1, 'w', 1, '{outbox}')`, owner)
		require.NoError(t, err)
	}
	require.Contains(t, note(perProcess, c.ID), "with 2 live worker processes), the 30 targets not sent yet take at least 30 s")
	_, err := perProcess.svc.Pause(context.Background(), perProcess.as["operator"].actor, c.ID, "lunch")
	require.NoError(t, err)
	require.Empty(t, note(perProcess, c.ID), "a paused campaign sends nothing")

	unlimited := setup(t)
	c, _ = unlimited.started(campaignOpts{Targets: csvOf(30)})
	require.Empty(t, note(unlimited, c.ID), "no limit, no estimate")
}
