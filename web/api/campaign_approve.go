package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

func (a *API) submit(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Submit(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

type approveRequest struct {
	PlanHash string `json:"plan_hash"`
}

func (a *API) approve(c echo.Context, actor auth.Actor) error {
	var req approveRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	if req.PlanHash == "" {
		return a.fail(c, &onceplan.FieldError{Field: "plan_hash", Reason: "is required: send the plan hash you reviewed"})
	}
	res, err := a.cfg.Approval.Approve(c.Request().Context(), actor, c.Param("id"), req.PlanHash)
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) reject(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, true)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Reject(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}
