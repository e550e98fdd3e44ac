package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// Cookie names. The session cookie holds the session's secret (the
// database keeps only its hash); the CSRF cookie exists only before sign-in,
// for the sign-in form itself.
const (
	sessionCookie = "onceplan_session"
	csrfCookie    = "onceplan_csrf"
	csrfField     = "csrf_token"
	csrfHeader    = "X-CSRF-Token"
)

// Context keys.
const (
	ctxRequestID = "rid"
	ctxNonce     = "nonce"
	ctxActor     = "actor"
	ctxUser      = "user"
	ctxSession   = "session"
	ctxCSRF      = "csrf"
)

func randomToken(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// requestID names each request for logs and error pages.
func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		b := make([]byte, 8)
		rand.Read(b)
		id := hex.EncodeToString(b)
		c.Set(ctxRequestID, id)
		c.Response().Header().Set("X-Request-Id", id)
		return next(c)
	}
}

// isHTTPS reports whether the client reached us over HTTPS: directly, or
// through a trusted proxy that says so (X-Forwarded-Proto is believed
// from a --trusted-proxies peer only: clientip.go), or --secure-cookies.
func (s *Server) isHTTPS(c echo.Context) bool {
	req := c.Request()
	return s.cfg.SecureCookies || req.TLS != nil ||
		(req.Header.Get("X-Forwarded-Proto") == "https" && trustedPeer(s.cfg.TrustedProxies, req.RemoteAddr))
}

// contentSecurityPolicy allows only this origin's files, scripts carrying
// the request's nonce, no plugins, no framing by others, and forms posting
// only here. The HTML preview frame (same origin) is the only frame.
func contentSecurityPolicy(nonce string) string {
	return "default-src 'none'; script-src 'nonce-" + nonce + "'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}

// securityHeaders sets the CSP with a fresh nonce (handed to templ through
// the request context) and the other protective headers on every response.
// River's UI and the message preview set their own CSP.
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		nonce := randomToken(18)
		c.Set(ctxNonce, nonce)
		req := c.Request()
		c.SetRequest(req.WithContext(templ.WithNonce(req.Context(), nonce)))
		h := c.Response().Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy(nonce))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		if s.isHTTPS(c) {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		return next(c)
	}
}

// csrfFromSession derives a session's CSRF token: only someone holding the
// session cookie can compute it, and it survives restarts with no server
// secret. The domain prefix keeps it apart from the session id the
// database stores (the plain SHA-256 of the secret).
func csrfFromSession(token string) string {
	sum := sha256.Sum256([]byte("onceplan csrf v1\x00" + token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// loadSession resolves the session cookie to an actor, and sets the CSRF
// token forms must carry: the session's, or before sign-in the CSRF
// cookie's (issued by the sign-in form).
func (s *Server) loadSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if ck, err := c.Cookie(sessionCookie); err == nil && ck.Value != "" {
			actor, user, err := auth.SessionActor(c.Request().Context(), s.cfg.Pool, ck.Value)
			switch {
			case err == nil:
				c.Set(ctxActor, actor)
				c.Set(ctxUser, user)
				c.Set(ctxSession, ck.Value)
				c.Set(ctxCSRF, csrfFromSession(ck.Value))
				return next(c)
			case errors.Is(err, onceplan.ErrUnauthenticated):
				s.clearCookie(c, sessionCookie)
			default:
				return err
			}
		}
		if ck, err := c.Cookie(csrfCookie); err == nil && len(ck.Value) == 43 {
			c.Set(ctxCSRF, ck.Value)
		}
		return next(c)
	}
}

// ensureLoginCSRF issues the pre-sign-in CSRF cookie (for the sign-in form)
// when the visitor has none.
func (s *Server) ensureLoginCSRF(c echo.Context) {
	if t, _ := c.Get(ctxCSRF).(string); t != "" {
		return
	}
	token := randomToken(32)
	s.setCookie(c, csrfCookie, token, 0)
	c.Set(ctxCSRF, token)
}

func (s *Server) setCookie(c echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.isHTTPS(c), SameSite: http.SameSiteLaxMode,
	})
}

func (s *Server) clearCookie(c echo.Context, name string) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.isHTTPS(c), SameSite: http.SameSiteLaxMode,
	})
}

// errCSRF refuses a state-changing request that does not prove it comes
// from one of our own pages.
var errCSRF = echo.NewHTTPError(http.StatusForbidden, "the form is out of date or did not come from this site (CSRF check failed): reload the page and try again")

// csrf checks every state-changing request: the browser must not say it
// is cross-site, an Origin header must be ours, and the token in the form
// (or the X-CSRF-Token header) must match the session's.
func (s *Server) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		if site := req.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			return errCSRF
		}
		if origin := req.Header.Get("Origin"); origin != "" && origin != "null" {
			u, err := url.Parse(origin)
			if err != nil || !strings.EqualFold(u.Host, req.Host) {
				return errCSRF
			}
		}
		want, _ := c.Get(ctxCSRF).(string)
		got := req.Header.Get(csrfHeader)
		if got == "" {
			got = c.FormValue(csrfField)
		}
		if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return errCSRF
		}
		return next(c)
	}
}

// access is what a route requires of its caller.
type access string

const (
	public   access = "public"    // anyone
	signedIn access = "signed-in" // any signed-in user (every role may read)
	proposer access = access(auth.RoleProposer)
	approver access = access(auth.RoleApprover)
	operator access = access(auth.RoleOperator)
	admin    access = access(auth.RoleAdmin)
	// testSender: whoever the permission table lets test-send (the
	// proposer, approvers, operators: more than one role).
	testSender access = "action:" + access(auth.ActionTestSend)
	// discarder: whoever may discard a draft (its proposers, operators).
	discarder access = "action:" + access(auth.ActionDiscard)
	// link: anyone holding the link's token, which the handler checks
	// itself (unsubscribe links): no session and no CSRF token needed.
	link access = "link"
)

func actorOf(c echo.Context) (auth.Actor, bool) {
	a, ok := c.Get(ctxActor).(auth.Actor)
	return a, ok
}

// allowed reports whether a (signed in or not) may use a route needing need.
func allowed(a auth.Actor, signed bool, need access) bool {
	switch need {
	case public, link:
		return true
	case signedIn:
		return signed
	case testSender, discarder:
		return signed && auth.Authorize(a, auth.Action(strings.TrimPrefix(string(need), "action:"))) == nil
	default:
		return signed && a.Has(auth.Role(need))
	}
}

// require wraps a handler with its route's access rule: a visitor who is
// not signed in is sent to sign in (or told 401); a user without the role
// is refused with 403.
func (s *Server) require(need access, h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		a, signed := actorOf(c)
		if allowed(a, signed, need) {
			return h(c)
		}
		if !signed {
			req := c.Request()
			if req.Method == http.MethodGet && !wantsJSON(c) {
				return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(req.URL.RequestURI()))
			}
			return echo.NewHTTPError(http.StatusUnauthorized, "sign in first")
		}
		if need == testSender {
			return echo.NewHTTPError(http.StatusForbidden, whyNot(auth.Authorize(a, auth.ActionTestSend)))
		}
		return echo.NewHTTPError(http.StatusForbidden, "this needs the "+string(need)+" role, which "+a.Email+" does not have")
	}
}

func wantsJSON(c echo.Context) bool {
	p := c.Request().URL.Path
	return strings.HasPrefix(p, "/api/") || strings.HasSuffix(p, ".json") || strings.HasSuffix(p, "/counts") ||
		strings.Contains(c.Request().Header.Get("Accept"), "application/json")
}
