package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
)

// TestServeNotifies runs onceplan serve with a real SMTP sink behind a
// mailto: notifier and two webhooks: one that answers 500 once, one that
// nobody listens at. A submit through the JSON API returns at once; each
// approver gets one email with the approval URL; the failing webhook is
// retried and gets exactly one delivery; the dead one shows on the admin
// page with its last answer, and in /metrics.
func TestServeNotifies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	team := sink.NewReceiver()
	t.Cleanup(team.Close)
	team.FailNext(1, http.StatusInternalServerError)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())

	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.App)
	const password = "correct horse battery staple"
	for _, u := range []struct {
		email string
		role  auth.Role
	}{{"pat@example.com", auth.RoleProposer}, {"amy@example.com", auth.RoleApprover}, {"abe@example.com", auth.RoleApprover}} {
		_, err := auth.CreateUser(ctx, pool, auth.NewUser{Email: u.email, Roles: []auth.Role{u.role}, Password: password})
		require.NoError(t, err)
	}
	token, _, err := auth.CreateToken(ctx, pool, "pat@example.com", "notify test", false)
	require.NoError(t, err)

	var out lockedBuffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(k string) string {
		switch k {
		case "ONCEPLAN_ADMIN_EMAIL":
			return "root@example.com"
		case "ONCEPLAN_ADMIN_PASSWORD":
			return password
		case "ONCEPLAN_NOTIFY":
			// Flags win over the environment: this is never parsed.
			return "ignored=https://example.com/never"
		case "TEAM_SECRET":
			return "the-teams-shared-secret"
		}
		return ""
	}}
	const public = "https://onceplan.example.com"
	args := []string{"--database-url", urls.App, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0",
		"--public-url", public, "--maintenance-interval", "200ms", "--provider", "mail=" + smtp.URL(),
		"--notify", "mail=mailto:?provider=mail&from=onceplan@example.com",
		"--notify", "team=" + team.URL() + "?hmac_secret_env=TEAM_SECRET",
		"--notify", "dead=" + dead + "?events=submitted"}
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, env, args) }()
	re := regexp.MustCompile(`"msg":"onceplan is serving","url":"([^"]+)"`)
	var base string
	for deadline := time.Now().Add(time.Minute); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
	}
	require.NotEmpty(t, base, out.String())
	require.Contains(t, out.String(), `"msg":"notifier","name":"team","kind":"webhook"`)
	require.NotContains(t, out.String(), "the-teams-shared-secret")

	api := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest(method, base+"/api/v1"+path, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var got map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		return resp.StatusCode, got
	}
	status, created := api(http.MethodPost, "/campaigns", map[string]any{
		"name": "Spring newsletter", "provider": "mail", "from": "news@example.com", "subject": "Hello", "text": "Hi",
		"targets": []map[string]any{{"address": "ann@example.com"}, {"address": "bob@example.com"}},
	})
	require.Equal(t, http.StatusCreated, status, created)
	id := created["id"].(string)

	start := time.Now()
	status, submitted := api(http.MethodPost, "/campaigns/"+id+"/submit", nil)
	took := time.Since(start)
	require.Equal(t, http.StatusOK, status, submitted)
	require.Equal(t, "pending_approval", submitted["state"])
	require.Less(t, took, time.Second, "the submit waited for a notifier")

	approvalURL := public + "/campaigns/" + id + "/approval"
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	waitUntil("the approvers' emails and the team's delivery", func() bool {
		return len(smtp.Messages()) >= 3 && len(team.Accepted()) >= 1
	})
	per := map[string]int{}
	for _, m := range smtp.Messages() {
		_, text, err := m.Content()
		require.NoError(t, err)
		require.Contains(t, text, approvalURL)
		for _, r := range m.Rcpts {
			per[r]++
		}
	}
	// The admin holds every role, the approver's too; the proposer gets
	// nothing for their own submit.
	require.Equal(t, map[string]int{"amy@example.com": 1, "abe@example.com": 1, "root@example.com": 1}, per)
	require.Len(t, team.Requests(), 2, "a 500, then the retry")
	require.Len(t, team.Accepted(), 1)
	r := team.Accepted()[0]
	require.NoError(t, notify.Verify([]byte("the-teams-shared-secret"), r.Header.Get(notify.HeaderTimestamp), r.Header.Get(notify.HeaderSignature), r.Body, time.Now(), time.Minute))
	require.Contains(t, string(r.Body), approvalURL)

	// The admin page, as the admin.
	sess, _, err := auth.Login(ctx, pool, "root@example.com", password, auth.LoginMeta{})
	require.NoError(t, err)
	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: "onceplan_session", Value: sess})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	var d *goquery.Document
	waitUntil("the dead notifier's failed try on the admin page", func() bool {
		d, err = goquery.NewDocumentFromReader(strings.NewReader(get("/admin")))
		require.NoError(t, err)
		return d.Find(`[data-testid="undelivered-row"][data-notifier="dead"]`).Length() == 1
	})
	row := d.Find(`[data-testid="undelivered-row"][data-notifier="dead"]`)
	require.Equal(t, notify.StateRetrying, row.AttrOr("data-state", ""))
	require.Contains(t, row.Find(`[data-testid="undelivered-answer"]`).Text(), "connection refused")
	require.Equal(t, 3, d.Find(`[data-testid="notifier-row"]`).Length())
	require.Equal(t, "3", strings.TrimSpace(d.Find(`[data-testid="notifier-row"][data-name="mail"] [data-testid="notifier-delivered"]`).Text()))
	require.Equal(t, "1", strings.TrimSpace(d.Find(`[data-testid="notifier-row"][data-name="team"] [data-testid="notifier-delivered"]`).Text()))
	require.Equal(t, "1", strings.TrimSpace(d.Find(`[data-testid="notifier-row"][data-name="dead"] [data-testid="notifier-retrying"]`).Text()))
	require.Zero(t, d.Find(`[data-testid="undelivered-row"][data-notifier="team"]`).Length(), "delivered on its retry")
	require.NotContains(t, d.Text(), "the-teams-shared-secret")

	metrics := get("/metrics")
	for _, line := range []string{
		`onceplan_notifications{notifier="dead",state="retrying"} 1`,
		`onceplan_notifications{notifier="mail",state="delivered"} 3`,
		`onceplan_notifications{notifier="team",state="delivered"} 1`,
		`onceplan_notifications{notifier="team",state="failed"} 0`,
	} {
		require.Contains(t, metrics, line)
	}

	cancel()
	require.NoError(t, await.Recv(t, errc, time.Minute, "serve stopping when cancelled"), out.String())
}

// TestServeNotifyFlagRefused: a --notify serve cannot use is refused in
// one sentence naming the notifier, and its secret is not in it.
func TestServeNotifyFlagRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  string
		says string
	}{
		{[]string{"--notify", "ops=mailto:?provider=relay"}, "", `notifier "ops": provider "relay" is not configured (configured: outbox)`},
		{[]string{"--notify", "hook=https://u:hunter2-secret@example.com/x?hmac_secret_env=NOPE"}, "", `notifier "hook": hmac_secret_env names NOPE, which is not set or empty`},
		{nil, "ops=mailto:a@example.com,b@example.com?provider=outbox,hook=ftp://example.com", `notifier "hook": unknown scheme "ftp"`},
		{[]string{"--notify-window", "0s"}, "", "--notify-window 0s: want a positive duration"},
	} {
		var stdout, stderr bytes.Buffer
		env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "ONCEPLAN_NOTIFY" {
				return tc.env
			}
			return ""
		}}
		args := append([]string{"--database-url", pgtest.URL(t), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		err := runServe(context.Background(), env, args)
		requireOneLine(t, err)
		require.Contains(t, err.Error(), tc.says)
		require.NotContains(t, err.Error(), "hunter2")
	}
}
