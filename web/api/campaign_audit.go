package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
)

func (a *API) audit(c echo.Context, _ auth.Actor) error {
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	m, err := audit.ForCampaign(c.Request().Context(), a.cfg.Pool, cur.Campaign.ID)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, m)
}
