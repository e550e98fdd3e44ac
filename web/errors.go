package web

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/auth"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// errorCodes is the one table from domain errors to HTTP statuses and
// error codes (checked in order: the first match wins).
var errorCodes = []struct {
	err    error
	status int
	code   string
}{
	{auth.ErrThrottled, http.StatusTooManyRequests, "throttled"},
	{auth.ErrBadCredentials, http.StatusUnauthorized, "bad_credentials"},
	{auth.ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{auth.ErrDisabled, http.StatusForbidden, "disabled"},
	{approval.ErrForbidden, http.StatusForbidden, "forbidden"},
	{plan.ErrNotFound, http.StatusNotFound, "not_found"},
	{auth.ErrNotFound, http.StatusNotFound, "not_found"},
	{ledger.ErrNotFound, http.StatusNotFound, "not_found"},
	{plan.ErrInvalid, http.StatusUnprocessableEntity, "invalid"},
	{ledger.ErrInvalidTarget, http.StatusUnprocessableEntity, "invalid"},
	{ledger.ErrMissingEvidence, http.StatusUnprocessableEntity, "invalid"},
	{approval.ErrConflict, http.StatusConflict, "conflict"},
	{auth.ErrConflict, http.StatusConflict, "conflict"},
	{ledger.ErrConflict, http.StatusConflict, "conflict"},
	{ledger.ErrIllegalTransition, http.StatusConflict, "conflict"},
	{ledger.ErrWriteOnce, http.StatusConflict, "conflict"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "timeout"},
}

// classify returns the status, code and the message to show for err.
// Internal errors get a plain sentence; their detail goes to the log.
func classify(err error) (status int, code, msg string) {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg, _ := he.Message.(string)
		if msg == "" {
			msg = http.StatusText(he.Code)
		}
		return he.Code, codeFor(he.Code), msg
	}
	var le *plan.ListError
	if errors.As(err, &le) {
		return http.StatusUnprocessableEntity, "invalid", "the target list was refused: " + le.Error()
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			if e.status >= 500 {
				return e.status, e.code, "the database did not answer in time: try again"
			}
			return e.status, e.code, err.Error()
		}
	}
	return http.StatusInternalServerError, "internal", "something went wrong on our side"
}

func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnprocessableEntity:
		return "invalid"
	case http.StatusTooManyRequests:
		return "throttled"
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}

// handleError is echo's HTTPErrorHandler: JSON for JSON routes, an error
// page otherwise. 5xx are logged with the request id the page shows.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, code, msg := classify(err)
	rid, _ := c.Get(ctxRequestID).(string)
	if status >= 500 {
		s.cfg.Logger.Error("request failed", "err", err, "request_id", rid,
			"method", c.Request().Method, "path", c.Request().URL.Path)
	}
	if wantsJSON(c) || c.Get(ctxNonce) == nil {
		c.JSON(status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
		return
	}
	heading := http.StatusText(status)
	if status >= 500 {
		heading = "Something went wrong"
	}
	back := ""
	if id := c.Param("id"); id != "" {
		back = "/campaigns/" + id
	} else if status != http.StatusUnauthorized {
		back = "/campaigns"
	}
	p := view.ErrorPage{Page: s.page(c, heading, ""), Status: status, Heading: heading, Message: msg, Back: back}
	if status >= 500 {
		p.RequestID = rid
	}
	if err := s.render(c, status, view.ErrorView(p)); err != nil {
		s.cfg.Logger.Error("rendering an error page", "err", err, "request_id", rid)
	}
}
