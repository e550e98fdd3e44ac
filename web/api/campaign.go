package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// campaignView is GET /campaigns/{id}'s answer, and every state action's.
type campaignView struct {
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	State             approval.State  `json:"state"`
	Provider          string          `json:"provider"`
	PlanHash          string          `json:"plan_hash"`
	PlanVersion       int             `json:"plan_version"`
	RequiredApprovals int             `json:"required_approvals"`
	Approvals         int             `json:"approvals"`
	ScheduledAt       *time.Time      `json:"scheduled_at,omitempty"`
	Payload           plan.Payload    `json:"payload"`
	Counts            approval.Counts `json:"counts"`
	// Outcome says how a campaign that ended ended for its targets
	// (approval.OutcomeOf): null while it has not.
	Outcome     *approval.Outcome  `json:"outcome"`
	ApprovalURL string             `json:"approval_url"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	ArchivedAt  *time.Time         `json:"archived_at,omitempty"`
	Import      *plan.ImportReport `json:"import,omitempty"`
	// ListUnsubscribe: each message carries a one-click unsubscribe link;
	// false for a transactional campaign.
	ListUnsubscribe bool `json:"list_unsubscribe"`
	// ProviderWorkers is how many live worker processes serve the
	// campaign's provider.
	ProviderWorkers int `json:"provider_workers"`
	// Warnings are what the caller may want to act on that stopped
	// nothing: no live worker for an approved or started campaign's
	// provider; blank merge variables in the answer of a submit.
	Warnings []warning `json:"warnings"`
	// NextSteps says what a person must do next (approval.NextSteps):
	// who, what, and the page where it is done.
	NextSteps []stepView `json:"next_steps"`
}

// warning is one entry of a campaign's warnings.
type warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Targets lists the first targets concerned, Count how many in all.
	Targets []plan.EmptyVar `json:"targets,omitempty"`
	Count   int             `json:"count,omitempty"`
}

// Warning codes.
const (
	warnNoLiveWorker = "no_live_worker"
	warnEmptyVars    = "empty_vars"
)

// viewImport is an import report as the API gives it: plan.ImportReport's
// own JSON, with its lists never null.
func viewImport(r *plan.ImportReport) *plan.ImportReport {
	if r == nil {
		return nil
	}
	v := *r
	v.Rejected = nonNil(v.Rejected)
	v.Duplicates = nonNil(v.Duplicates)
	v.Suppressed = nonNil(v.Suppressed)
	v.Empty = nonNil(v.Empty)
	return &v
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// warnings are the campaign's warnings after res (see campaignView), and
// whether a live worker serves its provider.
func warnings(res approval.Result) []warning {
	out := []warning{}
	if w := res.Answer.Serving.Warning; w != "" {
		out = append(out, warning{Code: warnNoLiveWorker, Message: w})
	}
	if k := res.Check; k != nil && k.EmptyCount > 0 {
		out = append(out, warning{Code: warnEmptyVars, Message: plan.EmptyWarning(k.Empty[0], k.EmptyCount), Targets: k.Empty, Count: k.EmptyCount})
	}
	return out
}

// view is a campaign's answer: the campaign and what goes with it (counts,
// approvals, decision, workers), all read in one snapshot — the action's
// own transaction when it read them (Approve), else one read-only
// transaction after it.
func (a *API) view(c echo.Context, res approval.Result) (campaignView, error) {
	ctx := c.Request().Context()
	if c.Request().Method != http.MethodGet {
		// An action may have changed the counts: do not answer from the cache.
		if listID, _, err := approval.ListOf(ctx, a.cfg.Pool, res.Campaign); err == nil {
			a.cfg.Counts.Forget(listID)
		}
	}
	res, err := a.cfg.Approval.Answer(ctx, res, a.cfg.Counts)
	if err != nil {
		return campaignView{}, err
	}
	ans, cm := res.Answer, res.Campaign
	return campaignView{
		ProviderWorkers: ans.Serving.Live, Warnings: warnings(res), ListUnsubscribe: cm.ListUnsubscribe,
		NextSteps: a.steps(c, cm.ID, approval.NextSteps(cm, ans.Decision, ans.Counts, ans.Serving, a.cfg.Approval.Now())), Approvals: ans.Approvals,
		ID: cm.ID, Name: cm.Name, State: cm.State, Provider: cm.Provider,
		PlanHash: res.PlanHash, PlanVersion: cm.Version, RequiredApprovals: cm.RequiredApprovals,
		ScheduledAt: cm.ScheduledAt, Payload: res.Draft.Payload, Counts: ans.Counts, Outcome: approval.OutcomeOf(cm, ans.Counts),
		ApprovalURL: a.baseURL(c) + "/campaigns/" + cm.ID + "/approval",
		CreatedAt:   cm.CreatedAt, UpdatedAt: cm.UpdatedAt, ArchivedAt: cm.ArchivedAt, Import: viewImport(res.Import),
	}, nil
}

func (a *API) answer(c echo.Context, status int, res approval.Result, err error) error {
	if err != nil {
		return a.fail(c, err)
	}
	v, err := a.view(c, res)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(status, v)
}

// current reads a campaign as the service reports it.
func (a *API) current(c echo.Context) (approval.Result, error) {
	return a.cfg.Approval.Get(c.Request().Context(), c.Param("id"))
}

func (a *API) getCampaign(c echo.Context, _ auth.Actor) error {
	res, err := a.current(c)
	return a.answer(c, http.StatusOK, res, err)
}

// baseURL is the base of every absolute URL an answer carries (an
// approval_url, a next step's page, a diff's page): the configured public
// URL (Config.BaseURL, serve's --public-url) and nothing of the request.
// Its Host and X-Forwarded-Proto are whatever the client sent, and a link
// an agent hands its human must lead to this server, not to one the
// request named. The request is not read; the parameter keeps the call
// sites' shape.
func (a *API) baseURL(echo.Context) string {
	return strings.TrimSuffix(a.cfg.BaseURL, "/")
}
