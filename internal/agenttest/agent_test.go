package agenttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "onceplan-agent-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "onceplan")
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/onceplan").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building onceplan: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	pgtest.Main(m)
}

// run runs the onceplan binary and returns its stdout, stderr and exit code.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "ONCEPLAN_SERVER=", "ONCEPLAN_TOKEN=", "DATABASE_URL=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// ok runs the binary and requires success.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, "", args...)
	require.Zero(t, code, "onceplan %v failed:\n%s", args, errOut)
	return out
}

// world is a running `onceplan serve` on a test database with a maildir
// provider (the outside world), users and their tokens.
type world struct {
	url     string
	dbURL   string
	outbox  string
	tokens  map[string]string
	cmd     *exec.Cmd
	logsMu  sync.Mutex
	logs    strings.Builder
	stopped chan struct{}
}

var servingRE = regexp.MustCompile(`"url":"(http://[^"]+)"`)

func newWorld(t *testing.T) *world {
	t.Helper()
	outbox := t.TempDir()
	w := newWorldSending(t, "maildir://"+outbox+"?rate=50/s")
	w.outbox = outbox
	return w
}

// newWorldSending is a world whose provider "outbox" is provider's URL.
func newWorldSending(t *testing.T, provider string) *world {
	t.Helper()
	w := &world{dbURL: pgtest.URL(t), tokens: map[string]string{}}
	for _, u := range []struct{ email, role string }{
		{"pat@example.com", "proposer"}, {"amy@example.com", "approver"}, {"oli@example.com", "operator"},
	} {
		run := ok(t, "user", "add", "--database-url", w.dbURL, "--email", u.email, "--role", u.role)
		require.NotEmpty(t, run)
		w.tokens[u.role] = strings.TrimSpace(ok(t, "token", "create", "--database-url", w.dbURL, "--user", u.email, "--name", "cli"))
	}
	// The agent's owner may do everything; the agent token still may not.
	ok(t, "user", "add", "--database-url", w.dbURL, "--email", "owner@example.com", "--role", "proposer", "--role", "approver", "--role", "operator")
	w.tokens["agent"] = strings.TrimSpace(ok(t, "token", "create", "--database-url", w.dbURL, "--user", "owner@example.com", "--agent", "--name", "assistant"))

	w.cmd = exec.Command(binary, "serve", "--database-url", w.dbURL, "--listen", "127.0.0.1:0",
		"--provider", "outbox="+provider, "--maintenance-interval", "300ms")
	stderr, err := w.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	w.stopped = make(chan struct{})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.logsMu.Lock()
			w.logs.WriteString(sc.Text() + "\n")
			w.logsMu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		w.cmd.Wait()
		close(w.stopped)
	}()
	t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.stopped:
		case <-time.After(30 * time.Second):
			w.cmd.Process.Kill()
			<-w.stopped
		}
		if t.Failed() {
			w.logsMu.Lock()
			t.Logf("serve logs:\n%s", w.logs.String())
			w.logsMu.Unlock()
		}
	})
	select {
	case w.url = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start")
	}
	return w
}

func (w *world) as(role string, args ...string) []string {
	return append(args, "--server", w.url, "--token", w.tokens[role])
}

// delivered counts messages in the maildir: the outside world.
func (w *world) delivered(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(w.outbox, "new"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return len(entries)
}

func (w *world) waitDone(t *testing.T, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var v struct {
			State  string         `json:"state"`
			Counts map[string]int `json:"counts"`
		}
		require.NoError(t, json.Unmarshal([]byte(ok(t, w.as("operator", "campaign", "status", id, "--json")...)), &v))
		if v.State == "completed" && v.Counts["done"] == n {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("campaign %s did not complete", id)
}

func TestCommandLineRunsACampaignAgainstTheServer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	csv := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(csv, []byte("email,first_name\nada@example.com,Ada\nbob@example.com,Bob\nnot-an-address,X\nADA@example.com,Ada\ncy@example.com,Cy\n"), 0o644))

	out := ok(t, w.as("proposer", "campaign", "create", "--name", "Welcome", "--from", "hello@example.com",
		"--subject", "Welcome, {{.first_name}}", "--text", "Hi {{.first_name}}", "--targets", csv)...)
	require.Contains(t, out, "3 accepted, 1 duplicate, 1 rejected")
	require.Contains(t, out, "line 4: rejected")
	require.Contains(t, out, "line 5: duplicate of line 2")
	id := regexp.MustCompile(`campaign ([0-9a-f-]{36})`).FindStringSubmatch(out)[1]

	ok(t, w.as("proposer", "campaign", "submit", id)...)
	var st struct {
		PlanHash string `json:"plan_hash"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, w.as("approver", "campaign", "status", id, "--json")...)), &st))

	// Refusals are one line and a non-zero exit.
	_, errOut, code := run(t, "", w.as("agent", "campaign", "approve", id, "--plan-hash", st.PlanHash)...)
	require.NotZero(t, code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	require.Contains(t, errOut, "403")
	_, errOut, code = run(t, "", w.as("approver", "campaign", "approve", id, "--plan-hash", strings.Repeat("0", 64))...)
	require.NotZero(t, code)
	require.Contains(t, errOut, "409")
	_, errOut, code = run(t, "", "campaign", "status", id, "--server", w.url)
	require.NotZero(t, code)
	require.Contains(t, errOut, "no API token")
	_, errOut, code = run(t, "", w.as("proposer", "campaign", "targets", id, "/nonexistent.csv")...)
	require.NotZero(t, code)
	require.Contains(t, errOut, "/nonexistent.csv")

	out = ok(t, w.as("approver", "campaign", "approve", id, "--plan-hash", st.PlanHash)...)
	require.Contains(t, out, "approved")
	ok(t, w.as("operator", "campaign", "start", id)...)
	w.waitDone(t, id, 3)
	require.Equal(t, 3, w.delivered(t), "messages in the outbox")

	// Resume twice more: nothing is sent again.
	ok(t, w.as("operator", "campaign", "resume", id)...)
	ok(t, w.as("operator", "campaign", "resume", id)...)
	w.waitDone(t, id, 3)
	require.Equal(t, 3, w.delivered(t))

	list := ok(t, w.as("agent", "campaign", "list")...)
	require.Contains(t, list, id)
	help := ok(t, "campaign", "--help")
	require.Contains(t, help, "approve")
}

func TestAgentProposesOverMCPAndAPersonApproves(t *testing.T) {
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

	tools, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		require.Contains(t, tl.Description, "no tool to approve", "%s tells the model a person approves", tl.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"add_targets", "audit", "campaign_status", "edit_draft", "effect_begin", "effect_settle", "effect_status",
		"list_campaigns", "propose_campaign", "submit_for_approval", "wait_for_decision"}, names)
	for _, name := range names {
		for _, decision := range []string{"approve", "reject", "start", "pause", "resume", "cancel", "resolve", "supersede", "revoke", "bump"} {
			require.NotContains(t, name, decision, "no tool lets an agent decide")
		}
	}

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

	proposed, text, isErr := call("propose_campaign", map[string]any{
		"name": "Renewal reminder", "from": "team@example.com", "subject": "Your plan renews, {{.first_name}}", "text": "Hi {{.first_name}}",
		"targets": []map[string]any{
			{"address": "ada@example.com", "vars": map[string]string{"first_name": "Ada"}},
			{"address": "nobody at all", "vars": map[string]string{"first_name": "N"}},
		},
		"idempotency_key": "renewal-1",
	})
	require.False(t, isErr, text)
	id := proposed["id"].(string)
	require.EqualValues(t, 1, proposed["import"].(map[string]any)["accepted"])
	require.Len(t, proposed["import"].(map[string]any)["rejected"].([]any), 1)
	require.Contains(t, proposed["approval_url"], "/campaigns/"+id+"/approval")

	// A retry after a timeout returns the same campaign.
	again, text, isErr := call("propose_campaign", map[string]any{
		"name": "Renewal reminder", "from": "team@example.com", "subject": "Your plan renews, {{.first_name}}", "text": "Hi {{.first_name}}",
		"targets": []map[string]any{
			{"address": "ada@example.com", "vars": map[string]string{"first_name": "Ada"}},
			{"address": "nobody at all", "vars": map[string]string{"first_name": "N"}},
		},
		"idempotency_key": "renewal-1",
	})
	require.False(t, isErr, text)
	require.Equal(t, id, again["id"])

	added, text, isErr := call("add_targets", map[string]any{"campaign_id": id, "targets": []map[string]any{{"address": "bob@example.com", "vars": map[string]string{"first_name": "Bob"}}}})
	require.False(t, isErr, text)
	require.EqualValues(t, 2, added["counts"].(map[string]any)["planned"])

	_, text, isErr = call("audit", map[string]any{"campaign_id": id})
	require.True(t, isErr, "nothing to audit before approval")
	require.Contains(t, text, "not been approved")

	submitted, text, isErr := call("submit_for_approval", map[string]any{"campaign_id": id})
	require.False(t, isErr, text)
	require.Equal(t, "pending_approval", submitted["state"])

	status, _, _ := call("campaign_status", map[string]any{"campaign_id": id})
	require.Equal(t, "pending_approval", status["state"])
	require.Contains(t, status["exactly_once"], "not approved yet")
	require.Zero(t, w.delivered(t), "nothing is sent before a person approves")

	// The person approves and starts, with their own tokens.
	ok(t, w.as("approver", "campaign", "approve", id, "--plan-hash", status["plan_hash"].(string))...)
	ok(t, w.as("operator", "campaign", "start", id)...)
	w.waitDone(t, id, 2)
	require.Equal(t, 2, w.delivered(t))

	status, _, _ = call("campaign_status", map[string]any{"campaign_id": id})
	require.Equal(t, "2 of 2 approved targets done exactly once; exactly-once holds", status["exactly_once"])

	audit, text, isErr := call("audit", map[string]any{"campaign_id": id})
	require.False(t, isErr, text)
	require.Equal(t, true, audit["holds"])
	require.EqualValues(t, 2, audit["exactly_once"])

	list, _, isErr := call("list_campaigns", map[string]any{})
	require.False(t, isErr)
	require.Len(t, list["items"], 1)
}

// untilWaiting waits until a long poll is waiting on the server: the
// server's shared connection listens for decisions.
func (w *world) untilWaiting(t *testing.T) {
	t.Helper()
	pool := pgtest.NewPool(t, w.dbURL)
	await.Until(t, time.Minute, "a long poll waiting on the server", func() bool {
		return pgtest.Listeners(t, pool, approval.DecisionChannel) == 1
	})
}
