package web

import (
	"net/http"
	"slices"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/auth"
	"github.com/onceplan/onceplan/web/view"
)

// render writes a templ component as the response.
func (s *Server) render(c echo.Context, status int, comp templ.Component) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(status)
	return comp.Render(c.Request().Context(), c.Response())
}

// flashes are the confirmations a redirect may name (?flash=code): only
// these fixed sentences can appear, never text from the URL.
var flashes = map[string]string{
	"signed-in":         "Signed in.",
	"created":           "Draft created.",
	"saved":             "Draft saved.",
	"submitted":         "Submitted for approval.",
	"approved":          "Approved: the plan is frozen.",
	"approval-recorded": "Your approval is recorded; more are needed.",
	"rejected":          "Rejected: the draft is back with its proposer.",
	"started":           "Started.",
	"paused":            "Paused: calls in flight finish and are recorded.",
	"resumed":           "Resumed: every target without an effect is queued once.",
	"cancelled":         "Cancelled.",
	"resolved":          "Resolved.",
	"superseded":        "Superseded: the key moved to a new epoch and the target is sent once more (resume the remainder first if the campaign is paused).",
	"revoked":           "Revoked.",
	"roles-saved":       "Roles saved.",
	"user-disabled":     "User disabled.",
	"user-enabled":      "User enabled.",
	"token-revoked":     "Token revoked.",
}

// page fills the layout data every page needs.
func (s *Server) page(c echo.Context, title, nav string) view.Page {
	p := view.Page{Title: title, Nav: nav, Assets: s.assets.view()}
	p.CSRF, _ = c.Get(ctxCSRF).(string)
	if u, ok := c.Get(ctxUser).(auth.User); ok {
		a, _ := actorOf(c)
		p.User = userView(u, a)
	}
	if msg, ok := flashes[c.QueryParam("flash")]; ok {
		p.Flash = msg
	}
	return p
}

func userView(u auth.User, a approval.Actor) *view.User {
	v := &view.User{
		Email: u.Email, Name: u.Name,
		IsAdmin:    a.Has(approval.RoleAdmin),
		CanPropose: a.Has(approval.RoleProposer),
		CanApprove: a.Has(approval.RoleApprover),
		CanOperate: a.Has(approval.RoleOperator),
	}
	for _, r := range u.Roles {
		v.Roles = append(v.Roles, string(r))
	}
	slices.Sort(v.Roles)
	return v
}

// redirect answers a successful POST with 303 to target, naming a flash.
func redirect(c echo.Context, target, flash string) error {
	if flash != "" {
		target += "?flash=" + flash
	}
	return c.Redirect(http.StatusSeeOther, target)
}
