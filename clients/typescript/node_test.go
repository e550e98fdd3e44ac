package typescript_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// binary is the onceplan binary TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "onceplan-ts-bin-")
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

// The Node packages the suites need: the client itself (tsc, its only
// dev dependency) and the LangGraph test's folder.
var (
	prepareOnce sync.Once
	prepareErr  error
)

// prepare checks Node is at least 20, installs each folder's packages
// from its lock file (npm ci; again only when the lock changed) and
// builds the client with tsc.
func prepare(t *testing.T) {
	t.Helper()
	prepareOnce.Do(func() { prepareErr = prepareNode() })
	if prepareErr != nil {
		t.Fatal(prepareErr)
	}
}

func prepareNode() error {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return fmt.Errorf("node is not installed: run `bash scripts/ensure-node.sh` (make test does): %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	if major, _ := strconv.Atoi(strings.Split(v, ".")[0]); major < 20 {
		return fmt.Errorf("node %s is older than 20, which the TypeScript client needs: run `bash scripts/ensure-node.sh`", v)
	}
	for _, dir := range []string{".", "test/langgraph"} {
		if err := npmCI(dir); err != nil {
			return err
		}
	}
	if out, err := exec.Command("npm", "run", "--silent", "build").CombinedOutput(); err != nil {
		return fmt.Errorf("building the TypeScript client (npm run build): %v\n%s", err, out)
	}
	return nil
}

// npmCI runs `npm ci` in dir unless its node_modules was installed from
// the same package-lock.json.
func npmCI(dir string) error {
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(lock)
	stamp := filepath.Join(dir, "node_modules", ".onceplan-lock-sha256")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == hex.EncodeToString(sum[:]) {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in clients/typescript/%s: %v\n%s", dir, err, out)
	}
	return os.WriteFile(stamp, []byte(hex.EncodeToString(sum[:])), 0o644)
}

// node runs `node args…` in this directory with env added, and fails t
// with its output unless it exits 0.
func node(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("node", args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUnitSuite runs the client's unit suite: the clients' shared table
// of scripted server answers (clients/testdata/cases.json) and bad input.
func TestUnitSuite(t *testing.T) {
	t.Parallel()
	prepare(t)
	cases := os.Getenv("ONCEPLAN_CASES")
	if cases == "" {
		cases = "../testdata/cases.json"
	}
	if _, err := os.Stat(cases); err != nil {
		t.Fatalf("the clients' shared table is missing (%v): the unit suite runs it", err)
	}
	abs, err := filepath.Abs(cases)
	require.NoError(t, err)
	t.Log(node(t, []string{"ONCEPLAN_CASES=" + abs}, "--test", "--test-reporter=spec", "test/unit/"))
}

// world is a running `onceplan serve` on a database of its own, with
// tools registered by an admin, an agent's and an operator's tokens, and
// the outside systems: one that deduplicates by Idempotency-Key, one that
// does not (both answer probes), each appending every effect it applies
// to a synced file.
type world struct {
	url      string
	urls     pgtest.URLs
	agent    string // token
	operator string // token
	// agentUser is the user the agent's token belongs to: its calls are
	// that user's, and their keys name them.
	agentUser int64
	sinks     map[string]*sink.Webhook
	records   map[string]string // tool → its sink's record file
	logsMu    sync.Mutex
	logs      strings.Builder
}

var servingURL = regexp.MustCompile(`"url":"(http://[^"]+)"`)

func newWorld(t *testing.T) *world {
	t.Helper()
	prepare(t)
	dir := t.TempDir()
	w := &world{urls: pgtest.Database(t), sinks: map[string]*sink.Webhook{}, records: map[string]string{}}
	dedupe := sink.NewWebhook(sink.WebhookOpts{Dedupe: true, Record: filepath.Join(dir, "dedupe.jsonl")})
	plain := sink.NewWebhook(sink.WebhookOpts{Record: filepath.Join(dir, "plain.jsonl")})
	t.Cleanup(dedupe.Close)
	t.Cleanup(plain.Close)
	for tool, s := range map[string]*sink.Webhook{"ts.dedupe": dedupe, "ts.probe": plain, "ts.none": plain, "ts.approved": plain, "ts.plain": plain} {
		w.sinks[tool] = s
	}
	for tool, rec := range map[string]string{"ts.dedupe": "dedupe.jsonl", "ts.probe": "plain.jsonl", "ts.none": "plain.jsonl", "ts.approved": "plain.jsonl", "ts.plain": "plain.jsonl"} {
		w.records[tool] = filepath.Join(dir, rec)
	}
	// An admin registers the tools, as the schema's owner.
	for _, args := range [][]string{
		{"--name", "ts.dedupe", "--recovery", "dedupe"},
		{"--name", "ts.probe", "--recovery", "probe", "--probe-url", plain.ProbeURL() + "/{key}", "--settle-window", "1s"},
		{"--name", "ts.none", "--recovery", "none"},
		{"--name", "ts.approved", "--recovery", "none", "--approval"},
	} {
		out, err := exec.Command(binary, append([]string{"tool", "add", "--database-url", w.urls.Owner}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	pool := pgtest.NewPool(t, w.urls.App)
	w.agentUser = pgtest.User(t, pool, pgtest.UserOpts{Email: "owner@example.com", Roles: []string{"proposer"}})
	_, err := auth.CreateUser(t.Context(), pool, auth.NewUser{Email: "oli@example.com", Roles: []auth.Role{auth.RoleOperator}, Password: "correct horse battery staple"})
	require.NoError(t, err)
	w.agent, _, err = auth.CreateToken(t.Context(), pool, "owner@example.com", "ts agent", true)
	require.NoError(t, err)
	w.operator, _, err = auth.CreateToken(t.Context(), pool, "oli@example.com", "operator", false)
	require.NoError(t, err)

	cmd := exec.Command(binary, "serve", "--database-url", w.urls.App, "--listen", "127.0.0.1:0", "--data-dir", dir,
		"--maintenance-interval", "300ms")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	stopped, found := make(chan struct{}), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.logsMu.Lock()
			w.logs.WriteString(sc.Text() + "\n")
			w.logsMu.Unlock()
			if m := servingURL.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		cmd.Wait()
		close(stopped)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-stopped
		}
		if t.Failed() {
			w.logsMu.Lock()
			t.Logf("serve logs:\n%s", w.logs.String())
			w.logsMu.Unlock()
		}
	})
	select {
	case w.url = <-found:
	case <-stopped:
		t.Fatalf("serve exited:\n%s", w.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start within a minute")
	}
	return w
}

// effects counts the real effects of key at tool's outside system, from
// its record file.
func (w *world) effects(tool, key string) (int, error) {
	recs, err := sink.ReadRecord(w.records[tool])
	n := 0
	for _, r := range recs {
		if r.EffectID == key {
			n++
		}
	}
	return n, err
}

// api calls the JSON API with token; a request over the token's rate
// (429, answered before anything is done) is sent again after a second.
func (w *world) api(method, path, token string, body any) (int, map[string]any, error) {
	for try := 1; ; try++ {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, w.url+"/api/v1"+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		var out map[string]any
		err = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests || try == 10 {
			return res.StatusCode, out, err
		}
		time.Sleep(time.Second) // the server's Retry-After
	}
}

// state is the call's state as an operator reads it.
func (w *world) state(key string) (map[string]any, error) {
	status, st, err := w.api(http.MethodGet, "/effects/"+url.PathEscape(key), w.operator, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("GET /effects/%s: HTTP %d %v", key, status, st)
	}
	return st, err
}

// TestAgainstTheServer runs the client's suite against a real `onceplan
// serve`: performed once and replayed, kept by heartbeats while a second
// caller is told it is in flight, args refused, rejected and unknown
// settled, approval awaited.
func TestAgainstTheServer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	t.Log(node(t, []string{"ONCEPLAN_URL=" + w.url, "ONCEPLAN_TOKEN=" + w.agent, "ONCEPLAN_SINK=" + w.sinks["ts.plain"].URL(),
		"ONCEPLAN_RECORD=" + w.records["ts.plain"]}, "--test", "--test-reporter=spec", "test/integration/"))

	// The guide's example (docs/guide/tool-calls.md), run twice as a
	// person would: performed, then replayed; the outside system (its
	// file) has one line.
	example, err := filepath.Abs("examples/set-status.mjs")
	require.NoError(t, err)
	dir := t.TempDir()
	for _, want := range []string{"performed: ts-1", "replayed: ts-1"} {
		cmd := exec.Command("node", example)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "ONCEPLAN_SERVER="+w.url, "ONCEPLAN_TOKEN="+w.agent)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), want)
	}
	log, err := os.ReadFile(filepath.Join(dir, "crm.log"))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(log), "\n"), "the example's outside system: %s", log)
}

// agentRun is one agent process's outcome.
type agentRun struct {
	killed bool
	out    map[string]any
	stderr string
}

// runAgent runs the Node agent for tool/event. With crash (a crash
// point) it waits for the agent to say it reached the point, and kills
// it there with SIGKILL; without, it is a restarted runtime, and its one
// JSON line is its outcome.
func (w *world) runAgent(tool, event, crash string) (agentRun, error) {
	// A few agents at a time: many Node processes starting at once on a
	// small machine hold up each other's answers past a short lease.
	agents <- struct{}{}
	defer func() { <-agents }()
	cmd := exec.Command("node", "test/agent.mjs")
	cmd.Env = append(os.Environ(), "TA_SERVER="+w.url, "TA_TOKEN="+w.agent, "TA_EVENT="+event,
		"TA_TOOL="+tool, "TA_TARGET=acct-"+event, "TA_SINK="+w.sinks[tool].URL(), "TA_CRASH="+crash)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return agentRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return agentRun{}, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines []string
	killed := false
	for sc.Scan() {
		line := sc.Text()
		if crash != "" && line == "CRASHPOINT "+crash {
			// The point is reached: the agent waits there for this.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return agentRun{}, err
			}
			killed = true
			break
		}
		lines = append(lines, line)
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	r := agentRun{stderr: stderr.String(), killed: killed}
	if killed {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return r, fmt.Errorf("the agent killed at %s ended with %v", crash, err)
		}
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("agent exited: %v: %s", err, r.stderr)
	}
	if crash != "" {
		return r, fmt.Errorf("the agent never reached %s: %s %s", crash, strings.Join(lines, "\n"), r.stderr)
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r.out) != nil {
		return r, fmt.Errorf("agent output %q is not one JSON line (%s)", lines, r.stderr)
	}
	return r, nil
}

// agents bounds the agent processes running at once.
var agents = make(chan struct{}, 4)

// The agent's crash points, in the order of the protocol.
const (
	crashAfterIntent = "after-intent" // the begin's 201 is in hand: the intent is durable
	crashBodyStarted = "body-started" // the body began, the outside call not yet made
	crashAfterCall   = "after-call"   // the outside system answered; no settle yet
)

// recoverRun is one measured case: the agent killed at point, then the
// call recovered as the tool's recovery says, judged by the outside
// system's file and what the restarted agent gets.
func (w *world) recoverRun(tool, point string, i int) error {
	event := fmt.Sprintf("%s/%s/%d", tool, point, i)
	r, err := w.runAgent(tool, event, point)
	if err != nil {
		return err
	}
	if !r.killed {
		return fmt.Errorf("%s: the agent was not killed", event)
	}
	key, err := w.keyOf(tool, event)
	if err != nil {
		return err
	}
	before, err := w.effects(tool, key)
	if err != nil {
		return err
	}
	if want := map[string]int{crashAfterIntent: 0, crashBodyStarted: 0, crashAfterCall: 1}[point]; before != want {
		return fmt.Errorf("%s: %d effects at the outside system after the kill, want %d", event, before, want)
	}
	deadline := time.Now().Add(45 * time.Second)
	switch tool {
	case "ts.dedupe", "ts.probe":
		// A restarted runtime asks again until it performs or replays.
		for {
			r, err := w.runAgent(tool, event, "")
			if err != nil {
				return err
			}
			if e, ok := r.out["error"]; ok {
				return fmt.Errorf("%s: %v", event, e)
			}
			if r.out["performed"] == true || r.out["replayed"] == true {
				if _, ok := r.out["refused"]; ok {
					return fmt.Errorf("%s: the restarted agent performed the call and then got %v (%s)", event, r.out, r.stderr)
				}
				// A dedupe tool's attempt in doubt is usually performed again
				// as a takeover; on a busy machine a takeover whose begin is
				// answered after its own lease performs nothing and frees the
				// key, and the next begin performs it afresh. Either way the
				// end is what is asserted below: done, once at the outside
				// system, without a person.
				break
			}
			if r.out["refused"] != "InDoubt" {
				return fmt.Errorf("%s: the restarted agent got %v", event, r.out)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not recovered within 45s: %v", event, r.out)
			}
			// The server's answer says when to ask again; the next
			// restarted runtime comes then.
			time.Sleep(300 * time.Millisecond)
		}
	case "ts.none":
		// Maintenance alone turns the ended lease into an unknown, for a
		// person: no runtime needs to come back.
		for {
			st, err := w.state(key)
			if err != nil {
				return err
			}
			if st["state"] == "unknown" {
				break
			}
			if st["state"] != "pending" || time.Now().After(deadline) {
				return fmt.Errorf("%s: the attempt is %v, want it unknown", event, st["state"])
			}
			time.Sleep(200 * time.Millisecond)
		}
		// A restarted runtime is told not to call.
		r, err := w.runAgent(tool, event, "")
		if err != nil {
			return err
		}
		if r.out["performed"] == true || r.out["refused"] != "InDoubt" || r.out["state"] != "unknown" {
			return fmt.Errorf("%s: the restarted agent on an unknown: %v", event, r.out)
		}
		// The operator looks at the outside system and resolves it as
		// what happened there; then the agent gets the result.
		outcome := "not_delivered"
		if before == 1 {
			outcome = "delivered"
		}
		status, body, err := w.api(http.MethodPost, "/effects/"+url.PathEscape(key)+"/resolve", w.operator,
			map[string]any{"outcome": outcome, "reason": "checked the outside system's history"})
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("%s: resolving %s: HTTP %d %v (%v)", event, outcome, status, body, err)
		}
		r, err = w.runAgent(tool, event, "")
		if err != nil {
			return err
		}
		if outcome == "delivered" && (r.out["replayed"] != true || r.out["performed"] == true) {
			return fmt.Errorf("%s: after the operator resolved it delivered the agent got %v, want the replay", event, r.out)
		}
		if outcome == "not_delivered" && (r.out["performed"] != true || r.out["state"] != "done") {
			return fmt.Errorf("%s: after the operator resolved it not delivered the agent got %v, want it performed", event, r.out)
		}
	}
	n, err := w.effects(tool, key)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s: %d effects at the outside system after recovery, want exactly 1", event, n)
	}
	st, err := w.state(key)
	if err != nil || st["state"] != "done" {
		return fmt.Errorf("%s: after recovery the ledger says %v (%v)", event, st["state"], err)
	}
	// And a further restart replays, never calls again.
	r, err = w.runAgent(tool, event, "")
	if err != nil {
		return err
	}
	if r.out["replayed"] != true || r.out["performed"] == true {
		return fmt.Errorf("%s: a begin after recovery: %v", event, r.out)
	}
	if n, err := w.effects(tool, key); err != nil || n != 1 {
		return fmt.Errorf("%s: %d effects after the replay, want 1 (%v)", event, n, err)
	}
	return nil
}

// keyOf is the call's key, as the server computes it.
func (w *world) keyOf(tool, event string) (string, error) {
	k, _, err := toolcall.KeyOf(w.agentUser, ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-" + event}})
	return string(k), err
}

// TestKillMatrix: a Node agent using the client, SIGKILLed after the
// intent is durable, after its body started and after its outside call
// (before the settle), for a tool with recovery dedupe, probe and none;
// restarted runtimes end with exactly one effect at the outside system
// (none: after an operator resolved the unknown as what happened there,
// the agent gets the result). One run per cell; three with
// ONCEPLAN_FAULTS=1 (make test-faults).
func TestKillMatrix(t *testing.T) {
	t.Parallel()
	runs := 1
	if os.Getenv("ONCEPLAN_FAULTS") != "" {
		runs = 3
	}
	w := newWorld(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, tool := range []string{"ts.dedupe", "ts.probe", "ts.none"} {
		for _, point := range []string{crashAfterIntent, crashBodyStarted, crashAfterCall} {
			for i := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := w.recoverRun(tool, point, i); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
}

// checkpointerDatabase is a database of its own for LangGraph's
// checkpointer, beside the server's, dropped when t ends.
func checkpointerDatabase(t *testing.T, admin string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "lg_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// graphRun is one run of the LangGraph test's graph.
type graphRun struct {
	killed bool
	out    map[string]any
}

// runGraph runs test/langgraph/graph.mjs (mode start or resume) with env;
// with crash, kills it with SIGKILL where it says it reached that point.
func runGraph(env []string, mode, crash string) (graphRun, error) {
	agents <- struct{}{}
	defer func() { <-agents }()
	cmd := exec.Command("node", "graph.mjs")
	cmd.Dir = "test/langgraph"
	cmd.Env = append(append(os.Environ(), env...), "LG_MODE="+mode, "LG_CRASH="+crash)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return graphRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return graphRun{}, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines []string
	var r graphRun
	for sc.Scan() {
		if crash != "" && sc.Text() == "CRASHPOINT "+crash {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return r, err
			}
			r.killed = true
			break
		}
		lines = append(lines, sc.Text())
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	switch {
	case r.killed:
		return r, nil
	case err != nil:
		return r, fmt.Errorf("the graph (%s) exited: %v\n%s\n%s", mode, err, strings.Join(lines, "\n"), stderr.String())
	case crash != "":
		return r, fmt.Errorf("the graph (%s) never reached %s:\n%s\n%s", mode, crash, strings.Join(lines, "\n"), stderr.String())
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r.out) != nil {
		return r, fmt.Errorf("the graph's output %q is not one JSON line:\n%s", lines, stderr.String())
	}
	if e, ok := r.out["error"]; ok {
		return r, fmt.Errorf("the graph (%s) failed: %v", mode, e)
	}
	return r, nil
}

// TestLangGraphResumesWithoutRepeating: a real LangGraph graph with the
// PostgreSQL checkpointer (a database of its own) whose tool node sets a
// customer's status at an outside system through the client. The process
// is SIGKILLed after the tool's answer is settled but before the graph's
// next checkpoint (a tool without recovery, at an outside system that does
// not deduplicate), and in the middle of the call, after the outside
// system answered but before the settle (a dedupe tool); resumed from its
// checkpoint, the graph reruns the step under the same event, so it
// replays (or takes over with the same key) instead of repeating: exactly
// one effect at the outside system, and the graph ends with its answer.
func TestLangGraphResumesWithoutRepeating(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	checkpoints := checkpointerDatabase(t, w.urls.Admin)
	for _, tc := range []struct{ name, tool, crash string }{
		{"after-settle", "ts.none", "after-settle"},
		{"mid-call", "ts.dedupe", "mid-call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			customer := "customer-" + tc.name
			env := []string{"ONCEPLAN_URL=" + w.url, "ONCEPLAN_TOKEN=" + w.agent, "LG_DATABASE_URL=" + checkpoints,
				"LG_THREAD=thread-" + tc.name, "LG_TOOL=" + tc.tool, "LG_SINK=" + w.sinks[tc.tool].URL(), "LG_CUSTOMER=" + customer}
			r, err := runGraph(env, "start", tc.crash)
			require.NoError(t, err)
			require.True(t, r.killed)
			recs, err := sink.ReadRecord(w.records[tc.tool])
			require.NoError(t, err)
			require.Len(t, recs, 1, "the killed run made the outside call once")
			first := recs[0]

			deadline := time.Now().Add(45 * time.Second)
			for {
				r, err = runGraph(env, "resume", "")
				require.NoError(t, err)
				if r.out["refused"] == nil {
					break
				}
				// mid-call: the killed run's lease must end first; the
				// answer says when to ask again.
				require.Equal(t, "InDoubt", r.out["refused"], "%v", r.out)
				require.Equal(t, "mid-call", tc.name, "a settled call is replayed at once: %v", r.out)
				require.True(t, time.Now().Before(deadline), "the resumed graph was still told the call is in doubt after 45s: %v", r.out)
				time.Sleep(300 * time.Millisecond)
			}
			require.Equal(t, "the CRM answered: "+`{"receipt":"`+first.Receipt+`","status":"done"}`, strings.TrimSpace(fmt.Sprint(r.out["final"])),
				"the resumed graph ends with the outside system's first answer: %v", r.out)
			recs, err = sink.ReadRecord(w.records[tc.tool])
			require.NoError(t, err)
			require.Len(t, recs, 1, "exactly one effect at the outside system after the resume")
			require.Equal(t, customer, recs[0].Target)
		})
	}
}
