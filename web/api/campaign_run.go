package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
)

func (a *API) start(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Start(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) pause(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Pause(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) resume(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Resume(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) cancel(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Cancel(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

// discard ends a campaign never approved at its proposer's request
// (approval.Service.Discard).
func (a *API) discard(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Discard(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}
