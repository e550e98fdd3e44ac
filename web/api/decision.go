package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// decisionView is GET /campaigns/{id}/decision's answer: what became of
// the campaign's latest submitted version (approval.Decision), with the
// links a person acts on.
type decisionView struct {
	CampaignID string                 `json:"campaign_id"`
	Decision   approval.DecisionState `json:"decision"`
	// State and CampaignVersion are the campaign's now.
	State           approval.State `json:"state"`
	CampaignVersion int            `json:"campaign_version"`
	// Version and PlanHash are the submitted version's (0 and absent when
	// the campaign was never submitted).
	Version     int        `json:"version"`
	PlanHash    string     `json:"plan_hash,omitempty"`
	SubmittedAt *time.Time `json:"submitted_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	Approvals   struct {
		Have     int      `json:"have"`
		Required int      `json:"required"`
		By       []string `json:"by"`
	} `json:"approvals"`
	// WaitingFor is who must act before there is a new decision.
	WaitingFor  []stepView `json:"waiting_for"`
	ApprovalURL string     `json:"approval_url"`
	Message     string     `json:"message"`
}

// stepView is one approval.NextStep, with the page where it is done.
type stepView struct {
	// Who is the role that may act, or "nobody".
	Who   string            `json:"who"`
	Kind  approval.StepKind `json:"kind"`
	What  string            `json:"what"`
	Count int               `json:"count,omitempty"`
	URL   string            `json:"url,omitempty"`
}

// steps links each step to its page in the web UI.
func (a *API) steps(c echo.Context, id string, steps []approval.NextStep) []stepView {
	ui := a.baseURL(c) + "/campaigns/" + id
	out := make([]stepView, 0, len(steps))
	for _, s := range steps {
		v := stepView{Who: string(s.Who), Kind: s.Kind, What: s.What, Count: s.Count}
		if v.Who == "" {
			v.Who = "nobody"
		}
		switch s.Kind {
		case approval.StepSubmit, approval.StepRevise:
			v.URL = ui + "/draft"
		case approval.StepApprove:
			v.URL = ui + "/approval"
		case approval.StepStart, approval.StepResume:
			v.URL = ui + "/run"
		case approval.StepResolveUnknowns:
			v.URL = ui + "/run?state=unknown"
		case approval.StepStranded:
			v.URL = ui + "/run?state=stranded"
		case approval.StepFailed, approval.StepRefused, approval.StepUnreached:
			v.URL = ui + "/run?state=failed"
		}
		out = append(out, v)
	}
	return out
}

func (a *API) viewDecision(c echo.Context, d approval.Decision) decisionView {
	v := decisionView{
		CampaignID: d.CampaignID, Decision: d.Decision, State: d.State, CampaignVersion: d.CampaignVersion,
		Version: d.Version, PlanHash: d.PlanHash, Reason: d.Reason, DecidedBy: d.DecidedBy,
		WaitingFor:  a.steps(c, d.CampaignID, d.WaitingFor()),
		ApprovalURL: a.baseURL(c) + "/campaigns/" + d.CampaignID + "/approval",
		Message:     d.Message(),
	}
	if !d.SubmittedAt.IsZero() {
		v.SubmittedAt = &d.SubmittedAt
	}
	if !d.DecidedAt.IsZero() {
		v.DecidedAt = &d.DecidedAt
	}
	v.Approvals.Have, v.Approvals.Required, v.Approvals.By = len(d.Approvers), d.Required, nonNil(d.Approvers)
	return v
}

// waitParam reads ?wait=: a Go duration (30s, 1m, 500ms) or a whole
// number of seconds (30), from 0 (answer now, the default) to limit.
func waitParam(c echo.Context, limit time.Duration) (time.Duration, error) {
	v := c.QueryParam("wait")
	maxWait := int(limit / time.Second)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, &onceplan.FieldError{Field: "wait", Reason: fmt.Sprintf("must be a duration like 30s or a number of seconds, at most %ds; not %q", maxWait, v)}
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > limit {
		return 0, &onceplan.FieldError{Field: "wait", Reason: fmt.Sprintf("must be between 0s and %ds, not %s", maxWait, v)}
	}
	return d, nil
}

// decision answers the campaign's decision: at once when it is final or
// wait is 0, else as soon as it is (a long poll), or when wait has passed
// with it still pending. A client that goes away ends the wait; a server
// that begins to shut down answers its waiters with what they would get
// now.
func (a *API) decision(c echo.Context, _ auth.Actor) error {
	wait, err := waitParam(c, approval.DecisionWaitMax)
	if err != nil {
		return a.fail(c, err)
	}
	ctx, cancel := a.untilStopping(c)
	defer cancel()
	d, err := a.cfg.Approval.WaitDecision(ctx, c.Param("id"), wait)
	if err != nil && errors.Is(err, context.Canceled) && c.Request().Context().Err() == nil && d.CampaignID != "" {
		err = nil // the server is stopping: answer what is known
	}
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, a.viewDecision(c, d))
}

// untilStopping is the request's context, ended too when the server
// begins to shut down (Config.Stopping): a long poll then answers at once
// with what it knows.
func (a *API) untilStopping(c echo.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(c.Request().Context())
	if a.cfg.Stopping != nil {
		go func() {
			select {
			case <-a.cfg.Stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}
