package web

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"riverqueue.com/riverui"
)

// mountRiverUI builds River's own UI (jobs, queues) for admins at /riverui.
// It runs background queries of its own until the server shuts down.
func (s *Server) mountRiverUI() error {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(s.cfg.River, nil),
		Logger:    s.cfg.Logger.With("component", "riverui"),
		Prefix:    "/riverui",
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.Start(ctx); err != nil {
		cancel()
		return err
	}
	s.riverUI, s.stopUI = h, cancel
	return nil
}

// riverUIHandler serves River's single-page app. Its scripts are files of
// its own origin, so it gets a CSP of its own; its JSON API changes jobs
// and queues, so unsafe requests must come from this origin (River's app
// sends no CSRF token, but a browser always says where a request is from).
func (s *Server) riverUIHandler() echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if req.Header.Get("Sec-Fetch-Site") != "same-origin" {
				return errCSRF
			}
		}
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "+
			"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
		s.riverUI.ServeHTTP(c.Response(), req)
		return nil
	}
}
