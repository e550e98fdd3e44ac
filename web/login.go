package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/web/view"
)

// safeNext keeps a post-sign-in redirect on this site: a path, never a
// URL or a scheme-relative "//host".
func safeNext(next string) string {
	if !sameOriginPath(next) {
		return "/campaigns"
	}
	return next
}

// sameOriginPath reports whether p, as a Location header, keeps a browser
// on this site. Browsers do not read a Location the way Go's url.Parse
// does: the WHATWG URL parser drops every tab and line break anywhere,
// strips leading control characters and spaces, and reads a backslash as a
// slash, so "/\t/evil.example", "/\\evil.example" and " //evil.example"
// all name another host. Rather than follow each normalisation, refuse
// any control character, space or backslash outright, any path that
// starts with two slashes (or a slash and a backslash) before or after
// percent-decoding, and anything Go reads as having a scheme or host.
// The paths the sign-in redirect itself makes (require's RequestURI,
// already escaped) pass untouched.
func sameOriginPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsFunc(p, unsafeInLocation) {
		return false
	}
	path, _, _ := strings.Cut(p, "?")
	path, _, _ = strings.Cut(path, "#")
	// Decoded until it no longer changes (a few rounds): a proxy or a
	// later redirect that decodes once more must not find "//" either.
	for range 4 {
		if strings.HasPrefix(path, "//") || strings.HasPrefix(path, "/\\") || strings.ContainsFunc(path, unsafeInLocation) {
			return false
		}
		decoded, err := url.PathUnescape(path)
		if err != nil {
			return false
		}
		if decoded == path {
			break
		}
		path = decoded
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil && !u.ForceQuery
}

// unsafeInLocation: a rune a browser drops or rewrites in a URL, or that
// has no place in one of our paths unescaped.
func unsafeInLocation(r rune) bool {
	return r == '\\' || unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) || unicode.Is(unicode.Cf, r)
}

func (s *Server) handleLoginForm(c echo.Context) error {
	if _, ok := actorOf(c); ok {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	s.ensureLoginCSRF(c)
	return s.render(c, http.StatusOK, view.Login(view.LoginPage{Page: s.page(c, "Sign in", ""), Next: safeNext(c.QueryParam("next"))}))
}

// handleLogin checks the credentials (auth.Login throttles and records the
// attempt) and starts a session in an HttpOnly, SameSite cookie.
func (s *Server) handleLogin(c echo.Context) error {
	email := strings.TrimSpace(c.FormValue("email"))
	password := c.FormValue("password")
	next := safeNext(c.FormValue("next"))
	token, _, err := auth.Login(c.Request().Context(), s.cfg.Pool, email, password, auth.LoginMeta{
		IP: c.RealIP(), UserAgent: c.Request().UserAgent(),
	})
	if err != nil {
		status, _, msg := classify(err)
		if status >= 500 {
			return err
		}
		var te *auth.ThrottledError
		if errors.As(err, &te) {
			s.logThrottled(c, te)
		}
		if errors.Is(err, auth.ErrBadCredentials) {
			msg = "The email or password is wrong."
		}
		p := view.LoginPage{Page: s.page(c, "Sign in", ""), Email: email, Next: next}
		p.Error = msg
		return s.render(c, status, view.Login(p))
	}
	s.clearCookie(c, csrfCookie)
	s.setCookie(c, sessionCookie, token, int(auth.SessionMaxAge.Seconds()))
	return c.Redirect(http.StatusSeeOther, next)
}

// loggedEmailMax bounds the email a throttled attempt logs: a refused
// attempt is cheap, and must not write a megabyte of log for each.
const loggedEmailMax = 320

// logThrottled logs a refused sign-in with the email as typed, the client
// address and the wait, never the password, so that an operator sees who
// is being guessed at from where.
func (s *Server) logThrottled(c echo.Context, te *auth.ThrottledError) {
	email := c.FormValue("email")
	if len(email) > loggedEmailMax {
		email = strings.ToValidUTF8(email[:loggedEmailMax], "") + "…"
	}
	rid, _ := c.Get(ctxRequestID).(string)
	s.cfg.Logger.Warn("sign-in throttled", "email", email, "ip", c.RealIP(),
		"wait", te.Wait.Round(time.Second).String(), "until", te.Until, "scope", te.Scope, "request_id", rid)
}

func (s *Server) handleLogout(c echo.Context) error {
	if token, ok := c.Get(ctxSession).(string); ok {
		if err := auth.Logout(c.Request().Context(), s.cfg.Pool, token); err != nil {
			return err
		}
	}
	s.clearCookie(c, sessionCookie)
	return c.Redirect(http.StatusSeeOther, "/login")
}
