package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/apiclient"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/mcpserver"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/api"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestStatusSaysNoLiveWorkerServesTheProvider: an agent asking for the
// status of a started campaign whose provider no live worker process
// serves is told so, in words it can pass on.
func TestStatusSaysNoLiveWorkerServesTheProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(pool, jobs.NewEnqueuer(client))
	e := echo.New()
	api.Register(e, api.Config{Pool: pool, Approval: svc})
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
	decider := actor("decider@example.com", auth.RoleApprover, auth.RoleOperator)
	res, err := svc.Create(ctx, proposer, approval.CreateParams{
		Name: "Renewals", Provider: "outbox", Payload: plan.Payload{From: "a@example.com", Subject: "Hi", Text: "Hello"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\nada@example.com\n")},
	})
	require.NoError(t, err)
	sub, err := svc.Submit(ctx, proposer, res.Campaign.ID)
	require.NoError(t, err)
	_, err = svc.Approve(ctx, decider, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	_, err = svc.Start(ctx, decider, res.Campaign.ID)
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

	got, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "campaign_status", Arguments: map[string]any{"campaign_id": res.Campaign.ID}})
	require.NoError(t, err)
	require.False(t, got.IsError)
	out := got.StructuredContent.(map[string]any)
	require.Equal(t, "running", out["state"])
	require.EqualValues(t, 0, out["provider_workers"])
	warnings := out["warnings"].([]any)
	require.Len(t, warnings, 1)
	require.Equal(t, "no_live_worker", warnings[0].(map[string]any)["code"])
	require.Contains(t, warnings[0].(map[string]any)["message"], `No live worker process serves provider "outbox"`)
}
