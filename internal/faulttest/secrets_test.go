package faulttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
)

// secretValue is a fresh secret, labelled so a leak says which one.
func secretValue(label string) string {
	var b [12]byte
	rand.Read(b[:])
	return label + "-" + hex.EncodeToString(b[:])
}

// exchange is one HTTP request the test made and the answer it got.
type exchange struct {
	what   string
	status int
	body   string
}

// recorder makes HTTP requests and keeps every answer's body.
type recorder struct {
	t       *testing.T
	base    string
	client  *http.Client
	mu      sync.Mutex
	answers []exchange
}

func (r *recorder) do(method, path string, header map[string]string, body io.Reader) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, body)
	require.NoError(r.t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	require.NoError(r.t, err, "%s %s", method, path)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(r.t, err)
	r.mu.Lock()
	r.answers = append(r.answers, exchange{what: method + " " + path, status: resp.StatusCode, body: string(b)})
	r.mu.Unlock()
	return resp.StatusCode, string(b)
}

// api calls the JSON API with a bearer token and decodes a 2xx answer into out.
func (r *recorder) api(token, method, path string, in any, out any) int {
	r.t.Helper()
	var body io.Reader
	h := map[string]string{"Accept": "application/json"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(r.t, err)
		body = bytes.NewReader(b)
		h["Content-Type"] = "application/json"
	}
	status, text := r.do(method, "/api/v1"+path, h, body)
	if out != nil && status/100 == 2 {
		require.NoError(r.t, json.Unmarshal([]byte(text), out), text)
	}
	return status
}

// runCLI runs an onceplan command to its end; it returns stdout and keeps
// stderr in *logs.
func runCLI(t *testing.T, logs *strings.Builder, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	logs.WriteString(errOut.String())
	require.NoError(t, err, "onceplan %s: %s", args[0], errOut.String())
	return out.String()
}

// TestSecretsNeverInLogsOrErrorPages runs a full campaign through `onceplan
// serve` with secrets everywhere an operator puts them — an SMTP provider
// URL with user:password@ (the relay takes AUTH PLAIN), webhook provider
// URLs with credentials (one of them unreachable, so its errors are
// logged and stored), a database URL with a password, the admin password
// from ONCEPLAN_ADMIN_PASSWORD, users' passwords, API tokens, a session —
// and with failing requests of every kind: wrong password, forged and
// misplaced tokens, malformed JSON, wrong plan hash, forbidden role, a
// missing CSRF token, unknown pages, and the database stopped under the
// server (5xx pages). Every line the server and the CLI commands wrote and
// every HTTP answer body is searched: no secret appears in any of them.
func TestSecretsNeverInLogsOrErrorPages(t *testing.T) {
	t.Parallel()
	pg := newPGServer(t)
	db := poolEnv(t, pg.url)

	adminPass := secretValue("adminpass")
	userPass := map[string]string{
		"proposer": secretValue("proposerpass"), "approver": secretValue("approverpass"), "operator": secretValue("operatorpass"),
	}
	wrongPass := secretValue("wrongpass")
	smtpPass, hookPass, deadPass, dbPass := secretValue("smtppass"), secretValue("hookpass"), secretValue("deadpass"), secretValue("dbpass")
	pmToken, mjSecret := secretValue("pmtoken"), secretValue("mjsecret")
	resendKey := secretValue("re_resendkey")

	// The database URL carries a password (the private socket trusts the
	// connection, so PostgreSQL never asks for it; it must stay out of
	// sight all the same).
	u, err := neturl.Parse(pg.url)
	require.NoError(t, err)
	u.User = neturl.UserPassword(u.User.Username(), dbPass)
	dbURL := u.String()

	// Users and API tokens, made with the CLI as an operator would.
	var cliLogs strings.Builder
	tokens := map[string]string{}
	for _, role := range []string{"proposer", "approver", "operator"} {
		email := role + "@example.com"
		// Everything `user add` prints is searched; `token create` prints
		// the token alone on stdout, by design, and its stderr is searched.
		cliLogs.WriteString(runCLI(t, &cliLogs, userPass[role]+"\n", "user", "add", "--database-url", dbURL, "--email", email, "--role", role, "--password-stdin"))
		tokens[role] = strings.TrimSpace(runCLI(t, &cliLogs, "", "token", "create", "--database-url", dbURL, "--user", email, "--name", "faulttest"))
		require.NotEmpty(t, tokens[role])
	}

	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	hook := sink.NewWebhook(sink.WebhookOpts{Dedupe: true})
	t.Cleanup(hook.Close)
	hook.ApplyThenFail(2, 500) // two unknowns, settled by resending
	hookHost := strings.TrimPrefix(strings.SplitN(hook.URL(), "/hook", 2)[0], "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := ln.Addr().String()
	ln.Close() // nobody listens there: connection refused
	// Postmark's API (its server token in postmark://TOKEN@) and Mailjet's
	// SMTP relay with its probe (API key and secret as SMTP credentials),
	// each with an answer lost, so that the probe runs with the secret.
	pm := sink.NewPostmark(sink.PostmarkOpts{Token: pmToken})
	t.Cleanup(pm.Close)
	pm.AcceptThenFail(1, 500)
	mjRelay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(mjRelay.Close)
	mj := sink.NewMailjet(sink.MailjetOpts{SMTP: mjRelay, APIKey: "mjkey", APISecret: mjSecret})
	t.Cleanup(mj.Close)
	mjRelay.DropAfterData(1)
	// Resend's API (its API key in resend://KEY@), with an email created
	// and then answered 500, so that recovery sends again with the key.
	rs := sink.NewResend(sink.ResendOpts{APIKey: resendKey})
	t.Cleanup(rs.Close)
	rs.ApplyThenFail(1, 500)
	providers := []string{
		"rs=" + rs.URL(),
		"pm=" + pm.URL(),
		"mj=" + mj.SMTPURL() + "&timeout=5s",
		"mail=smtp://mailuser:" + smtpPass + "@" + relay.Addr() + "?tls=none&concurrency=2",
		"hook=http://hookuser:" + hookPass + "@" + hookHost + "/hook?dedupe=true&concurrency=2",
		"dead=http://deaduser:" + deadPass + "@" + deadAddr + "/hook?timeout=2s",
	}
	serve, base := startServe(t, dbURL, providers, fastFlags,
		[]string{"ONCEPLAN_ADMIN_EMAIL=admin@example.com", "ONCEPLAN_ADMIN_PASSWORD=" + adminPass})

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	r := &recorder{t: t, base: base, client: &http.Client{Timeout: 30 * time.Second, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	api := &recorder{t: t, base: base, client: &http.Client{Timeout: 30 * time.Second}}

	// Campaigns through the API: proposer creates and submits, approver
	// approves, operator starts.
	type campaignView struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		PlanHash string `json:"plan_hash"`
	}
	create := func(provider string, n int) string {
		targets := make([]map[string]any, n)
		for i := range targets {
			targets[i] = map[string]any{"address": fmt.Sprintf("%s%03d@example.com", provider, i), "vars": map[string]string{"name": fmt.Sprint("T", i)}}
		}
		var c campaignView
		require.Equal(t, 201, api.api(tokens["proposer"], "POST", "/campaigns", map[string]any{
			"name": "secrets on " + provider, "provider": provider, "from": "sender@example.com",
			"subject": "Hello {{.name}}", "text": "Hi {{.name}}", "targets": targets,
		}, &c))
		require.Equal(t, 200, api.api(tokens["proposer"], "POST", "/campaigns/"+c.ID+"/submit", nil, &c))
		// Failing requests on the way: the proposer may not approve, and a
		// wrong plan hash is refused.
		require.Equal(t, 403, api.api(tokens["proposer"], "POST", "/campaigns/"+c.ID+"/approve", map[string]string{"plan_hash": c.PlanHash}, nil))
		require.Equal(t, 409, api.api(tokens["approver"], "POST", "/campaigns/"+c.ID+"/approve", map[string]string{"plan_hash": strings.Repeat("0", len(c.PlanHash))}, nil))
		require.Equal(t, 200, api.api(tokens["approver"], "POST", "/campaigns/"+c.ID+"/approve", map[string]string{"plan_hash": c.PlanHash}, &c))
		require.Equal(t, 200, api.api(tokens["operator"], "POST", "/campaigns/"+c.ID+"/start", nil, &c))
		return c.ID
	}
	const nMail, nHook = 20, 10
	mailID := create("mail", nMail)
	hookID := create("hook", nHook)
	deadID := create("dead", 1)
	const nPM, nMJ = 5, 3
	pmID := create("pm", nPM)
	mjID := create("mj", nMJ)
	const nRS = 5
	rsID := create("rs", nRS)

	// Failing API requests.
	forged := tokens["operator"][:len(tokens["operator"])-4] + "abcd"
	for _, h := range []map[string]string{
		{"Authorization": "Bearer " + forged},
		{"Authorization": "Token " + tokens["operator"]},
		{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("admin@example.com:"+adminPass))},
		{"X-Api-Key": tokens["operator"]},
	} {
		status, _ := api.do("GET", "/api/v1/campaigns", h, nil)
		require.Equal(t, 401, status)
	}
	status, _ := api.do("GET", "/api/v1/campaigns?token="+tokens["operator"], nil, nil)
	require.Equal(t, 401, status)
	status, _ = api.do("POST", "/api/v1/campaigns", map[string]string{"Authorization": "Bearer " + tokens["proposer"], "Content-Type": "application/json"},
		strings.NewReader(`{"name": "broken", "provider": "mail", "smtp_password": "`+smtpPass+`", `))
	require.Equal(t, 400, status)
	status, _ = api.do("POST", "/api/v1/campaigns", map[string]string{"Authorization": "Bearer " + tokens["proposer"], "Content-Type": "application/json"},
		strings.NewReader(`{"name": "unknown field", "provider": "mail", "password": "`+adminPass+`"}`))
	require.Equal(t, 400, status)
	require.Equal(t, 404, api.api(tokens["operator"], "GET", "/campaigns/00000000-0000-0000-0000-000000000000", nil, nil))
	require.Contains(t, []int{400, 404}, api.api(tokens["operator"], "POST", "/effects/v1:"+strings.Repeat("ab", 32)+"/resolve",
		map[string]string{"outcome": "delivered", "reason": "no such effect"}, nil))

	// The web UI: a wrong password, then the admin's from the environment.
	status, _ = r.do("GET", "/login", nil, nil)
	require.Equal(t, 200, status)
	csrf := ""
	for _, c := range jar.Cookies(mustURL(t, base)) {
		if c.Name == "onceplan_csrf" {
			csrf = c.Value
		}
	}
	require.NotEmpty(t, csrf)
	login := func(email, password string) int {
		form := neturl.Values{"email": {email}, "password": {password}, "csrf_token": {csrf}, "next": {"/campaigns"}}
		status, _ := r.do("POST", "/login", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, strings.NewReader(form.Encode()))
		return status
	}
	require.Equal(t, 401, login("admin@example.com", wrongPass))
	require.Equal(t, 401, login("nobody@example.com", adminPass))
	require.Equal(t, 303, login("admin@example.com", adminPass))
	session := ""
	for _, c := range jar.Cookies(mustURL(t, base)) {
		if c.Name == "onceplan_session" {
			session = c.Value
		}
	}
	require.NotEmpty(t, session)

	waitFor(t, time.Minute, "the mail and hook campaigns to complete with every target done", func() bool {
		return db.completed(mailID, nMail) && db.completed(hookID, nHook) && db.completed(pmID, nPM) && db.completed(mjID, nMJ) && db.completed(rsID, nRS)
	}, serve)
	require.Positive(t, pm.Searches(), "the Postmark probe ran")
	require.Positive(t, mj.Searches(), "the Mailjet probe ran")
	require.Len(t, rs.Effects(), nRS, "one Resend email per target, the one answered 500 included")
	for _, m := range relay.Messages() {
		require.Equal(t, "mailuser", m.User, "the relay authenticated the provider's user")
	}
	require.Len(t, relay.Messages(), nMail)
	waitFor(t, 30*time.Second, "the unreachable provider's failed attempts", func() bool {
		var n int
		err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM effect WHERE state = 'failed'`).Scan(&n)
		return err == nil && n > 0
	}, serve)

	// Pages that show providers, effects, reasons and errors.
	for _, path := range []string{
		"/campaigns", "/admin", "/campaigns/" + mailID, "/campaigns/" + mailID + "/run", "/campaigns/" + hookID + "/run",
		"/campaigns/" + deadID + "/run", "/campaigns/" + deadID + "/targets/0", "/campaigns/" + deadID + "/targets/1",
		"/campaigns/" + hookID + "/targets/0", "/campaigns/" + hookID + "/targets/1", "/campaigns/" + deadID + "/audit",
		"/campaigns/00000000-0000-0000-0000-000000000000", "/no-such-page", "/campaigns/new",
		"/campaigns/" + rsID + "/run", "/campaigns/" + rsID + "/targets/0",
		"/campaigns/" + pmID + "/run", "/campaigns/" + pmID + "/targets/0", "/campaigns/" + mjID + "/run", "/campaigns/" + mjID + "/targets/0",
	} {
		r.do("GET", path, nil, nil)
	}
	// A state change without the CSRF token is refused.
	status, _ = r.do("POST", "/campaigns/"+deadID+"/cancel", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, strings.NewReader("reason=x"))
	require.Equal(t, 403, status)
	for _, id := range []string{mailID, hookID, deadID} {
		api.api(tokens["operator"], "GET", "/campaigns/"+id+"/targets?limit=50", nil, nil)
		api.api(tokens["operator"], "GET", "/campaigns/"+id+"/audit", nil, nil)
	}
	require.Equal(t, 200, api.api(tokens["operator"], "POST", "/campaigns/"+deadID+"/cancel", map[string]string{"reason": "its endpoint is gone"}, nil))

	// The database stopped under the server: 5xx pages and answers, and
	// every background loop logs its connection errors.
	pg.stop("fast")
	_, page := r.do("GET", "/campaigns", nil, nil)
	require.Contains(t, page, "Something went wrong")
	require.GreaterOrEqual(t, api.api(tokens["operator"], "GET", "/campaigns", nil, nil), 500)
	require.Equal(t, 503, httpGet(base+"/readyz"))
	time.Sleep(2 * time.Second)
	pg.start()
	waitFor(t, 30*time.Second, "/readyz to answer 200 again", func() bool { return httpGet(base+"/readyz") == 200 }, serve)
	serve.stop(t)

	logs := serve.Logs() + cliLogs.String()
	require.Contains(t, logs, "mailuser:xxxxx@", "the SMTP provider's URL is logged, with its password redacted")
	require.Contains(t, logs, "failed to connect", "the database's absence was logged")
	secrets := map[string]string{
		"ONCEPLAN_ADMIN_PASSWORD": adminPass, "a wrong password": wrongPass,
		"the SMTP password": smtpPass, "the webhook password": hookPass, "the unreachable webhook's password": deadPass,
		"the database password": dbPass, "the session token": session,
		"the Postmark server token": pmToken, "the Mailjet API secret": mjSecret,
		"the Resend API key": resendKey,
	}
	for role, p := range userPass {
		secrets[role+"'s password"] = p
	}
	for role, tok := range tokens {
		secrets[role+"'s API token"] = tok
	}
	secrets["a forged token"] = forged
	answers := append(r.answers, api.answers...)
	errorBodies := 0
	for _, a := range answers {
		if a.status >= 400 {
			errorBodies++
		}
	}
	shown := false
	for _, a := range answers {
		shown = shown || strings.Contains(a.body, "deaduser:xxxxx@")
	}
	require.True(t, shown, "the unreachable provider's error is shown, with its URL's password redacted")
	shown = false
	for _, a := range answers {
		shown = shown || (a.what == "GET /admin" && strings.Contains(a.body, "resend://xxxxx@"))
	}
	require.True(t, shown, "the admin page lists the Resend provider, with its API key redacted")
	t.Logf("searched %d lines of logs and %d HTTP answers (%d of them errors) for %d secrets",
		strings.Count(logs, "\n"), len(answers), errorBodies, len(secrets))
	for what, s := range secrets {
		for _, form := range []string{s, neturl.QueryEscape(s), base64.StdEncoding.EncodeToString([]byte(s))} {
			require.NotContains(t, logs, form, "%s appears in the logs", what)
			for _, a := range answers {
				require.NotContains(t, a.body, form, "%s appears in the answer to %s (HTTP %d)", what, a.what, a.status)
			}
		}
	}
}

func mustURL(t *testing.T, raw string) *neturl.URL {
	u, err := neturl.Parse(raw)
	require.NoError(t, err)
	return u
}
