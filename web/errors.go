package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/web/httperr"
	"github.com/onceplan/onceplan/web/view"
)

// classify returns the status, code and the message to show for err, by
// the one table the API answers by too (package httperr).
func classify(err error) (status int, code, msg string) {
	p := httperr.Classify(err)
	return p.Status, p.Code, p.Message
}

// handleError is echo's HTTPErrorHandler: JSON for JSON routes, an error
// page otherwise — two presentations of httperr's one classification.
// 5xx are logged with the request id the page shows.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	p := httperr.Report(c, s.cfg.Logger, err)
	if wantsJSON(c) || c.Get(ctxNonce) == nil {
		httperr.JSON(c, p)
		return
	}
	heading := http.StatusText(p.Status)
	if p.Internal() || heading == "" { // "" for 499: the client went away
		heading = "Something went wrong"
	}
	back := ""
	if id := c.Param("id"); id != "" {
		back = "/campaigns/" + id
	} else if p.Status != http.StatusUnauthorized {
		back = "/campaigns"
	}
	page := view.ErrorPage{Page: s.page(c, heading, ""), Status: p.Status, Heading: heading, Message: p.Message, Back: back}
	if p.Internal() {
		page.RequestID = p.RequestID
	}
	if err := s.render(c, p.Status, view.ErrorView(page)); err != nil {
		s.cfg.Logger.Error("rendering an error page", "err", err, "request_id", p.RequestID)
	}
}
