package agenttest

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// TestAgentWaitsForTheDecisionOverMCP: the built binary's MCP server,
// against a real `onceplan serve`: an agent that submitted a campaign
// waits with wait_for_decision; while nobody decides it hears who must
// act; when a person approves over the API, the waiting call answers
// "approved" within a second of the approval; a rejection comes with the
// approver's reason.
func TestAgentWaitsForTheDecisionOverMCP(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cmd := exec.Command(binary, "mcp", "--server", w.url, "--token", w.tokens["agent"])
	cmd.Env = append(os.Environ(), "ONCEPLAN_SERVER=", "ONCEPLAN_TOKEN=")
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer session.Close()
	call := func(name string, args map[string]any) (map[string]any, string, bool) {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return nil, err.Error(), true
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		out, _ := res.StructuredContent.(map[string]any)
		return out, text, res.IsError
	}
	propose := func(name string) (string, string) {
		t.Helper()
		proposed, text, isErr := call("propose_campaign", map[string]any{
			"name": name, "from": "team@example.com", "subject": "Hello {{.first_name}}", "text": "Hi {{.first_name}}",
			"targets": []map[string]any{{"address": "ada@example.com", "vars": map[string]string{"first_name": "Ada"}}},
		})
		require.False(t, isErr, text)
		id := proposed["id"].(string)
		submitted, text, isErr := call("submit_for_approval", map[string]any{"campaign_id": id})
		require.False(t, isErr, text)
		return id, submitted["plan_hash"].(string)
	}
	id, hash := propose("Renewal reminder")

	// Bounded: the tool says so, naming its parameter.
	_, text, isErr := call("wait_for_decision", map[string]any{"campaign_id": id, "timeout_seconds": 3600})
	require.True(t, isErr)
	require.Contains(t, text, "timeout_seconds must be between 1 and 60")

	// Nobody decides within a second: still pending, and who must act.
	pending, text, isErr := call("wait_for_decision", map[string]any{"campaign_id": id, "timeout_seconds": 1})
	require.False(t, isErr, text)
	require.Equal(t, "pending", pending["decision"])
	waiting := pending["waiting_for"].([]any)
	require.Len(t, waiting, 1)
	who := waiting[0].(map[string]any)
	require.Equal(t, "approver", who["who"])
	require.EqualValues(t, 1, who["count"], "approvals missing")
	require.Equal(t, w.url+"/campaigns/"+id+"/approval", who["url"])

	status, _, _ := call("campaign_status", map[string]any{"campaign_id": id})
	next := status["next_steps"].([]any)
	require.Equal(t, "approve", next[0].(map[string]any)["kind"])

	// The agent waits up to 20 s; a person approves meanwhile.
	type answer struct {
		out    map[string]any
		text   string
		isErr  bool
		at     time.Time
		called time.Time
	}
	done := make(chan answer, 1)
	go func() {
		called := time.Now()
		out, text, isErr := call("wait_for_decision", map[string]any{"campaign_id": id, "timeout_seconds": 20})
		done <- answer{out, text, isErr, time.Now(), called}
	}()
	w.untilWaiting(t)
	select {
	case a := <-done:
		t.Fatalf("wait_for_decision answered before anyone decided: %s", a.text)
	default:
	}
	w.approve(t, id, hash)
	approved := time.Now()

	var a answer
	select {
	case a = <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("wait_for_decision did not answer")
	}
	require.False(t, a.isErr, a.text)
	require.Equal(t, "approved", a.out["decision"])
	require.Equal(t, "amy@example.com", a.out["decided_by"])
	require.Less(t, a.at.Sub(a.called), 20*time.Second, "answered before its timeout")
	require.Less(t, a.at.Sub(approved), 5*time.Second, "answered on the approval, not at the end of its wait")
	// Often negative: the notification reaches the waiter before the
	// approval's own answer reaches the test.
	t.Logf("wait_for_decision answered %v after the approval returned", a.at.Sub(approved))

	// A rejection comes back with the approver's reason.
	rid, _ := propose("Second try")
	done2 := make(chan answer, 1)
	go func() {
		out, text, isErr := call("wait_for_decision", map[string]any{"campaign_id": rid, "timeout_seconds": 20})
		done2 <- answer{out: out, text: text, isErr: isErr}
	}()
	w.untilWaiting(t)
	ok(t, w.as("approver", "campaign", "reject", rid, "--reason", "name the plan in the subject")...)
	select {
	case a = <-done2:
	case <-time.After(25 * time.Second):
		t.Fatal("wait_for_decision did not answer the rejection")
	}
	require.False(t, a.isErr, a.text)
	require.Equal(t, "rejected", a.out["decision"])
	require.Equal(t, "name the plan in the subject", a.out["reason"])
}

// approve is a person's approval of the plan hash they reviewed, over the
// API with the approver's token.
func (w *world) approve(t *testing.T, id, hash string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, w.url+"/api/v1/campaigns/"+id+"/approve", strings.NewReader(`{"plan_hash":"`+hash+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+w.tokens["approver"])
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
}
