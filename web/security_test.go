package web

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// requireInert checks that a page runs no script but ours and carries no
// event handler or javascript: URL: hostile text was escaped, not obeyed.
func requireInert(t *testing.T, page string, body string) {
	t.Helper()
	d, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	require.NoError(t, err)
	scripts := d.Find("script")
	require.Equal(t, 1, scripts.Length(), "%s: only the app's script", page)
	require.True(t, strings.HasPrefix(scripts.AttrOr("src", ""), "/static/app."), page)
	require.Empty(t, strings.TrimSpace(scripts.Text()), page)
	d.Find("*").Each(func(_ int, s *goquery.Selection) {
		for _, a := range s.Nodes[0].Attr {
			name := strings.ToLower(a.Key)
			require.False(t, strings.HasPrefix(name, "on"), "%s: event handler %s=%q on <%s>", page, a.Key, a.Val, s.Nodes[0].Data)
			require.NotContains(t, strings.ToLower(a.Val), "javascript:", "%s: %s", page, a.Key)
		}
		switch s.Nodes[0].Data {
		case "img", "iframe", "object", "embed", "svg":
			if s.Nodes[0].Data == "iframe" {
				require.Equal(t, "", s.AttrOr("sandbox", "missing"), "%s: frames are sandboxed", page)
			}
		}
	})
	require.Equal(t, 0, d.Find("img").Length(), "%s: no image came from the payload", page)
}

func TestHostileTextRendersInert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const xss = `<script>alert(1)</script><img src=x onerror=alert(2)>"'><svg onload=alert(3)>javascript:alert(4)`
	csv := "email,first_name\n" +
		`victim@example.com,"` + strings.ReplaceAll(xss, `"`, `""`) + `"` + "\n" +
		"other@example.com,Ann\n"
	payload := plan.Payload{
		From:    "Billing <billing@example.com>",
		Subject: `Hi {{.first_name}} <script>alert("subject")</script>`,
		Text:    "Dear {{.first_name}}</pre><script>alert('text')</script>",
		HTML:    `<p>Dear {{.first_name}}</p><script>alert("html")</script>`,
	}
	ctx := context.Background()
	c := b.pending(campaignOpts{Targets: csv, Payload: payload})
	// The campaign name too.
	_, err := b.pool.Exec(ctx, `UPDATE campaign SET name = $2 WHERE id = $1`, c.ID, "Q4 "+xss)
	require.NoError(t, err)

	pages := map[string]string{}
	for _, path := range []string{"/campaigns", "/campaigns/" + c.ID + "/draft", "/campaigns/" + c.ID + "/draft?preview=1", "/campaigns/" + c.ID + "/approval"} {
		rec := b.as["approver"].get(path)
		require.Equal(t, http.StatusOK, rec.Code, path)
		pages[path] = rec.Body.String()
	}
	// The preview shows the hostile variable as text.
	d := parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/draft?preview=1"))
	require.Contains(t, tid(d, "preview-subject").Text(), "<script>alert(1)</script>")
	require.Contains(t, tid(d, "preview-text").Text(), "</pre><script>alert('text')</script>")

	// The HTML preview frame escapes variables (html/template) and runs
	// under a sandboxing CSP.
	rec := b.as["approver"].get("/campaigns/" + c.ID + "/preview.html?ordinal=1")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.True(t, strings.HasPrefix(rec.Header().Get("Content-Security-Policy"), "sandbox;"))

	// Approve, start, and record hostile provider responses and receipts.
	_, err = b.svc.Approve(ctx, b.as["approver"].actor, c.ID, b.hash(c))
	require.NoError(t, err)
	_, err = b.svc.Start(ctx, b.as["operator"].actor, c.ID)
	require.NoError(t, err)
	c = b.campaign(c.ID)
	p, err := plan.GetPlan(ctx, b.pool, c.PlanID)
	require.NoError(t, err)
	b.effect(p, 1, ledger.StateUnknown, "HTTP/1.1 502\r\n\r\n"+xss+"\x00\xff binary")
	e := b.effect(p, 2, ledger.StateFailed, xss)
	_ = e
	for _, path := range []string{"/campaigns/" + c.ID + "/run", "/campaigns/" + c.ID + "/run?state=unknown",
		"/campaigns/" + c.ID + "/targets/1", "/campaigns/" + c.ID + "/targets/2", "/campaigns/" + c.ID + "/audit", "/campaigns"} {
		rec := b.as["operator"].get(path)
		require.Equal(t, http.StatusOK, rec.Code, path)
		pages[path] = rec.Body.String()
	}
	d = parse(t, b.as["operator"].get("/campaigns/"+c.ID+"/targets/1"))
	raw := tid(d, "raw-response").Text()
	require.Contains(t, raw, "<script>alert(1)</script>", "shown as text")
	require.Contains(t, raw, "\uFFFD binary", "invalid UTF-8 shown as a replacement character")

	for path, body := range pages {
		requireInert(t, path, body)
		require.NotContains(t, body, "<script>alert", path)
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.as["viewer"].get("/campaigns")
	h := rec.Header()
	csp := h.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Contains(t, csp, "form-action 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	nonce := strings.TrimSuffix(strings.SplitN(strings.SplitN(csp, "'nonce-", 2)[1], "'", 2)[0], "'")
	require.Len(t, nonce, 24)
	d := parse(t, rec)
	require.Equal(t, nonce, d.Find("script").AttrOr("nonce", ""), "the script carries the request's nonce")
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
	require.Equal(t, "same-origin", h.Get("Referrer-Policy"))
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	require.NotEmpty(t, h.Get("X-Request-Id"))
	// A second request gets a fresh nonce.
	require.NotEqual(t, csp, b.as["viewer"].get("/campaigns").Header().Get("Content-Security-Policy"))

	// Assets are served at checksummed, immutable URLs.
	css := d.Find(`link[rel=stylesheet]`).AttrOr("href", "")
	rec = b.anon().get(css)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Header().Get("Cache-Control"), "immutable")
	require.Contains(t, rec.Header().Get("Content-Type"), "text/css")
	require.Equal(t, http.StatusNotFound, b.anon().get("/static/app.css").Code)

	// Over HTTPS, as a trusted proxy says, cookies are Secure and HSTS is
	// on; the same header from anyone else is not believed.
	req := httpGet("/login")
	req.Header.Set("X-Forwarded-Proto", "https")
	rec = httptestDo(b.srv.Handler(), req)
	require.Empty(t, rec.Header().Get("Strict-Transport-Security"), "no trusted proxy: a client's X-Forwarded-Proto is ignored")
	require.NotContains(t, rec.Header().Get("Set-Cookie"), "Secure")
	peer, err := netip.ParseAddrPort(req.RemoteAddr)
	require.NoError(t, err)
	behind := NewServer(Config{Pool: b.pool, Approval: b.svc, TrustedProxies: []netip.Prefix{netip.PrefixFrom(peer.Addr(), 32)}})
	rec = httptestDo(behind.Handler(), req)
	require.NotEmpty(t, rec.Header().Get("Strict-Transport-Security"))
	require.Contains(t, rec.Header().Get("Set-Cookie"), "Secure")
	req = httpGet("/login")
	req.RemoteAddr = "198.51.100.9:1234"
	req.Header.Set("X-Forwarded-Proto", "https")
	rec = httptestDo(behind.Handler(), req)
	require.Empty(t, rec.Header().Get("Strict-Transport-Security"), "a client that is not the proxy is not believed")
	require.NotContains(t, rec.Header().Get("Set-Cookie"), "Secure")
}

func TestStateChangesNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	hash := b.hash(c)
	ap := b.as["approver"]
	path := "/campaigns/" + c.ID + "/approve"

	refused := func(rec interface{ Result() *http.Response }) {
		t.Helper()
		resp := rec.Result()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Equal(t, approval.StatePendingApproval, b.campaign(c.ID).State)
	}
	// No token.
	refused(ap.postRaw(path, url.Values{"plan_hash": {hash}}))
	// A wrong token, and another user's token.
	refused(ap.postRaw(path, url.Values{"plan_hash": {hash}, csrfField: {"x"}}))
	refused(ap.postRaw(path, url.Values{"plan_hash": {hash}, csrfField: {b.as["viewer"].csrf}}))
	// The right token, but the browser says the request is cross-site.
	req := httpPost(path, url.Values{"plan_hash": {hash}, csrfField: {ap.csrf}})
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	refused(ap.do(req))
	req = httpPost(path, url.Values{"plan_hash": {hash}, csrfField: {ap.csrf}})
	req.Header.Set("Origin", "https://evil.example")
	refused(ap.do(req))
	// Sign-in without the form's cookie.
	rec := b.anon().postRaw("/login", url.Values{"email": {"approver@example.com"}, "password": {testPassword}})
	require.Equal(t, http.StatusForbidden, rec.Code)

	// With the token (and a same-origin browser) it works.
	req = httpPost(path, url.Values{"plan_hash": {hash}, csrfField: {ap.csrf}})
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", "http://example.com")
	rec = ap.do(req)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, approval.StateApproved, b.campaign(c.ID).State)
}

// session starts a session for user id without a password check (the
// route matrix needs many; auth.Login would hash a password each time).
func (b *bundle) session(userID int64) *client {
	b.t.Helper()
	token := randomToken(32)
	sum := sha256.Sum256([]byte(token))
	_, err := b.pool.Exec(context.Background(), `INSERT INTO session (id, user_id, expires_at) VALUES ($1, $2, now() + interval '1 hour')`, sum[:], userID)
	require.NoError(b.t, err)
	return &client{t: b.t, h: b.srv.Handler(), token: token, csrf: csrfFromSession(token)}
}

// TestRouteRoleMatrix walks every state-changing route of routeTable as
// every role and as a visitor: each may use exactly the routes its role
// allows. The GET routes — the UI's, the API's and the server's own — are
// TestReadMatrix's: each as every caller on someone else's object, on
// the caller's own and on one that does not exist, by the read rule.
func TestRouteRoleMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	b.effect(p, 1, ledger.StateUnknown, "timeout")
	// A second campaign the matrix leaves alone, for what each role sees.
	c2, p2 := b.started(campaignOpts{Targets: csvOf(2)})
	b.effect(p2, 1, ledger.StateUnknown, "timeout")
	victim := b.user("victim@example.com", "viewer")
	_, tok, err := auth.CreateToken(ctx, b.pool, "victim@example.com", "matrix", false)
	require.NoError(t, err)
	params := strings.NewReplacer(":id", c.ID, ":ordinal", "1",
		":uid", strconv.FormatInt(victim.actor.UserID, 10), ":tid", strconv.FormatInt(tok.ID, 10))

	roles := []string{"visitor", "admin", "proposer", "approver", "operator", "viewer"}
	for _, r := range routeTable() {
		if r.method == http.MethodGet {
			continue // TestReadMatrix
		}
		path := params.Replace(r.path)
		for _, role := range roles {
			var cl *client
			signed := role != "visitor"
			if signed {
				cl = b.session(b.as[role].actor.UserID)
			} else {
				// A visitor with the sign-in form's CSRF cookie.
				cl = b.anon()
			}
			status := cl.post(path, url.Values{}).Code
			name := r.method + " " + r.path + " as " + role
			var actor auth.Actor
			if signed {
				actor = b.as[role].actor
			}
			ok := allowed(actor, signed, r.need)
			switch {
			case ok:
				require.Less(t, status, 500, name)
				if r.path != "/login" {
					require.NotContains(t, []int{401, 403}, status, name)
				}
			case !signed:
				// No session: the CSRF check (no token to match) or the
				// sign-in requirement refuses it.
				require.Contains(t, []int{401, 403}, status, name)
			default:
				require.Equal(t, http.StatusForbidden, status, name)
			}
		}
	}

	// What each role sees on the run page matches what it may do.
	for _, role := range roles[1:] {
		d := parse(t, b.session(b.as[role].actor.UserID).get("/campaigns/"+c2.ID+"/run"))
		canOperate := role == "admin" || role == "operator"
		require.Equal(t, canOperate, tid(d, "action-pause").Length() == 1, role)
		d = parse(t, b.session(b.as[role].actor.UserID).get("/campaigns/"+c2.ID+"/targets/1"))
		require.Equal(t, canOperate, tid(d, "resolve-form").Length() == 1, role)
		d = parse(t, b.session(b.as[role].actor.UserID).get("/campaigns"))
		require.Equal(t, role == "admin", tid(d, "nav-admin").Length() == 1, role)
	}
}
