package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
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
	"github.com/onceplan/onceplan/web/api"
)

// agentSession is an MCP session of an agent token of a new user with
// roles, against the API on httptest server url.
func agentSession(t *testing.T, pool *pgxpool.Pool, url, email string, roles ...string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: roles})
	secret, _, err := auth.CreateToken(ctx, pool, email, "assistant", true)
	require.NoError(t, err)
	c, err := apiclient.New(url, secret)
	require.NoError(t, err)
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(c, "test").Connect(ctx, serverT, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, clientT, nil)
	require.NoError(t, err)
	t.Cleanup(func() { session.Close() })
	return session
}

// callText is a tool call's text and structured answer.
func callText(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (map[string]any, string, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	var text string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	out, _ := res.StructuredContent.(map[string]any)
	return out, text, res.IsError
}

// TestEffectBeginOverMCPLeaseAndReaders: effect_begin's lease_seconds is
// checked as the API checks it, before it becomes a duration: one that
// once wrapped around into a 1 s lease (18446744075) is refused naming
// lease_seconds, and nothing is recorded; one in range is the lease.
// effect_status reads only the agent's user's calls: another user's
// agent is answered as for a key nobody began.
func TestEffectBeginOverMCPLeaseAndReaders(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	e := echo.New()
	api.Register(e, api.Config{Pool: pool, Approval: approval.NewService(pool, jobs.NewEnqueuer(client))})
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	agent := agentSession(t, pool, ts.URL, "agent-owner@example.com", "proposer", "operator")
	other := agentSession(t, pool, ts.URL, "someone@example.com", "proposer", "operator")
	begin := func(lease int64) map[string]any {
		return map[string]any{"event": "run-1", "tool": "crm.set_status", "target": "customer-1", "args": map[string]any{"status": "gold"},
			"lease_seconds": lease}
	}

	for _, lease := range []int64{18446744075, 3601, -1} {
		_, text, isErr := callText(t, agent, "effect_begin", begin(lease))
		require.True(t, isErr, "%d: %s", lease, text)
		require.Contains(t, text, "lease_seconds", lease)
		require.Contains(t, text, "from 1 to 3600", lease)
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM tool_policy) + (SELECT count(*) FROM tool_call) + (SELECT count(*) FROM effect)`).Scan(&n))
		require.Zero(t, n, "%d: nothing recorded", lease)
	}
	first, text, isErr := callText(t, agent, "effect_begin", begin(30))
	require.False(t, isErr, text)
	require.Equal(t, "perform_now", first["outcome"], text)
	require.InDelta(t, 29, first["lease_seconds"], 1.01)

	_, text, isErr = callText(t, agent, "effect_status", map[string]any{"key": first["key"]})
	require.False(t, isErr, text)
	_, text, isErr = callText(t, other, "effect_status", map[string]any{"key": first["key"]})
	require.True(t, isErr)
	require.Contains(t, text, "HTTP 404")
	require.False(t, strings.Contains(text, "gold"), text)
}
