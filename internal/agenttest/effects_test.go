package agenttest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// TestAgentPerformsToolCallsOnceOverMCP: an agent, over stdio, brackets
// its own tool call with effect_begin and effect_settle against a real
// `onceplan serve`: the first begin says perform_now (with the key and a
// lease), a second one while it runs in_doubt; after the settle every
// begin says already_done with the recorded receipt and raw answer; the
// same event with changed args is refused; effect_status reads it.
func TestAgentPerformsToolCallsOnceOverMCP(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	cmd := exec.Command(binary, "mcp", "--server", w.url, "--token", w.tokens["agent"])
	cmd.Env = append(os.Environ(), "ONCEPLAN_SERVER=", "ONCEPLAN_TOKEN=")
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer session.Close()

	call := func(name string, args map[string]any) (map[string]any, string, bool) {
		t.Helper()
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
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
	begin := map[string]any{"event": "run-9/step-2", "tool": "crm.set_status", "target": "customer-17", "args": map[string]any{"status": "gold"}}

	first, text, isErr := call("effect_begin", begin)
	require.False(t, isErr, text)
	require.Equal(t, "perform_now", first["outcome"], text)
	require.Regexp(t, `^v1:[0-9a-f]{64}$`, first["key"])
	require.NotEmpty(t, first["lease"])
	require.NotEmpty(t, first["lease_until"])
	require.Equal(t, "none", first["recovery"])

	busy, text, isErr := call("effect_begin", begin)
	require.False(t, isErr, text)
	require.Equal(t, "in_doubt", busy["outcome"], text)
	require.Equal(t, "pending", busy["state"])
	require.Contains(t, busy["next"], "do not call")
	require.Nil(t, busy["lease"], "only the caller that may perform it holds the lease")

	// The agent performed the call; it settles with the answer it got.
	settled, text, isErr := call("effect_settle", map[string]any{"key": first["key"], "lease": first["lease"], "outcome": "done",
		"receipt": "crm-op-77", "raw": `{"id":"crm-op-77","status":"gold"}`})
	require.False(t, isErr, text)
	require.Equal(t, "done", settled["state"], text)

	replay, text, isErr := call("effect_begin", begin)
	require.False(t, isErr, text)
	require.Equal(t, "already_done", replay["outcome"], text)
	require.Equal(t, "crm-op-77", replay["receipt"])
	require.Equal(t, `{"id":"crm-op-77","status":"gold"}`, replay["raw"])

	changed := map[string]any{"event": "run-9/step-2", "tool": "crm.set_status", "target": "customer-17", "args": map[string]any{"status": "silver"}}
	_, text, isErr = call("effect_begin", changed)
	require.True(t, isErr)
	require.Contains(t, text, "HTTP 422, args_mismatch")
	require.Contains(t, text, first["args_digest"])

	status, text, isErr := call("effect_status", map[string]any{"key": first["key"]})
	require.False(t, isErr, text)
	require.Equal(t, "done", status["state"])
	require.Equal(t, "customer-17", status["target"].(map[string]any)["value"])

	// A settle by a lease that is not the call's is refused.
	_, text, isErr = call("effect_settle", map[string]any{"key": first["key"], "lease": "00000000-0000-4000-8000-000000000000", "outcome": "done", "receipt": "x", "raw": ""})
	require.True(t, isErr)
	require.Contains(t, text, "HTTP 409")
}
