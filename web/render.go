package web

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// render writes a templ component as the response.
func (s *Server) render(c echo.Context, status int, comp templ.Component) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(status)
	ctx := view.WithFormTokens(c.Request().Context(), func() string { return randomToken(16) })
	return comp.Render(ctx, c.Response())
}

// flashes are the confirmations a redirect may name (?flash=code): only
// these fixed sentences can appear, never text from the URL.
var flashes = map[string]string{
	"signed-in":         "Signed in.",
	"created":           "Draft created.",
	"saved":             "Draft saved.",
	"saved-incomplete":  "Draft saved; it cannot be submitted yet: targets lack merge variables it reads (see beside the fields).",
	"imported":          "Targets imported: the report is below.",
	"submitted":         "Submitted for approval.",
	"submitted-empty":   "Submitted for approval, with targets whose merge variables are blank: the draft page lists them.",
	"approved":          "Approved: the plan is frozen.",
	"approval-recorded": "Your approval is recorded; more are needed.",
	"rejected":          "Rejected: the draft is back with its proposer.",
	"started":           "Started.",
	"paused":            "Paused: calls in flight finish and are recorded.",
	"resumed":           "Resumed: every target without an effect is queued once.",
	"nothing-to-resume": "Nothing to resume: every target has an effect or a job, so the campaign stays completed.",
	"cancelled":         "Cancelled.",
	"discarded":         "Draft discarded: it can no longer be submitted, approved or started; its history keeps it.",
	"resolved":          "Resolved.",
	"evidence-resolved": "The selected targets were resolved as the evidence says; the others stay unknown.",
	"evidence-partial":  "The selected targets were resolved as the evidence says, except those no longer unknown (resolved meanwhile), which were left as they are; the others stay unknown.",
	"superseded":        "Superseded: the key moved to a new epoch and the target is sent once more (resume the remainder first if the campaign is paused).",
	"revoked":           "Revoked.",
	"roles-saved":       "Roles saved.",
	"user-created":      "User created.",
	"token-created":     "Token created.",
	"user-disabled":     "User disabled.",
	"user-enabled":      "User enabled.",
	"token-revoked":     "Token revoked.",
	"test-sent":         "Test message sent to the reviewers chosen; no target was mailed and the campaign's counts are unchanged.",
	"suppressed":        "Address suppressed: no campaign will mail it.",
	"suppressed-before": "The address was already suppressed; its entry is unchanged.",
	"unsuppressed":      "Address taken off the suppression list; the removal is recorded.",
	"prefs-saved":       "Your notification choices are saved.",
	"password-changed":  "Your password is changed. You are signed out everywhere else; this browser stays signed in. API tokens are not affected.",
	"tool-approved":     "Approved: the call may be performed with exactly these args (the agent's next begin does it).",
	"tool-rejected":     "Rejected: the call is not performed.",
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

func userView(u auth.User, a auth.Actor) *view.User {
	v := &view.User{
		Email: u.Email, Name: u.Name,
		IsAdmin:    a.Has(auth.RoleAdmin),
		CanPropose: a.Has(auth.RoleProposer),
		CanApprove: a.Has(auth.RoleApprover),
		CanOperate: a.Has(auth.RoleOperator),
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
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		target += sep + "flash=" + flash
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// shownResult is what a POST's result page shows beyond the stored state,
// kept for the page its redirect leads to (?shown=ID): an import report,
// or a secret that is shown once.
type shownResult struct {
	user     int64  // only this user sees it
	campaign string // the campaign whose page shows it
	report   *plan.ImportReport
	token    string // an API token's secret, and its name
	name     string
	newUser  string // a new user's email and generated password
	password string
	evidence *evidenceSet // proposals from evidence for unknowns (campaign_evidence.go)
}

func (r shownResult) secret() bool { return r.token != "" || r.password != "" }

// What a result page shows is kept this long, this many at most.
const (
	shownTTL = 30 * time.Minute
	shownMax = 10_000
)

// redirectShowing is redirect, with r kept for the page it leads to.
func (s *Server) redirectShowing(c echo.Context, target, flash string, r shownResult) error {
	id := randomToken(16)
	r.user = mustActor(c).UserID
	s.shown.getOrPut(id, s.cfg.Now(), func() shownResult { return r })
	return redirect(c, target+"?shown="+id, flash)
}

// shownFor returns what the request's ?shown= names for the signed-in
// user. A secret is handed out once: a reload no longer shows it.
func (s *Server) shownFor(c echo.Context) (shownResult, bool) {
	id, now := c.QueryParam("shown"), s.cfg.Now()
	r, ok := s.shown.get(id, now)
	if !ok || r.user != mustActor(c).UserID {
		return shownResult{}, false
	}
	if r.secret() {
		s.shown.take(id, now)
	}
	return r, true
}
