package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
)

type testSendRequest struct {
	To      []string `json:"to"`
	Ordinal int      `json:"ordinal"`
}

// testSend renders one target's message and sends it to reviewers with
// "[Test] " before the subject (package testsend: never a ledger key,
// never a target, recorded in the campaign's trail).
func (a *API) testSend(c echo.Context, actor auth.Actor) error {
	if a.cfg.TestSend == nil {
		return writeError(c, http.StatusServiceUnavailable, "unavailable", "test sends are not configured on this server")
	}
	if err := auth.Authorize(actor, auth.ActionTestSend); err != nil {
		return a.fail(c, err)
	}
	var req testSendRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.TestSend.Send(c.Request().Context(), actor, approval.TestSendParams{
		CampaignID: c.Param("id"), To: req.To, Ordinal: req.Ordinal,
	})
	var limited *approval.TestSendRateLimitError
	if errors.As(err, &limited) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(limited.RetryAfter/time.Second)))
	}
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, res)
}
