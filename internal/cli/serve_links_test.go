package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
)

// apiCall sends one API request to base as token's holder, with the Host
// header host and an X-Forwarded-Proto: http a client may send, and
// decodes the JSON answer.
func apiCall(t *testing.T, base, token, host, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/api/v1"+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	req.Header.Set("X-Forwarded-Proto", "http")
	req.Header.Set("X-Forwarded-Host", host)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := from("127.0.0.1").Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out
}

// TestServeLinksComeFromThePublicURL: onceplan serve with --public-url
// answers every link of the JSON API under that URL — the approval_url an
// agent hands its human, the next steps' pages, the diff's page — whatever
// Host and X-Forwarded-* headers the request carries (a client, or a
// page that makes a browser call, chooses those).
func TestServeLinksComeFromThePublicURL(t *testing.T) {
	t.Parallel()
	pool, base := startServe(t, []string{"--public-url", "https://mail.example.com/onceplan/"}, nil)
	token, _, err := auth.CreateToken(context.Background(), pool, "owner@example.com", "assistant", true)
	require.NoError(t, err)
	const public = "https://mail.example.com/onceplan/campaigns/"
	const attacker = "attacker.example"

	st, created := apiCall(t, base, token, attacker, http.MethodPost, "/campaigns",
		`{"name":"Links","provider":"outbox","from":"a@example.com","subject":"Hi","text":"Hello","targets":[{"address":"ann@example.com"}]}`)
	require.Equal(t, http.StatusCreated, st, "%v", created)
	id := created["id"].(string)
	links := func(what string, answer map[string]any, steps string) {
		t.Helper()
		require.Equal(t, public+id+"/approval", answer["approval_url"], what)
		list, _ := answer[steps].([]any)
		for _, s := range list {
			if u, ok := s.(map[string]any)["url"].(string); ok {
				require.True(t, strings.HasPrefix(u, public+id+"/"), "%s: a step's page %q", what, u)
			}
		}
		require.NotContains(t, asJSON(t, answer), attacker, what)
	}
	links("the created campaign", created, "next_steps")
	require.NotEmpty(t, created["next_steps"], "a draft's next step is its submit, with its page")

	st, submitted := apiCall(t, base, token, attacker, http.MethodPost, "/campaigns/"+id+"/submit", "")
	require.Equal(t, http.StatusOK, st, "%v", submitted)
	links("the submitted campaign", submitted, "next_steps")
	st, got := apiCall(t, base, token, attacker, http.MethodGet, "/campaigns/"+id, "")
	require.Equal(t, http.StatusOK, st, "%v", got)
	links("the campaign", got, "next_steps")
	st, decision := apiCall(t, base, token, attacker, http.MethodGet, "/campaigns/"+id+"/decision", "")
	require.Equal(t, http.StatusOK, st, "%v", decision)
	require.NotEmpty(t, decision["waiting_for"], "an approver must act")
	links("the decision", decision, "waiting_for")
	st, diff := apiCall(t, base, token, attacker, http.MethodGet, "/campaigns/"+id+"/diff?against=previous", "")
	require.Equal(t, http.StatusOK, st, "%v", diff)
	require.Equal(t, public+id+"/diff?against=previous", diff["url"])
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestServeBelievesForwardedProtoOnlyFromItsProxies: X-Forwarded-Proto:
// https (Secure cookies, HSTS) is believed from a --trusted-proxies peer
// only, as X-Forwarded-For is; any other client sending it gets neither,
// and without --trusted-proxies nobody does.
func TestServeBelievesForwardedProtoOnlyFromItsProxies(t *testing.T) {
	t.Parallel()
	login := func(c *http.Client, base string) (hsts bool, secure bool) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/login", nil)
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-Proto", "https")
		resp, err := c.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		cookies := resp.Cookies()
		require.NotEmpty(t, cookies, "the sign-in form sets its CSRF cookie")
		secure = true
		for _, ck := range cookies {
			secure = secure && ck.Secure
		}
		return resp.Header.Get("Strict-Transport-Security") != "", secure
	}

	_, untrusted := startServe(t, nil, nil)
	for _, src := range []string{"127.0.0.1", "127.0.0.2"} {
		hsts, secure := login(from(src), untrusted)
		require.False(t, hsts, "no trusted proxies: a client's X-Forwarded-Proto (from %s) turns HSTS on", src)
		require.False(t, secure, "no trusted proxies: a client's X-Forwarded-Proto (from %s) makes cookies Secure", src)
	}

	_, trusted := startServe(t, nil, map[string]string{"ONCEPLAN_TRUSTED_PROXIES": "127.0.0.1/32"})
	hsts, secure := login(from("127.0.0.2"), trusted)
	require.False(t, hsts, "a client that is not the proxy is not believed")
	require.False(t, secure, "a client that is not the proxy is not believed")
	hsts, secure = login(from("127.0.0.1"), trusted)
	require.True(t, hsts, "the trusted proxy says the client came over HTTPS")
	require.True(t, secure, "the trusted proxy says the client came over HTTPS")
}
