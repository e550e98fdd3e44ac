package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
)

// TestServeNotifierEscapesSlackMarkup: a campaign named with Slack markup
// — a disguised link and an @channel — is created and submitted through
// the JSON API of a real onceplan serve. The webhook's "text" (what Slack
// shows) carries the name with &, < and > escaped as Slack documents, so
// Slack shows it as typed and links nowhere, mentions nobody; the email
// to the approver and the webhook's structured fields keep it as typed.
func TestServeNotifierEscapesSlackMarkup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	smtp, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(smtp.Close)
	team := sink.NewReceiver()
	t.Cleanup(team.Close)

	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.App)
	const password = "correct horse battery staple"
	for _, u := range []struct {
		email string
		role  auth.Role
	}{{"pat@example.com", auth.RoleProposer}, {"amy@example.com", auth.RoleApprover}} {
		_, err := auth.CreateUser(ctx, pool, auth.NewUser{Email: u.email, Roles: []auth.Role{u.role}, Password: password})
		require.NoError(t, err)
	}
	token, _, err := auth.CreateToken(ctx, pool, "pat@example.com", "slack test", false)
	require.NoError(t, err)

	var out lockedBuffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(k string) string {
		switch k {
		case "ONCEPLAN_ADMIN_EMAIL":
			return "root@example.com"
		case "ONCEPLAN_ADMIN_PASSWORD":
			return password
		}
		return ""
	}}
	args := []string{"--database-url", urls.App, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0",
		"--public-url", "https://onceplan.example.com", "--provider", "mail=" + smtp.URL(),
		"--notify", "mail=mailto:?provider=mail&from=onceplan@example.com",
		"--notify", "team=" + team.URL() + "?events=submitted"}
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, env, args) }()
	re := regexp.MustCompile(`"msg":"onceplan is serving","url":"([^"]+)"`)
	var base string
	for deadline := time.Now().Add(time.Minute); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
	}
	require.NotEmpty(t, base, "onceplan serve did not say it was serving within a minute: %s", out.String())

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
	const name = "<https://evil.example/phish|Review and approve here> <!channel> & <@U024BE7LH>"
	status, created := api(http.MethodPost, "/campaigns", map[string]any{
		"name": name, "provider": "mail", "from": "news@example.com", "subject": "Hello", "text": "Hi",
		"targets": []map[string]any{{"address": "ann@example.com"}},
	})
	require.Equal(t, http.StatusCreated, status, created)
	status, submitted := api(http.MethodPost, "/campaigns/"+created["id"].(string)+"/submit", nil)
	require.Equal(t, http.StatusOK, status, submitted)

	deadline := time.Now().Add(30 * time.Second)
	for len(team.Accepted()) == 0 || len(smtp.Messages()) < 2 {
		require.True(t, time.Now().Before(deadline), "within 30 s, the team's webhook got %d deliveries and the approvers %d emails, not 1 and 2",
			len(team.Accepted()), len(smtp.Messages()))
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, team.Accepted(), 1)
	var body map[string]any
	require.NoError(t, json.Unmarshal(team.Accepted()[0].Body, &body))
	text := body["text"].(string)
	require.NotContains(t, text, "<https://evil", "a disguised link reached Slack")
	require.NotContains(t, text, "<!channel>", "an @channel reached Slack")
	require.NotContains(t, text, "<@U024BE7LH>", "a mention reached Slack")
	require.Contains(t, text, "“&lt;https://evil.example/phish|Review and approve here&gt; &lt;!channel&gt; &amp; &lt;@U024BE7LH&gt;”")
	require.Equal(t, strings.Count(text, "<"), 0, text)
	require.Contains(t, text, " https://onceplan.example.com/campaigns/", "the approval link is still there")
	require.Equal(t, name, body["campaign_name"], "the structured field is data, not Slack markup")

	for _, m := range smtp.Messages() {
		subject, _, err := m.Content()
		require.NoError(t, err)
		require.Contains(t, subject, "“"+name+"”", "an email shows the name as typed")
	}
	cancel()
	require.NoError(t, <-errc, out.String())
}
