package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

type campaignsPage struct {
	Items []campaignSummary `json:"items"`
	Next  *string           `json:"next"`
}

type campaignSummary struct {
	ID       string         `json:"id"`
	Name     string         `json:"name"`
	State    approval.State `json:"state"`
	Provider string         `json:"provider"`
	// Outcome is GET /campaigns/{id}'s, from the same counts.
	Outcome   *approval.Outcome `json:"outcome"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// listCampaigns pages campaigns newest first, keyed by (created_at, id).
func (a *API) listCampaigns(c echo.Context, _ auth.Actor) error {
	limit, err := intParam(c, "limit")
	if err != nil {
		return a.fail(c, err)
	}
	if c.QueryParams().Has("limit") && (limit < 1 || limit > 200) {
		return a.fail(c, &onceplan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 200, not %d", limit)})
	}
	if limit == 0 {
		limit = 50
	}
	var after *approval.CampaignCursor
	if s := c.QueryParam("after"); s != "" {
		cur, err := approval.ParseCampaignCursor(s)
		if err != nil {
			return a.fail(c, err)
		}
		after = &cur
	}
	list, next, err := approval.PageCampaigns(c.Request().Context(), a.cfg.Pool, after, limit)
	if err != nil {
		return a.fail(c, err)
	}
	page := campaignsPage{Items: []campaignSummary{}}
	for _, cm := range list {
		sum := campaignSummary{ID: cm.ID, Name: cm.Name, State: cm.State, Provider: cm.Provider, CreatedAt: cm.CreatedAt, UpdatedAt: cm.UpdatedAt}
		if cm.PlanID != 0 && (cm.State == approval.StateCompleted || cm.State == approval.StateCancelled) {
			k, err := a.cfg.Counts.CampaignCounts(c.Request().Context(), a.cfg.Pool, cm)
			if err != nil {
				return a.fail(c, err)
			}
			sum.Outcome = approval.OutcomeOf(cm, k)
		}
		page.Items = append(page.Items, sum)
	}
	if next != nil {
		s := next.String()
		page.Next = &s
	}
	return c.JSON(http.StatusOK, page)
}
