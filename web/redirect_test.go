package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// browserTarget is where a browser goes for a Location header, the way the
// WHATWG URL parser reads it: leading and trailing C0 controls and spaces
// dropped, every tab and line break removed, a backslash read as a slash
// (http and https are special schemes), then resolved against the page.
func browserTarget(t *testing.T, base, location string) *url.URL {
	t.Helper()
	s := strings.TrimFunc(location, func(r rune) bool { return r <= ' ' })
	s = strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = strings.ReplaceAll(s[:i], `\`, "/") + s[i:]
	} else {
		s = strings.ReplaceAll(s, `\`, "/")
	}
	b, err := url.Parse(base)
	require.NoError(t, err)
	ref, err := url.Parse(s)
	if err != nil {
		// Go refuses what a browser would still follow somewhere: treat
		// it as off-site.
		return &url.URL{Scheme: "invalid", Host: "unparsable"}
	}
	return b.ResolveReference(ref)
}

// offSiteNexts are known ways to make a "next" path leave the site once a
// browser has normalised it (a raw NUL is refused before any handler:
// TestNULIsRefusedAtTheBoundary).
var offSiteNexts = []string{
	"/\t/evil.example/phish", // the reported one: /%09/evil.example/phish
	"/\n/evil.example", "/\r/evil.example", "/\r\n/evil.example",
	"/ /evil.example", "/\x0b/evil.example", "/\x7f/evil.example",
	"//evil.example/x", "///evil.example", "////evil.example",
	`/\evil.example`, `\\evil.example`, `/\/evil.example`, `\/evil.example`,
	"/%2F/evil.example", "/%2f%2fevil.example", "/%5Cevil.example", "/%5c/evil.example",
	"/%09/evil.example", "/%0a/evil.example", "/%0d%0a/evil.example", "/%00/evil.example",
	"%2F%2Fevil.example", "/%252F/evil.example",
	"https://evil.example/", "http:evil.example", "HTTPS://evil.example", "javascript:alert(1)",
	"data:text/html,<script>alert(1)</script>", " //evil.example", "\t//evil.example",
	"//evil.example@onceplan.test/", "/\u3000/evil.example", "/\u2028/evil.example",
	"", "campaigns", "evil.example",
}

// TestSignInRedirectRefusesOffSiteNexts tries each bypass through the real
// routes: the sign-in form's hidden field, the sign-in POST's redirect,
// and the signed-in visit to /login. Each must land on this site.
func TestSignInRedirectRefusesOffSiteNexts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const base = "http://onceplan.test/login"
	signedIn := b.as["viewer"]
	for _, next := range offSiteNexts {
		// GET /login?next=… before sign-in: the form carries a safe next.
		rec := b.anon().get("/login?next=" + url.QueryEscape(next))
		require.Equal(t, http.StatusOK, rec.Code, "%q", next)
		require.Equal(t, "/campaigns", parse(t, rec).Find(`input[name=next]`).AttrOr("value", ""), "%q", next)

		// POST /login with the right password and the hostile next.
		csrf := randomToken(32)
		req := httpPost("/login", url.Values{"csrf_token": {csrf}, "email": {"proposer@example.com"}, "password": {testPassword}, "next": {next}})
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
		rec = httptestDo(b.srv.Handler(), req)
		require.Equal(t, http.StatusSeeOther, rec.Code, "%q", next)
		loc := rec.Header().Get("Location")
		require.Equal(t, "/campaigns", loc, "%q", next)
		require.Equal(t, "onceplan.test", browserTarget(t, base, loc).Host, "%q", next)

		// GET /login?next=… when signed in redirects at once.
		rec = signedIn.get("/login?next=" + url.QueryEscape(next))
		require.Equal(t, http.StatusSeeOther, rec.Code, "%q", next)
		require.Equal(t, "/campaigns", rec.Header().Get("Location"), "%q", next)
	}

	// Same-origin paths, the ones the sign-in redirect itself makes, are
	// kept as they are.
	for _, next := range []string{"/campaigns/new", "/campaigns/x/run?state=done", "/campaigns/x/run?q=ann%20smith&after=3",
		"/tool-calls/effects/abc%2Fdef", "/suppressions?address=a%40example.com"} {
		rec := signedIn.get("/login?next=" + url.QueryEscape(next))
		require.Equal(t, http.StatusSeeOther, rec.Code, next)
		loc := rec.Header().Get("Location")
		require.Equal(t, next, loc)
		require.Equal(t, "onceplan.test", browserTarget(t, base, loc).Host, next)
	}
}
