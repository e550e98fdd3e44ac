package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/audit"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// runPageSize is how many targets one page of the run table shows.
const runPageSize = 50

func validState(s string) bool {
	return s == "" || contains(view.TargetStates, s)
}

func (s *Server) handleRun(c echo.Context) error {
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
	f := view.TargetFilter{State: c.QueryParam("state"), Q: strings.TrimSpace(c.QueryParam("q")), After: c.QueryParam("after")}
	if !validState(f.State) {
		return echo.NewHTTPError(http.StatusBadRequest, "state must be one of "+strings.Join(view.TargetStates, ", "))
	}
	page, err := queryTargets(ctx, s.cfg.Pool, audit.TargetQuery{
		ListID: pl.ListID, Count: pl.TargetCount, State: f.State, Prefix: normalizePrefix(f.Q),
		After: f.After, Limit: runPageSize,
	}, &counts)
	if err != nil {
		return err
	}
	// The buttons are the campaign lifecycle's answer (approval.Allowed),
	// the one the actions themselves check.
	a := mustActor(c)
	may := func(action approval.Action) bool { return approval.Allowed(a, camp, action) == nil }
	p := view.RunPage{
		Page: s.page(c, camp.Name, "campaigns"), Campaign: campaignView(camp), PlanHash: pl.Hash,
		PlanVersion: pl.Version, Counts: counts, Filter: f, Next: page.Next, CanOperate: approval.Authorize(a, approval.ActionResolve) == nil,
		CanStart: may(approval.ActionStart), CanPause: may(approval.ActionPause),
		CanResume: may(approval.ActionResume), CanCancel: may(approval.ActionCancel),
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
	return s.render(c, http.StatusOK, view.Run(p))
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
func (s *Server) afterAction(c echo.Context, camp plan.Campaign, flash string) error {
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

func (s *Server) handleResume(c echo.Context) error {
	res, err := s.cfg.Approval.Resume(c.Request().Context(), mustActor(c), c.Param("id"))
	if err != nil {
		return err
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
