package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/api"
)

// reader is one person at the door: their session for the UI and their
// own token for the API.
type reader struct {
	session, token string
}

// toolReadServer is the UI and the JSON API on one HTTP server, as serve
// mounts them.
type toolReadServer struct {
	t   *testing.T
	url string
}

// get is GET path on the UI with r's session, or on the API (a path
// under /api/v1) with r's token; it returns the status and the body.
func (w toolReadServer) get(r reader, path string) (int, string) {
	w.t.Helper()
	req, err := http.NewRequest(http.MethodGet, w.url+path, nil)
	require.NoError(w.t, err)
	if strings.HasPrefix(path, api.Prefix) {
		req.Header.Set("Authorization", "Bearer "+r.token)
	} else {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: r.session})
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(w.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(w.t, err)
	return res.StatusCode, string(body)
}

// TestToolCallReadsAreTheAPIs: the one read rule of tool calls at every
// door, over HTTP with real sessions and tokens. A call's page in the UI
// and GET /api/v1/effects/{key} answer the same: its user (pat), an
// operator and an admin read it (its args, its raw answer); a viewer,
// another proposer and an approver get 404 from both, as for a key
// nobody began. The list of calls, its counts and its trail show each
// person only the calls they may open. An approval request is read by
// its user, operators, admins and approvers (who decide on it), and by
// nobody else.
func TestToolCallReadsAreTheAPIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	srv := NewServer(Config{Pool: b.pool, Approval: b.svc, Mount: func(e *echo.Echo) {
		api.Register(e, api.Config{Pool: b.pool, Approval: b.svc, BaseURL: "https://onceplan.example"})
	}})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	w := toolReadServer{t: t, url: ts.URL}

	person := func(c *client) reader {
		token, _, err := auth.CreateToken(ctx, b.pool, c.actor.Email, "own token", false)
		require.NoError(t, err)
		return reader{session: c.token, token: token}
	}
	pat := b.user("pat@example.com", auth.RoleProposer)
	readers := map[string]reader{"pat": person(pat)}
	for _, role := range []string{"viewer", "proposer", "approver", "operator", "admin"} {
		readers[role] = person(b.as[role])
	}

	// Pat's agent makes a call and settles it, and begins one that
	// waits for a person's approval.
	svc := toolcall.NewService(b.pool, toolcall.Options{})
	agent := pat.actor
	agent.Agent = true
	_, err := toolcall.Register(ctx, b.pool, toolcall.RegisterParams{Tool: "payment.send", ApprovalRequired: true, RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	begin := func(tool, event, args string) toolcall.BeginResult {
		res, err := svc.Begin(ctx, agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: event, Tool: tool,
			Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-secret"}}, Args: []byte(args), Lease: time.Minute})
		require.NoError(t, err)
		return res
	}
	card := begin("card.charge", "run-secret-31", `{"card": "4111 1111 1111 1111"}`)
	require.Equal(t, toolcall.Perform, card.Outcome)
	_, err = svc.Settle(ctx, agent, toolcall.SettleParams{Key: card.Status.Key, Lease: card.Status.LeaseID, Outcome: toolcall.Done,
		Receipt: "ch-1", Raw: []byte(`{"id":"ch-1","last4":"1111","raw-answer-secret":true}`)})
	require.NoError(t, err)
	waiting := begin("payment.send", "invoice-secret-42", `{"iban": "DE02 1234 5678"}`)
	require.Equal(t, toolcall.AwaitingApproval, waiting.Outcome)

	secrets := []string{"4111 1111 1111 1111", "raw-answer-secret", "run-secret-31", "acct-secret", "DE02 1234 5678", "invoice-secret-42"}
	// nothingOf: none of the calls' secrets is in body (but what the
	// reader typed into the path, which a page shows back to them).
	nothingOf := func(who, path, body string) {
		t.Helper()
		for _, s := range secrets {
			if !strings.Contains(path, s) {
				require.NotContains(t, body, s, "%s at %s", who, path)
			}
		}
	}
	for _, c := range []struct {
		key      ledger.Key
		mayRead  []string
		notFound []string
	}{
		{card.Status.Key, []string{"pat", "operator", "admin"}, []string{"viewer", "proposer", "approver"}},
		{waiting.Status.Key, []string{"pat", "operator", "admin"}, []string{"viewer", "proposer", "approver"}},
	} {
		ui, apiPath := "/tool-calls/effects/"+url.PathEscape(string(c.key)), api.Prefix+"/effects/"+string(c.key)
		for _, who := range c.mayRead {
			uiStatus, uiBody := w.get(readers[who], ui)
			require.Equal(t, http.StatusOK, uiStatus, "%s reads %s in the UI", who, c.key)
			apiStatus, apiBody := w.get(readers[who], apiPath)
			require.Equal(t, http.StatusOK, apiStatus, "%s reads %s in the API: %s", who, c.key, apiBody)
			require.Contains(t, uiBody, "acct-secret", who)
			require.Contains(t, apiBody, "acct-secret", who)
		}
		for _, who := range c.notFound {
			uiStatus, uiBody := w.get(readers[who], ui)
			apiStatus, apiBody := w.get(readers[who], apiPath)
			require.Equal(t, http.StatusNotFound, uiStatus, "%s may not read %s in the UI", who, c.key)
			require.Equal(t, http.StatusNotFound, apiStatus, "%s may not read %s in the API", who, c.key)
			nothingOf(who, ui, uiBody)
			nothingOf(who, apiPath, apiBody)
		}
	}
	require.Contains(t, func() string {
		_, b := w.get(readers["pat"], "/tool-calls/effects/"+url.PathEscape(string(card.Status.Key)))
		return b
	}(),
		"raw-answer-secret", "the call's user sees its raw answer")

	// The list, its counts, its waiting approvals and a tool's trail.
	lists := []string{"/tool-calls", "/tool-calls?tool=card.charge&event=run-secret-31", "/tool-calls?state=done",
		"/tool-calls?tool=payment.send&event=invoice-secret-42"}
	for _, who := range []string{"viewer", "proposer"} {
		for _, path := range lists {
			status, body := w.get(readers[who], path)
			require.Equal(t, http.StatusOK, status, "%s %s", who, path)
			nothingOf(who, path, body)
			d, err := goquery.NewDocumentFromReader(strings.NewReader(body))
			require.NoError(t, err)
			require.Zero(t, d.Find(`[data-testid="tool-call"]`).Length(), "%s at %s", who, path)
			require.Zero(t, d.Find(`[data-testid="tool-approval-waiting"]`).Length(), "%s at %s", who, path)
			require.Zero(t, d.Find(`[data-testid="tool-trail-entry"]`).Length(), "%s at %s", who, path)
			require.Zero(t, d.Find(`[data-testid="tool-count"]`).Length(), "%s at %s", who, path)
		}
	}
	listed := func(who, path, testid string) int {
		t.Helper()
		status, body := w.get(readers[who], path)
		require.Equal(t, http.StatusOK, status)
		d, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		require.NoError(t, err)
		return d.Find(`[data-testid="` + testid + `"]`).Length()
	}
	for _, who := range []string{"pat", "operator", "admin"} {
		require.Equal(t, 1, listed(who, "/tool-calls?state=done", "tool-call"), who)
		require.Equal(t, 2, listed(who, "/tool-calls?tool=card.charge&event=run-secret-31", "tool-trail-entry"), "%s: begin, settle", who)
		require.Equal(t, 1, listed(who, "/tool-calls", "tool-approval-waiting"), who)
	}
	// An approver decides on requests: the waiting one is listed for them,
	// the calls are not.
	require.Equal(t, 1, listed("approver", "/tool-calls", "tool-approval-waiting"))
	require.Zero(t, listed("approver", "/tool-calls?state=done", "tool-call"))

	// The approval request's page.
	request := "/tool-calls/approvals/" + strconv.FormatInt(waiting.Status.ApprovalID, 10)
	for _, who := range []string{"pat", "approver", "operator", "admin"} {
		status, body := w.get(readers[who], request)
		require.Equal(t, http.StatusOK, status, who)
		require.Contains(t, body, "DE02 1234 5678", who)
	}
	for _, who := range []string{"viewer", "proposer"} {
		status, body := w.get(readers[who], request)
		require.Equal(t, http.StatusNotFound, status, who)
		nothingOf(who, request, body)
	}
}
