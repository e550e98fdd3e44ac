package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/web/httperr"
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
	back := "draft"
	if c.FormValue("back") == "approval" {
		back = "approval"
	}
	if len(to) == 0 {
		return s.testSendRefused(c, id, back, &onceplan.FieldError{Field: "to", Reason: "tick at least one reviewer to send the test to: nothing was sent"})
	}
	if _, err := s.cfg.TestSend.Send(c.Request().Context(), mustActor(c), approval.TestSendParams{CampaignID: id, To: to, Ordinal: ordinal}); err != nil {
		if fe := (*onceplan.FieldError)(nil); errors.As(err, &fe) {
			return s.testSendRefused(c, id, back, fe)
		}
		return err
	}
	return redirect(c, "/campaigns/"+id+"/"+back, "test-sent")
}

// testSendRefused shows the page the test-send form was on again, the
// refusal at its top and beside the form, with nothing sent: a reviewer
// not ticked, an address not allowed, a target that does not exist.
func (s *Server) testSendRefused(c echo.Context, id, back string, fe *onceplan.FieldError) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	msg := "The test was not sent: " + strings.TrimSuffix(fe.Reason, ".") + "."
	if fe.Field != "to" {
		msg = "The test was not sent: " + fe.Field + " " + strings.TrimSuffix(fe.Reason, ".") + "."
	}
	status := httperr.Classify(fe).Status // the one table's status for the refusal
	if back == "approval" {
		p, err := s.approvalPage(c, camp)
		if err != nil {
			return err
		}
		p.Error = msg
		if p.TestSend != nil {
			p.TestSend.Error = msg
		}
		return s.render(c, status, view.Approval(p))
	}
	return s.renderDraft(c, camp, status, draftOpts{errMsg: msg, testSendErr: msg})
}
