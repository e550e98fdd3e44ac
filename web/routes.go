package web

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/onceplan/onceplan/web/httperr"
)

// route is one endpoint and the access it requires.
type route struct {
	method string
	path   string
	need   access
	// maxBody bounds the request body (default 1 MiB).
	maxBody string
	handler func(s *Server) echo.HandlerFunc
}

// uploadLimit bounds a target list upload: the importer's own byte limit
// plus room for the form around it.
const uploadLimit = "300M"

// routeTable lists every route of the UI with the role it needs: the one
// place to read who may do what over HTTP (the route × role test walks it).
func routeTable() []route {
	h := func(f func(*Server, echo.Context) error) func(*Server) echo.HandlerFunc {
		return func(s *Server) echo.HandlerFunc { return func(c echo.Context) error { return f(s, c) } }
	}
	return []route{
		{http.MethodGet, "/login", public, "", h((*Server).handleLoginForm)},
		{http.MethodPost, "/login", public, "", h((*Server).handleLogin)},
		{http.MethodPost, "/logout", signedIn, "", h((*Server).handleLogout)},
		// Unsubscribe links: the token is the authentication (unsubscribe.go).
		{http.MethodGet, "/u/:token", link, "", h((*Server).handleUnsubscribeForm)},
		{http.MethodPost, "/u/:token", link, unsubscribeBodyLimit, h((*Server).handleUnsubscribe)},
		{http.MethodGet, "/", signedIn, "", h((*Server).handleHome)},

		{http.MethodGet, "/campaigns", signedIn, "", h((*Server).handleCampaignList)},
		{http.MethodGet, "/campaigns/new", proposer, "", h((*Server).handleCampaignNew)},
		{http.MethodPost, "/campaigns", proposer, uploadLimit, h((*Server).handleCampaignCreate)},
		{http.MethodGet, "/campaigns/:id", signedIn, "", h((*Server).handleCampaignShow)},

		{http.MethodGet, "/campaigns/:id/draft", signedIn, "", h((*Server).handleDraft)},
		{http.MethodPost, "/campaigns/:id/payload", proposer, "", h((*Server).handlePayloadSave)},
		{http.MethodPost, "/campaigns/:id/import", proposer, uploadLimit, h((*Server).handleImport)},
		{http.MethodGet, "/campaigns/:id/preview.html", signedIn, "", h((*Server).handlePreviewHTML)},
		{http.MethodPost, "/campaigns/:id/submit", proposer, "", h((*Server).handleSubmit)},
		{http.MethodPost, "/campaigns/:id/test", testSender, "", h((*Server).handleTestSend)},
		{http.MethodPost, "/campaigns/:id/discard", discarder, "", h((*Server).handleDiscard)},

		{http.MethodGet, "/campaigns/:id/approval", signedIn, "", h((*Server).handleApproval)},
		{http.MethodGet, "/campaigns/:id/diff", signedIn, "", h((*Server).handleDiff)},
		{http.MethodPost, "/campaigns/:id/approve", approver, "", h((*Server).handleApprove)},
		{http.MethodPost, "/campaigns/:id/reject", approver, "", h((*Server).handleReject)},

		{http.MethodGet, "/campaigns/:id/run", signedIn, "", h((*Server).handleRun)},
		{http.MethodGet, "/campaigns/:id/counts", signedIn, "", h((*Server).handleCounts)},
		{http.MethodGet, "/campaigns/:id/run/live", signedIn, "", h((*Server).handleRunLive)},
		{http.MethodPost, "/campaigns/:id/start", operator, "", h((*Server).handleStart)},
		{http.MethodPost, "/campaigns/:id/pause", operator, "", h((*Server).handlePause)},
		{http.MethodPost, "/campaigns/:id/resume", operator, "", h((*Server).handleResume)},
		{http.MethodPost, "/campaigns/:id/cancel", operator, "", h((*Server).handleCancel)},
		{http.MethodPost, "/campaigns/:id/evidence", operator, evidenceUploadLimit, h((*Server).handleEvidenceUpload)},
		{http.MethodGet, "/campaigns/:id/evidence", operator, "", h((*Server).handleEvidence)},
		{http.MethodPost, "/campaigns/:id/evidence/confirm", operator, "", h((*Server).handleEvidenceConfirm)},

		{http.MethodGet, "/campaigns/:id/targets/:ordinal", signedIn, "", h((*Server).handleTarget)},
		{http.MethodPost, "/campaigns/:id/targets/:ordinal/resolve", operator, "", h((*Server).handleResolve)},
		{http.MethodPost, "/campaigns/:id/targets/:ordinal/supersede", approver, "", h((*Server).handleSupersede)},
		{http.MethodPost, "/campaigns/:id/targets/:ordinal/revoke", operator, "", h((*Server).handleRevoke)},

		{http.MethodGet, "/campaigns/:id/audit", signedIn, "", h((*Server).handleAudit)},
		{http.MethodGet, "/campaigns/:id/audit.csv", signedIn, "", h((*Server).handleAuditCSV)},
		{http.MethodGet, "/campaigns/:id/audit.json", signedIn, "", h((*Server).handleAuditJSON)},

		{http.MethodGet, "/suppressions", signedIn, "", h((*Server).handleSuppressions)},
		{http.MethodPost, "/suppressions", operator, "", h((*Server).handleSuppressionAdd)},
		{http.MethodPost, "/suppressions/remove", admin, "", h((*Server).handleSuppressionRemove)},

		{http.MethodGet, "/tool-calls", signedIn, "", h((*Server).handleToolCalls)},
		{http.MethodGet, "/tool-calls/approvals/:rid", signedIn, "", h((*Server).handleToolApproval)},
		{http.MethodPost, "/tool-calls/approvals/:rid/approve", approver, "", h(toolDecide(true))},
		{http.MethodPost, "/tool-calls/approvals/:rid/reject", approver, "", h(toolDecide(false))},
		{http.MethodGet, "/tool-calls/effects/:key", signedIn, "", h((*Server).handleToolCall)},
		{http.MethodPost, "/tool-calls/effects/:key/resolve", operator, "", h((*Server).handleToolResolve)},
		{http.MethodPost, "/tool-calls/effects/:key/revoke", operator, "", h((*Server).handleToolRevoke)},

		{http.MethodGet, "/account/notifications", signedIn, "", h((*Server).handleAccountNotifications)},
		{http.MethodPost, "/account/notifications", signedIn, "", h((*Server).handleAccountNotificationsSave)},
		{http.MethodGet, accountPasswordPath, signedIn, "", h((*Server).handleAccountPassword)},
		{http.MethodPost, accountPasswordPath, signedIn, "", h((*Server).handleAccountPasswordSave)},

		{http.MethodGet, "/admin", admin, "", h((*Server).handleAdmin)},
		{http.MethodPost, "/admin/users", admin, "", h((*Server).handleUserCreate)},
		{http.MethodPost, "/admin/users/:uid/roles", admin, "", h((*Server).handleUserRoles)},
		{http.MethodPost, "/admin/users/:uid/disable", admin, "", h((*Server).handleUserDisable)},
		{http.MethodPost, "/admin/users/:uid/enable", admin, "", h((*Server).handleUserEnable)},
		{http.MethodPost, "/admin/tokens", admin, "", h((*Server).handleTokenCreate)},
		{http.MethodPost, "/admin/tokens/:tid/revoke", admin, "", h((*Server).handleTokenRevoke)},
	}
}

func (s *Server) routes() {
	e := s.echo
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	if s.cfg.Approval == nil {
		return
	}
	// A NUL or bytes that are not UTF-8 in the path or query are refused
	// before the session's lookup or any handler reads them; after
	// securityHeaders, so that a page gets the error page.
	e.Use(requestID, s.securityHeaders, httperr.RefuseBadText, s.loadSession)
	e.GET("/static/:name", s.handleStatic)
	if s.cfg.Mount != nil {
		s.cfg.Mount(e)
	}
	for _, r := range routeTable() {
		h := r.handler(s)
		if r.method != http.MethodGet {
			limit := r.maxBody
			if limit == "" {
				limit = "1M"
			}
			if r.need == link {
				// No session, no CSRF: mail providers post without cookies.
				h = middleware.BodyLimit(limit)(refuseBadForm(h))
			} else {
				h = middleware.BodyLimit(limit)(refuseBadForm(s.csrf(s.onceForm(h))))
			}
		}
		e.Add(r.method, r.path, s.require(r.need, h))
	}
	if s.riverUI != nil {
		ui := s.require(admin, s.riverUIHandler())
		e.Any("/riverui", ui)
		e.Any("/riverui/*", ui)
	}
}

// refuseBadForm refuses a form with a NUL or bytes that are not UTF-8 in
// any field (a 400 page naming the field) before the CSRF check and the
// handler read it: PostgreSQL cannot store them (httperr.BadTextInForm).
func refuseBadForm(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := httperr.BadTextInForm(c); err != nil {
			return err
		}
		return next(c)
	}
}

func (s *Server) handleHome(c echo.Context) error {
	return c.Redirect(http.StatusSeeOther, "/campaigns")
}
