package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// campaignOf reads the campaign named by the route's :id.
func (s *Server) campaignOf(c echo.Context) (approval.Campaign, error) {
	return approval.GetCampaign(c.Request().Context(), s.cfg.Pool, c.Param("id"))
}

// planOf reads the campaign's latest frozen plan. A campaign never
// approved has none: the pages of a plan (the run, a target, the audit's
// exports) refuse it as the API's reads of one do (audit.ErrNoPlan, 409
// not_approved), not as a campaign that does not exist.
func (s *Server) planOf(ctx context.Context, camp approval.Campaign) (plan.Plan, error) {
	if camp.PlanID == 0 {
		return plan.Plan{}, fmt.Errorf("%w: campaign %s has none yet", audit.ErrNoPlan, camp.Name)
	}
	return plan.GetPlan(ctx, s.cfg.Pool, camp.PlanID)
}

func campaignView(c approval.Campaign) view.Campaign {
	return view.Campaign{
		ID: c.ID, Name: c.Name, State: string(c.State), Provider: c.Provider, Version: c.Version,
		RequiredApprovals: c.RequiredApprovals, HasPlan: c.PlanID != 0, ListUnsubscribe: c.ListUnsubscribe,
		Starts: startsWords(c, time.Now()), ArchivedAt: deref(c.ArchivedAt),
	}
}

// deref is *t, or the zero time for nil.
func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// startsWords says when campaign c starts, as its settings say (fixed at
// create: approval.Service.Approve starts it on approval, StartDue at its
// time), until it has started: "" once it has, or once cancelled.
func startsWords(c approval.Campaign, now time.Time) string {
	switch c.State {
	case approval.StateDraft, approval.StatePendingApproval, approval.StateApproved:
	default:
		return ""
	}
	switch {
	case c.ScheduledAt != nil && c.State == approval.StateApproved && !c.ScheduledAt.After(now):
		return "by itself at the workers' next maintenance round (its time, " + view.When(*c.ScheduledAt) + ", has come)"
	case c.ScheduledAt != nil:
		return "by itself at " + view.When(*c.ScheduledAt) + ", once approved"
	case c.StartOnApproval:
		return "as soon as it is approved"
	}
	return "when an operator presses Start, once approved"
}

// mustActor returns the signed-in actor (routes that call it require one).
func mustActor(c echo.Context) auth.Actor {
	a, _ := actorOf(c)
	return a
}

func (s *Server) handleCampaignList(c echo.Context) error {
	ctx := c.Request().Context()
	camps, err := approval.ListCampaigns(ctx, s.cfg.Pool, 200)
	if err != nil {
		return err
	}
	ids := make([]string, len(camps))
	for i, camp := range camps {
		ids[i] = camp.ID
	}
	last, err := approval.LastEventAt(ctx, s.cfg.Pool, ids)
	if err != nil {
		return err
	}
	p := view.CampaignsPage{Page: s.page(c, "Campaigns", "campaigns")}
	for _, camp := range camps {
		row := view.CampaignRow{Campaign: campaignView(camp), LastActivity: camp.UpdatedAt}
		if t, ok := last[camp.ID]; ok && t.After(row.LastActivity) {
			row.LastActivity = t
		}
		if camp.PlanID != 0 {
			pl, err := plan.GetPlan(ctx, s.cfg.Pool, camp.PlanID)
			if err != nil {
				return err
			}
			if row.Counts, err = s.planCounts(ctx, pl); err != nil {
				return err
			}
			row.Approved, row.ExactlyOnce = pl.TargetCount, row.Counts.Done
			row.Outcome = approval.OutcomeOf(camp, row.Counts)
		}
		p.Rows = append(p.Rows, row)
	}
	return s.render(c, http.StatusOK, view.Campaigns(p))
}

// handleCampaignShow sends a campaign's link to the page its state needs.
func (s *Server) handleCampaignShow(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, campaignPage(camp))
}

func campaignPage(camp approval.Campaign) string {
	base := "/campaigns/" + camp.ID
	switch camp.State {
	case approval.StateDraft:
		return base + "/draft"
	case approval.StatePendingApproval:
		return base + "/approval"
	}
	if camp.PlanID == 0 {
		return base + "/draft"
	}
	return base + "/run"
}
