package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// runPageSize is how many targets one page of the run table shows.
const runPageSize = 50

func validState(s string) bool {
	return s == "" || contains(view.TargetStates, s)
}

func (s *Server) handleRun(c echo.Context) error { return s.renderRun(c, false) }

// handleRunLive answers the run page's live parts alone — its notes and
// its page of the target table, with the page's filter and cursor — for
// the live script to put in place of the page's.
func (s *Server) handleRunLive(c echo.Context) error { return s.renderRun(c, true) }

func (s *Server) renderRun(c echo.Context, liveParts bool) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	p, err := s.runView(c, camp, !liveParts)
	if err != nil {
		return err
	}
	if liveParts {
		return s.render(c, http.StatusOK, view.RunLive(p))
	}
	return s.render(c, http.StatusOK, view.Run(p))
}

// runView gathers the run page: the counts, one page of targets (the
// request's filter and cursor), what a resume would queue and what a
// stopped worker holds; with buttons (the full page, not the live parts),
// the lifecycle's answer for each and who may decide when the user may not.
func (s *Server) runView(c echo.Context, camp approval.Campaign, buttons bool) (view.RunView, error) {
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return view.RunView{}, err
	}
	counts, err := s.planCounts(ctx, pl)
	if err != nil {
		return view.RunView{}, err
	}
	f := view.TargetFilter{State: c.QueryParam("state"), Q: strings.TrimSpace(c.QueryParam("q")), After: c.QueryParam("after")}
	if !validState(f.State) {
		return view.RunView{}, echo.NewHTTPError(http.StatusBadRequest, "state must be one of "+strings.Join(view.TargetStates, ", "))
	}
	page, err := queryTargets(ctx, s.cfg.Pool, audit.TargetQuery{
		ListID: pl.ListID, Count: pl.TargetCount, State: f.State, Prefix: normalizePrefix(f.Q),
		After: f.After, Limit: runPageSize,
	}, &counts)
	if err != nil {
		return view.RunView{}, err
	}
	// What a resume would queue, and what a stopped worker holds, matter
	// only where the lifecycle has a resume (running, paused, completed);
	// what it would queue only beside the buttons (it reads the whole
	// list, and the live parts are polled every few seconds).
	var rem approval.Remainder
	if approval.Allowed(anOperator, camp, auth.ActionResume) == nil {
		count := s.cfg.Approval.Stalled
		if buttons {
			count = s.cfg.Approval.Remaining
		}
		if rem, err = count(ctx, camp); err != nil {
			return view.RunView{}, err
		}
	}
	serving, err := s.cfg.Approval.Serving(ctx, camp)
	if err != nil {
		return view.RunView{}, err
	}
	a := mustActor(c)
	p := view.RunView{WorkerNote: serving.Warning, ETANote: s.etaNote(camp, counts, serving.Live), RunPage: view.RunPage{
		Page: s.page(c, camp.Name, "campaigns"), Campaign: campaignView(camp), PlanHash: pl.Hash,
		PlanVersion: pl.Version, Counts: counts, Filter: f, Next: page.Next, CanOperate: auth.Authorize(a, auth.ActionResolve) == nil,
	}, ResumeCount: rem.Queue, ResumeLeft: rem.Left, StalledNote: stalledNote(camp, rem)}
	if p.Why, err = s.runWhy(ctx, camp, pl, counts); err != nil { // campaign_run_why.go
		return view.RunView{}, err
	}
	p.Campaign.Outcome = p.Why.Outcome
	if buttons {
		// The buttons are the campaign lifecycle's answer (approval.Allowed),
		// the one the actions themselves check; resume only when it would
		// do something: run a paused campaign again, or queue targets.
		may := func(action auth.Action) bool { return approval.Allowed(a, camp, action) == nil }
		p.CanStart, p.CanPause, p.CanCancel = may(auth.ActionStart), may(auth.ActionPause), may(auth.ActionCancel)
		p.CanResume = may(auth.ActionResume) && (camp.State == approval.StatePaused || rem.Queue > 0)
		p.CanEvidence = counts.Unknown > 0 && may(auth.ActionResolve) // campaign_evidence.go
		if p.OperatorHint, err = s.operatorHint(ctx, a, camp); err != nil {
			return view.RunView{}, err
		}
	}
	if camp.Version != pl.Version {
		// A newer version is being drafted: this plan's run still shows.
		p.Error = "A newer version of this campaign is " + strings.ReplaceAll(string(camp.State), "_", " ") + "; this page shows the approved version."
	}
	for _, r := range page.Rows {
		p.Rows = append(p.Rows, r.TargetRow)
	}
	if page.ScannedTo > 0 {
		p.Note = "Searched targets up to #" + itoa(page.ScannedTo) + " of " + itoa(pl.TargetCount) + " for this page; the next page searches on."
	}
	return p, nil
}

// etaNote says how long the targets not sent yet take at the provider's
// configured rate limit, while the campaign runs: "" when the provider
// has no limit, is not configured in this process, or nothing is left.
// An account's rate (rate_scope=account) is one budget however many
// processes send; a process's own is one per live worker process.
func (s *Server) etaNote(camp approval.Campaign, counts view.Counts, live int) string {
	left := counts.NotStarted + counts.Pending
	if camp.State != approval.StateRunning || left == 0 {
		return ""
	}
	prov, ok := s.cfg.Providers.Get(camp.Provider)
	if !ok {
		return ""
	}
	perSecond, scope := provider.RateOf(prov)
	if perSecond <= 0 {
		return ""
	}
	limit := "the account's limit of " + rateWords(perSecond) + ", shared by every process"
	total := perSecond
	if scope != provider.RateScopeAccount {
		processes := max(live, 1)
		total = perSecond * float64(processes)
		limit = "its limit of " + rateWords(perSecond) + " per process, with " + view.Count(processes, "live worker process", "live worker processes")
	}
	d := time.Duration(float64(left) / total * float64(time.Second))
	return "At " + camp.Provider + "'s configured rate (" + limit + "), the " + view.Targets(left) + " not sent yet take at least " + durationWords(d) +
		": done around " + s.cfg.Now().Add(d).UTC().Format("15:04") + " UTC."
}

// rateWords words a rate in calls per second ("2 calls a second", "1 call
// every 30 s").
func rateWords(perSecond float64) string {
	if perSecond >= 1 {
		return strconv.FormatFloat(perSecond, 'f', -1, 64) + " calls a second"
	}
	return "1 call every " + durationWords(time.Duration(float64(time.Second)/perSecond))
}

// durationWords words a duration for a person, rounded: "45 s", "12 min",
// "3 h 20 min".
func durationWords(d time.Duration) string {
	switch {
	case d < 90*time.Second:
		return seconds(d)
	case d < 90*time.Minute:
		return strconv.Itoa(int((d+time.Minute/2)/time.Minute)) + " min"
	}
	m := int((d + time.Minute/2) / time.Minute)
	return strconv.Itoa(m/60) + " h " + strconv.Itoa(m%60) + " min"
}

// stalledNote says what happens to the targets a stopped worker holds
// (approval.Remainder.Stalled), and when: "" when there are none.
func stalledNote(camp approval.Campaign, rem approval.Remainder) string {
	if rem.Stalled == 0 {
		return ""
	}
	what := "A worker process stopped (not heard from for " + seconds(rem.SilentFor) + ") while it held " + view.Targets(rem.Stalled) + ": "
	when := "within " + seconds(rem.RequeueIn) + ", once it has been silent for the owner timeout (" + seconds(rem.SilentFor+rem.RequeueIn) + ")"
	if rem.RequeueIn <= 0 {
		when = "at the next maintenance round, in a few seconds"
	}
	switch camp.State {
	case approval.StateRunning:
		return what + "they are requeued automatically " + when + ". There is nothing to press."
	case approval.StatePaused:
		return what + "once the campaign is resumed they are requeued automatically " + when + "."
	}
	return ""
}

// seconds words a duration for a person, in whole seconds ("22 s").
func seconds(d time.Duration) string {
	return strconv.Itoa(int((d+time.Second/2)/time.Second)) + " s"
}

// countsJSON is the live counts the run page polls.
type countsJSON struct {
	State  string      `json:"state"`
	Counts view.Counts `json:"counts"`
}

func (s *Server) handleCounts(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return err
	}
	counts, err := s.planCounts(ctx, pl)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, countsJSON{State: string(camp.State), Counts: counts})
}

// afterAction redirects to the run page once an action changed the plan.
func (s *Server) afterAction(c echo.Context, camp approval.Campaign, flash string) error {
	if camp.PlanID != 0 {
		if p, err := plan.GetPlan(c.Request().Context(), s.cfg.Pool, camp.PlanID); err == nil {
			s.counts.Forget(p.ListID)
		}
	}
	return redirect(c, "/campaigns/"+camp.ID+"/run", flash)
}

func (s *Server) handleStart(c echo.Context) error {
	res, err := s.cfg.Approval.Start(c.Request().Context(), mustActor(c), c.Param("id"))
	if err != nil {
		return err
	}
	return s.afterAction(c, res.Campaign, "started")
}

func (s *Server) handlePause(c echo.Context) error {
	res, err := s.cfg.Approval.Pause(c.Request().Context(), mustActor(c), c.Param("id"), strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	return s.afterAction(c, res.Campaign, "paused")
}

// handleResume runs the remainder. A completed campaign with nothing left
// to queue stays completed (the workflow makes it a no-op), and the flash
// says so.
func (s *Server) handleResume(c echo.Context) error {
	res, err := s.cfg.Approval.Resume(c.Request().Context(), mustActor(c), c.Param("id"))
	if err != nil {
		return err
	}
	if res.Campaign.State == approval.StateCompleted {
		return s.afterAction(c, res.Campaign, "nothing-to-resume")
	}
	return s.afterAction(c, res.Campaign, "resumed")
}

func (s *Server) handleCancel(c echo.Context) error {
	res, err := s.cfg.Approval.Cancel(c.Request().Context(), mustActor(c), c.Param("id"), strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	return s.afterAction(c, res.Campaign, "cancelled")
}
