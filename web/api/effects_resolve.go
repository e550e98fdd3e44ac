package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// effectCampaign finds the campaign a key belongs to, for the effect routes.
func (a *API) effectCampaign(c echo.Context) (string, string, error) {
	key := keyParam(c)
	id, err := a.cfg.Approval.CampaignOfKey(c.Request().Context(), key)
	return id, key, err
}

type effectView struct {
	Key      string       `json:"key"`
	Epoch    int          `json:"epoch"`
	State    ledger.State `json:"state,omitempty"`
	Campaign string       `json:"campaign_id"`
}

type resolveRequest struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	// Receipt and Raw are a tool call's (package toolcall): the person's
	// evidence, replayed to the agent.
	Receipt string  `json:"receipt"`
	Raw     *string `json:"raw"`
}

func (a *API) resolve(c echo.Context, actor auth.Actor) error {
	var req resolveRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	var outcome ledger.Outcome
	switch req.Outcome {
	case "delivered":
		outcome = ledger.Delivered
	case "not_delivered":
		outcome = ledger.NotDelivered
	default:
		return a.fail(c, &onceplan.FieldError{Field: "outcome", Reason: fmt.Sprintf("must be \"delivered\" or \"not_delivered\", not %q", req.Outcome)})
	}
	if strings.TrimSpace(req.Reason) == "" {
		return a.fail(c, &onceplan.FieldError{Field: "reason", Reason: "is required: say how you know"})
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err != nil {
			return a.fail(c, err)
		}
		return a.resolveTool(c, actor, outcome, req)
	}
	if req.Receipt != "" || req.Raw != nil {
		field := "receipt"
		if req.Raw != nil {
			field = "raw"
		}
		return a.fail(c, &onceplan.FieldError{Field: field, Reason: "is a tool call's evidence: a campaign target's is uploaded with onceplan resolve --evidence"})
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	eff, err := a.cfg.Approval.ResolveEffect(c.Request().Context(), actor, id, key, outcome, req.Reason)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: eff.Epoch, State: eff.State, Campaign: id})
}

type supersedeRequest struct {
	Target string `json:"target"`
	Reason string `json:"reason"`
}

func (a *API) supersede(c echo.Context, actor auth.Actor) error {
	var req supersedeRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err == nil {
			if err = auth.Authorize(actor, auth.ActionSupersede); err == nil {
				err = errSupersedeTool
			}
		}
		return a.fail(c, err)
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	epoch, err := a.cfg.Approval.SupersedeEffect(c.Request().Context(), actor, id, key, req.Target, req.Reason)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: epoch, State: "", Campaign: id})
}

func (a *API) revoke(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, true)
	if err != nil {
		return a.fail(c, err)
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err != nil {
			return a.fail(c, err)
		}
		return a.revokeTool(c, actor, why)
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	eff, err := a.cfg.Approval.RevokeEffect(c.Request().Context(), actor, id, key, why)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: eff.Epoch, State: eff.State, Campaign: id})
}
