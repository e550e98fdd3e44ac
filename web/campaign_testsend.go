package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/web/view"
)

// testSendForm is the draft and approval pages' test-send form for the
// signed-in user, or nil when they may not test-send this campaign now.
func (s *Server) testSendForm(ctx context.Context, a auth.Actor, camp approval.Campaign, targets int, back string) (*view.TestSendForm, error) {
	if s.cfg.TestSend == nil || approval.Allowed(a, camp, auth.ActionTestSend) != nil {
		return nil, nil
	}
	reviewers, err := s.cfg.TestSend.Reviewers(ctx)
	if err != nil {
		return nil, err
	}
	f := &view.TestSendForm{CampaignID: camp.ID, Back: back, Me: a.Email,
		Max: s.cfg.TestSend.MaxRecipients(), TargetCount: targets, Ordinal: 1}
	for _, r := range reviewers {
		f.Reviewers = append(f.Reviewers, view.TestReviewer{Address: r.Address, Suppressed: r.Suppressed})
	}
	return f, nil
}

// handleTestSend sends one target's message to the reviewers ticked, then
// returns to the page the form was on.
func (s *Server) handleTestSend(c echo.Context) error {
	if s.cfg.TestSend == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "test sends are not configured on this server")
	}
	id := c.Param("id")
	form, err := c.FormParams()
	if err != nil {
		return err
	}
	var to []string
	for _, t := range form["to"] {
		if t = strings.TrimSpace(t); t != "" {
			to = append(to, t)
		}
	}
	ordinal := 0
	if v := strings.TrimSpace(c.FormValue("ordinal")); v != "" {
		if ordinal, err = strconv.Atoi(v); err != nil {
			return &onceplan.FieldError{Field: "ordinal", Reason: "must be a target's number"}
		}
	}
	if _, err := s.cfg.TestSend.Send(c.Request().Context(), mustActor(c), approval.TestSendParams{CampaignID: id, To: to, Ordinal: ordinal}); err != nil {
		return err
	}
	back := "draft"
	if c.FormValue("back") == "approval" {
		back = "approval"
	}
	return redirect(c, "/campaigns/"+id+"/"+back, "test-sent")
}
