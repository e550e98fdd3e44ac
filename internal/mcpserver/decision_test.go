package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/apiclient"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/mcpserver"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/api"
)

// TestWaitForDecisionIsBoundedAndSaysWhoMustAct: a timeout beyond the
// bound is refused naming timeout_seconds; a wait nobody answers ends
// pending with the approvers to ask; a rejection during a wait answers
// with its reason.
func TestWaitForDecisionIsBoundedAndSaysWhoMustAct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(pool, jobs.NewEnqueuer(client))
	e := echo.New()
	// Links are under the public URL serve is given, never the request's.
	api.Register(e, api.Config{Pool: pool, Approval: svc, BaseURL: "https://onceplan.example"})
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	actor := func(email string, roles ...auth.Role) auth.Actor {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		return auth.Actor{UserID: pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: names}), Email: email, Roles: roles}
	}
	proposer := actor("agent-owner@example.com", auth.RoleProposer)
	approver := actor("amy@example.com", auth.RoleApprover)
	res, err := svc.Create(ctx, proposer, approval.CreateParams{
		Name: "Renewals", Provider: "outbox", RequiredApprovals: 1, Payload: plan.Payload{From: "a@example.com", Subject: "Hi", Text: "Hello"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\nada@example.com\n")},
	})
	require.NoError(t, err)
	id := res.Campaign.ID
	_, err = svc.Submit(ctx, proposer, id)
	require.NoError(t, err)

	secret, _, err := auth.CreateToken(ctx, pool, proposer.Email, "assistant", true)
	require.NoError(t, err)
	c, err := apiclient.New(ts.URL, secret)
	require.NoError(t, err)
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(c, "test").Connect(ctx, serverT, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, clientT, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })
	call := func(args map[string]any) (*mcp.CallToolResult, string) {
		got, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_decision", Arguments: args})
		require.NoError(t, err)
		var text string
		for _, ct := range got.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return got, text
	}

	for _, bad := range []int{61, -1} {
		got, text := call(map[string]any{"campaign_id": id, "timeout_seconds": bad})
		require.True(t, got.IsError, "timeout %d", bad)
		require.Contains(t, text, "timeout_seconds must be between 1 and 60")
	}

	start := time.Now()
	got, text := call(map[string]any{"campaign_id": id, "timeout_seconds": 1})
	require.False(t, got.IsError, text)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "it waited")
	out := got.StructuredContent.(map[string]any)
	require.Equal(t, "pending", out["decision"])
	who := out["waiting_for"].([]any)[0].(map[string]any)
	require.Equal(t, "approver", who["who"])
	require.EqualValues(t, 1, who["count"])
	require.Equal(t, "https://onceplan.example/campaigns/"+id+"/approval", who["url"])

	answered := make(chan map[string]any, 1)
	go func() {
		var out map[string]any
		if got, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_decision",
			Arguments: map[string]any{"campaign_id": id, "timeout_seconds": 30}}); err == nil {
			out, _ = got.StructuredContent.(map[string]any)
		}
		answered <- out
	}()
	await.Until(t, time.Minute, "wait_for_decision waiting on the server", func() bool {
		return pgtest.Listeners(t, pool, approval.DecisionChannel) == 1
	})
	_, err = svc.Reject(ctx, approver, id, "the subject says nothing")
	require.NoError(t, err)
	select {
	case out := <-answered:
		require.Equal(t, "rejected", out["decision"])
		require.Equal(t, "the subject says nothing", out["reason"])
		require.Equal(t, "amy@example.com", out["decided_by"])
	case <-time.After(20 * time.Second):
		t.Fatal("wait_for_decision did not answer the rejection")
	}
}
