package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
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

// api calls the JSON API as role and decodes the answer.
func (w *world) api(t *testing.T, role, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.url+"/api/v1"+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+w.tokens[role])
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// createCampaign makes a campaign of addrs through the command line, as
// the proposer, and returns its id and plan hash.
func (w *world) createCampaign(t *testing.T, addrs ...string) (string, string) {
	t.Helper()
	csv := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(csv, []byte("email\n"+strings.Join(addrs, "\n")+"\n"), 0o644))
	out := ok(t, w.as("proposer", "campaign", "create", "--name", "Newsletter", "--from", "news@example.com",
		"--subject", "Hello", "--text", "Hi", "--targets", csv)...)
	id := regexp.MustCompile(`campaign ([0-9a-f-]{36})`).FindStringSubmatch(out)[1]
	ok(t, w.as("proposer", "campaign", "submit", id)...)
	var st struct {
		PlanHash string `json:"plan_hash"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, w.as("approver", "campaign", "status", id, "--json")...)), &st))
	return id, st.PlanHash
}

// targetKey is a campaign target's key: the ledger's v1 key of the
// campaign, the tool and the address.
func targetKey(t *testing.T, campaign, address string) string {
	t.Helper()
	key, err := ledger.NewKey(ledger.KeyInput{Event: campaign, Tool: "email.send", Target: ledger.Target{Kind: ledger.TargetEmail, Value: address}})
	require.NoError(t, err)
	return string(key)
}

// TestAgentTokenNeverHoldsACampaignTarget: an agent token begins, through
// POST /api/v1/effects, the single effect whose identity is a campaign
// target's — {event: the campaign's id, tool email.send, target: the
// address} — for a plan frozen before the begin, for one frozen after it,
// and for a target the campaign already mailed. Each begin gets a key of
// its own (never the target's); the campaigns then mail every person
// exactly once, counted at the outside system, and the effect routes on
// a target's key keep the campaign's rules.
func TestAgentTokenNeverHoldsACampaignTarget(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	w := newWorldSending(t, hook.URL())
	hold := func(campaign, address string) map[string]any {
		t.Helper()
		status, b := w.api(t, "agent", http.MethodPost, "/effects", map[string]any{"event": campaign, "tool": "email.send",
			"target": map[string]any{"kind": "email", "value": address}, "args": map[string]any{"subject": "not the campaign's"}})
		require.Equal(t, http.StatusCreated, status, "%v", b)
		require.NotEqual(t, targetKey(t, campaign, address), b["key"], "a single effect never gets a campaign target's key")
		status, settled := w.api(t, "agent", http.MethodPost, "/effects/"+b["key"].(string)+"/settle",
			map[string]any{"lease": b["lease"], "outcome": "done", "receipt": "agent-1", "raw": "{}"})
		require.Equal(t, http.StatusOK, status, "%v", settled)
		return b
	}

	// Frozen before the begin.
	before, hash := w.createCampaign(t, "ann@example.com", "bob@example.com", "cy@example.com")
	w.approve(t, before, hash)
	hold(before, "ann@example.com")
	// Frozen after it.
	after, hash := w.createCampaign(t, "dee@example.com")
	hold(after, "dee@example.com")
	w.approve(t, after, hash)

	for id, n := range map[string]int{before: 3, after: 1} {
		ok(t, w.as("operator", "campaign", "start", id)...)
		w.waitDone(t, id, n)
	}
	sent := map[string]int{}
	for _, e := range hook.Effects() {
		sent[e.Target]++
	}
	require.Equal(t, map[string]int{"ann@example.com": 1, "bob@example.com": 1, "cy@example.com": 1, "dee@example.com": 1}, sent,
		"every person got the campaign's email once, at the outside system")

	// A target the campaign already mailed: the agent's begin is its own
	// call, and the target's key keeps the campaign's rules.
	hold(before, "cy@example.com")
	status, b := w.api(t, "approver", http.MethodPost, "/effects/"+targetKey(t, before, "cy@example.com")+"/supersede",
		map[string]any{"target": "cy@example.com", "reason": "she asked for it again"})
	require.Equal(t, http.StatusOK, status, "%v", b)
	require.EqualValues(t, 1, b["epoch"])
}
