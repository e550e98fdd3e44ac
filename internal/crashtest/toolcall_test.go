package crashtest

// Single agent effects (docs/ARCHITECTURE.md, "Single agent effects"),
// with real processes: an "agent" — this
// test binary run again as a child, calling a real `onceplan serve`
// through package toolclient — killed with SIGKILL after the intent is
// durable (before its body), after the body started (before the outside
// call), and after the outside call (before the settle), for a tool with
// recovery dedupe, with probe and with none. The outside system is a
// webhook sink that appends each real effect to a file; the file alone
// judges how many effects happened.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/clients/go/toolclient"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// toolAgentEnv makes this test binary the agent (toolAgentMain) instead of
// the test suite.
const toolAgentEnv = "ONCEPLAN_TOOL_AGENT"

// The agent's crash points, in the order of the protocol.
const (
	crashAfterIntent = "after-intent" // the begin's 201 is in hand: the intent is durable
	crashBodyStarted = "body-started" // the body began, the outside call not yet made
	crashAfterCall   = "after-call"   // the outside system answered; no settle yet
)

// agentLease is the agents' lease in these tests: short, so recovery
// begins within seconds, yet long enough that a begin answered late on a
// busy machine (a takeover first probes the outside system) still leaves
// the agent time to start its body before the lease ends; with 1 s, a
// loaded run saw "the lease ended before the body could start".
const agentLease = 3 * time.Second

// toolAgentMain is the agent: one tool call through toolclient. With
// TA_CRASH it begins, runs the body and calls the outside system with
// the primitives, and kills itself with SIGKILL at that point. Without,
// it is a restarted runtime: toolclient.Do, once, and prints what it did
// as one JSON line.
func toolAgentMain() int {
	c, err := toolclient.New(os.Getenv("TA_SERVER"), os.Getenv("TA_TOKEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	in := toolclient.Intent{Event: os.Getenv("TA_EVENT"), Tool: os.Getenv("TA_TOOL"), Target: toolclient.Subject(os.Getenv("TA_TARGET")),
		Args: map[string]any{"value": os.Getenv("TA_TARGET") + "-on"}, Lease: agentLease}
	crash := os.Getenv("TA_CRASH")
	kill := func(point string) {
		if crash == point {
			fmt.Fprintf(os.Stderr, "agent: crash point %s reached: SIGKILL\n", point)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	call := func(ctx context.Context, key string) ([]byte, string, error) {
		kill(crashBodyStarted)
		body, _ := json.Marshal(map[string]string{"target": in.Target.Value})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("TA_SINK"), bytes.NewReader(body))
		if err != nil {
			return nil, "", toolclient.Rejected(err)
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err // it may have left: unknown
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		kill(crashAfterCall)
		var a struct {
			Receipt string `json:"receipt"`
		}
		_ = json.Unmarshal(raw, &a)
		if res.StatusCode != http.StatusOK {
			return raw, "", fmt.Errorf("the outside system answered HTTP %d", res.StatusCode)
		}
		return raw, a.Receipt, nil
	}
	if crash != "" {
		eff, status, err := c.Begin(ctx, in)
		if err != nil || status != http.StatusCreated {
			fmt.Fprintf(os.Stderr, "agent: begin answered %d (%v): %+v\n", status, err, eff)
			return 3
		}
		kill(crashAfterIntent)
		raw, receipt, err := call(ctx, eff.Key)
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			return 3
		}
		_, err = c.Settle(ctx, eff.Key, toolclient.SettleParams{Lease: eff.Lease, Outcome: "done", Receipt: receipt, Raw: raw})
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			return 3
		}
		return 0
	}
	performed := false
	res, err := c.Do(ctx, in, func(ctx context.Context, key string) ([]byte, string, error) {
		performed = true
		return call(ctx, key)
	})
	out := map[string]any{"performed": performed, "replayed": res.Replayed, "state": res.Effect.State,
		"takeover": res.Effect.Takeover, "key": res.Effect.Key, "retry_after": res.Effect.RetryAfter}
	var np *toolclient.NotPerformedError
	switch {
	case errors.As(err, &np):
		out["refused"], out["state"], out["next"], out["retry_after"] = np.Kind.Error(), np.Effect.State, np.Effect.Next, np.Effect.RetryAfter
	case err != nil:
		out["error"] = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

// toolWorld is a running `onceplan serve` with three tools registered by
// an admin (`onceplan tool add` as the owner), an agent token, an
// operator's token, and the outside systems: one that deduplicates by
// Idempotency-Key, one that does not (both answer probes).
type toolWorld struct {
	url   string
	agent string // token
	// agentUser is the user the agent's token belongs to, whose calls its
	// calls are (their keys name that user).
	agentUser int64
	operator  string // token
	session   string // the operator's web session, to read the pages a person reads
	dedupe    *sink.Webhook
	plain     *sink.Webhook
	records   map[string]string // tool → its sink's record file
	sinks     map[string]*sink.Webhook
	logsMu    sync.Mutex
	logs      strings.Builder
}

var servingURL = regexp.MustCompile(`"url":"(http://[^"]+)"`)

func newToolWorld(t *testing.T) *toolWorld {
	t.Helper()
	urls := pgtest.Database(t)
	dir := t.TempDir()
	w := &toolWorld{records: map[string]string{}, sinks: map[string]*sink.Webhook{}}
	w.dedupe = sink.NewWebhook(sink.WebhookOpts{Dedupe: true, Record: filepath.Join(dir, "dedupe.jsonl")})
	w.plain = sink.NewWebhook(sink.WebhookOpts{Record: filepath.Join(dir, "plain.jsonl")})
	// Outside systems that forget a key after a while, as Stripe and
	// Resend do after 24 hours: a dedupe window of 2 s, a probe's
	// retention of 1 s (shorter than the agents' lease, so no probe can
	// be asked in time).
	forgetful := sink.NewWebhook(sink.WebhookOpts{Dedupe: true, Forget: 2 * time.Second, Record: filepath.Join(dir, "window.jsonl")})
	retaining := sink.NewWebhook(sink.WebhookOpts{Forget: time.Second, Record: filepath.Join(dir, "retention.jsonl")})
	for _, s := range []*sink.Webhook{w.dedupe, w.plain, forgetful, retaining} {
		t.Cleanup(s.Close)
	}
	for tool, s := range map[string]*sink.Webhook{"crash.dedupe": w.dedupe, "crash.probe": w.plain, "crash.none": w.plain,
		"crash.dedupe-window": forgetful, "crash.probe-retention": retaining} {
		w.sinks[tool] = s
	}
	w.records = map[string]string{"crash.dedupe": filepath.Join(dir, "dedupe.jsonl"), "crash.probe": filepath.Join(dir, "plain.jsonl"), "crash.none": filepath.Join(dir, "plain.jsonl"),
		"crash.dedupe-window": filepath.Join(dir, "window.jsonl"), "crash.probe-retention": filepath.Join(dir, "retention.jsonl")}

	// An admin registers the tools, as the schema's owner.
	for _, args := range [][]string{
		{"--name", "crash.dedupe", "--recovery", "dedupe"},
		{"--name", "crash.probe", "--recovery", "probe", "--probe-url", w.plain.ProbeURL() + "/{key}", "--settle-window", "1s"},
		{"--name", "crash.none", "--recovery", "none"},
		{"--name", "crash.dedupe-window", "--recovery", "dedupe", "--dedupe-window", "2s"},
		{"--name", "crash.probe-retention", "--recovery", "probe", "--probe-url", retaining.ProbeURL() + "/{key}", "--settle-window", "1s", "--probe-retention", "1s"},
	} {
		out, err := exec.Command(binary, append([]string{"tool", "add", "--database-url", urls.Owner}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	pool := pgtest.NewPool(t, urls.App)
	w.agentUser = pgtest.User(t, pool, pgtest.UserOpts{Email: "owner@example.com", Roles: []string{"proposer"}})
	_, err := auth.CreateUser(t.Context(), pool, auth.NewUser{Email: "oli@example.com", Roles: []auth.Role{auth.RoleOperator}, Password: "correct horse battery staple"})
	require.NoError(t, err)
	w.session, _, err = auth.Login(t.Context(), pool, "oli@example.com", "correct horse battery staple", auth.LoginMeta{})
	require.NoError(t, err)
	w.agent, _, err = auth.CreateToken(t.Context(), pool, "owner@example.com", "crash agent", true)
	require.NoError(t, err)
	w.operator, _, err = auth.CreateToken(t.Context(), pool, "oli@example.com", "operator", false)
	require.NoError(t, err)

	cmd := exec.Command(binary, "serve", "--database-url", urls.App, "--listen", "127.0.0.1:0", "--data-dir", dir,
		"--maintenance-interval", "300ms", "--owner-timeout", ownerTimeout.String())
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
		t.Fatal("serve did not start")
	}
	return w
}

// agentRun is one agent process's outcome.
type agentRun struct {
	killed bool
	out    map[string]any
	stderr string
}

// runAgent runs the agent for tool/event (crash: a crash point, or "" for
// a restarted runtime's Do) and waits for it.
func (w *toolWorld) runAgent(tool, event, crash string) (agentRun, error) {
	self, err := os.Executable()
	if err != nil {
		return agentRun{}, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), toolAgentEnv+"=1", "TA_SERVER="+w.url, "TA_TOKEN="+w.agent, "TA_EVENT="+event,
		"TA_TOOL="+tool, "TA_TARGET=acct-"+event, "TA_SINK="+w.sinks[tool].URL(), "TA_CRASH="+crash)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := agentRun{stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
			return r, nil
		}
		return r, fmt.Errorf("agent exited: %v: %s", err, stderr.String())
	}
	if err != nil {
		return r, err
	}
	if crash != "" {
		return r, fmt.Errorf("the agent was not killed at %s: %s", crash, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &r.out); err != nil {
		return r, fmt.Errorf("agent output %q: %w (%s)", stdout.String(), err, stderr.String())
	}
	return r, nil
}

// effects counts the real effects of key in tool's sink's record file.
func (w *toolWorld) effects(tool string, key ledger.Key) (int, error) {
	recs, err := sink.ReadRecord(w.records[tool])
	n := 0
	for _, r := range recs {
		if r.EffectID == string(key) {
			n++
		}
	}
	return n, err
}

// page is a UI page as the operator sees it, signed in.
func (w *toolWorld) page(path string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, w.url+path, nil)
	if err != nil {
		return "", err
	}
	req.AddCookie(&http.Cookie{Name: "onceplan_session", Value: w.session})
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d", path, res.StatusCode)
	}
	return string(b), err
}

// api calls the JSON API with token. The agents share their token, so a
// request over its rate (429, answered before anything is done) is sent
// again after the Retry-After second, as toolclient does.
func (w *toolWorld) api(method, path, token string, body any) (int, map[string]any, error) {
	for try := 1; ; try++ {
		status, out, err := w.apiOnce(method, path, token, body)
		if status != http.StatusTooManyRequests || try == 10 {
			return status, out, err
		}
		time.Sleep(time.Second) // the server's Retry-After
	}
}

func (w *toolWorld) apiOnce(method, path, token string, body any) (int, map[string]any, error) {
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
	defer res.Body.Close()
	var out map[string]any
	err = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, err
}

// toolKey is the key of the agent's call, as the server computes it.
func (w *toolWorld) toolKey(tool, event string) ledger.Key {
	k, _, err := toolcall.KeyOf(w.agentUser, ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-" + event}})
	if err != nil {
		panic(err)
	}
	return k
}

// recoverRun is one measured case: kill the agent at point, then recover
// as the tool's recovery says, and check the outside system's file.
func (w *toolWorld) recoverRun(tool, point string, i int) error {
	event := fmt.Sprintf("%s/%s/%d", tool, point, i)
	key := w.toolKey(tool, event)
	r, err := w.runAgent(tool, event, point)
	if err != nil {
		return err
	}
	if !r.killed {
		return fmt.Errorf("%s: the agent was not killed", event)
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
	case "crash.dedupe", "crash.probe":
		// A restarted runtime asks again until it performs or replays.
		for {
			r, err := w.runAgent(tool, event, "")
			if err != nil {
				return err
			}
			if r.out["performed"] == true || r.out["replayed"] == true {
				if e, ok := r.out["error"]; ok {
					return fmt.Errorf("%s: %v", event, e)
				}
				// A dedupe tool's attempt in doubt is usually performed again
				// as a takeover; on a busy machine a takeover whose begin is
				// answered after its own lease performs nothing and frees the
				// key, and the next begin performs it afresh. Either way the
				// end is what is asserted below: done, once at the outside
				// system, without a person.
				break
			}
			if r.out["refused"] != "in doubt" || r.out["state"] == "unknown" && tool == "crash.dedupe" {
				return fmt.Errorf("%s: the restarted agent got %v", event, r.out)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not recovered in time: %v", event, r.out)
			}
			time.Sleep(300 * time.Millisecond)
		}
		n, err := w.effects(tool, key)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%s: %d effects at the outside system after recovery, want exactly 1", event, n)
		}
		_, st, err := w.api(http.MethodGet, "/effects/"+string(key), w.agent, nil)
		if err != nil || st["state"] != "done" {
			return fmt.Errorf("%s: after recovery the ledger says %v (%v)", event, st["state"], err)
		}
		// And a further begin replays, never calls again.
		r, err = w.runAgent(tool, event, "")
		if err != nil {
			return err
		}
		if r.out["replayed"] != true || r.out["performed"] == true {
			return fmt.Errorf("%s: a begin after recovery: %v", event, r.out)
		}
	case "crash.none":
		// Maintenance alone turns the ended lease into an unknown, for a
		// person: no runtime needs to come back.
		for {
			_, st, err := w.api(http.MethodGet, "/effects/"+string(key), w.operator, nil)
			if err != nil {
				return err
			}
			if st["state"] == "unknown" {
				if !strings.Contains(st["next"].(string), "a person resolves it") {
					return fmt.Errorf("%s: the unknown says %q", event, st["next"])
				}
				break
			}
			if st["state"] != "pending" || time.Now().After(deadline) {
				return fmt.Errorf("%s: the attempt is %v, want it unknown", event, st["state"])
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The person sees it among the unknowns of the tool calls' page.
		html, err := w.page("/tool-calls")
		if err != nil {
			return err
		}
		if !strings.Contains(html, `data-key="`+string(key)+`" data-state="unknown"`) {
			return fmt.Errorf("%s: the tool calls' page does not show the unknown to a person", event)
		}
		// A restarted runtime is told not to call.
		r, err := w.runAgent(tool, event, "")
		if err != nil {
			return err
		}
		if r.out["performed"] == true || r.out["refused"] != "in doubt" || r.out["state"] != "unknown" {
			return fmt.Errorf("%s: the restarted agent on an unknown: %v", event, r.out)
		}
		if n, err := w.effects(tool, key); err != nil || n != before {
			return fmt.Errorf("%s: %d effects after the restart, want %d (%v)", event, n, before, err)
		}
	}
	return nil
}

// TestToolCallCrashMatrix: every crash point, for each recovery, five
// times: dedupe and probe end with exactly one effect at the outside
// system; none never makes two, and leaves the unknown for a person.
func TestToolCallCrashMatrix(t *testing.T) {
	t.Parallel()
	w := newToolWorld(t)
	for _, tool := range []string{"crash.dedupe", "crash.probe", "crash.none"} {
		t.Run(tool, func(t *testing.T) {
			t.Parallel()
			// The runs wait on leases and probes, not on the CPU: run them
			// side by side.
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for _, point := range []string{crashAfterIntent, crashBodyStarted, crashAfterCall} {
				for i := range 5 {
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
			await.Group(t, &wg, 5*time.Minute, "the restarted agents to recover")
			for _, err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestToolCallUnknownResolvedByPerson: a tool without recovery, killed
// after its outside call: the unknown is resolved by a person through the
// same route as a campaign's (an agent token may not), as delivered, and
// the next begin replays instead of calling; one killed before its call,
// resolved not delivered, is performed by the next begin — once.
func TestToolCallUnknownResolvedByPerson(t *testing.T) {
	t.Parallel()
	w := newToolWorld(t)
	for _, tc := range []struct {
		point, outcome string
		want           int
	}{{crashAfterCall, "delivered", 1}, {crashBodyStarted, "not_delivered", 1}} {
		event := "resolve/" + tc.point
		key := w.toolKey("crash.none", event)
		r, err := w.runAgent("crash.none", event, tc.point)
		require.NoError(t, err)
		require.True(t, r.killed)
		await.Until(t, time.Minute, "the dead agent's attempt turning unknown", func() bool {
			_, st, err := w.api(http.MethodGet, "/effects/"+string(key), w.operator, nil)
			return err == nil && st["state"] == "unknown"
		})
		status, body, err := w.api(http.MethodPost, "/effects/"+string(key)+"/resolve", w.agent, map[string]any{"outcome": tc.outcome, "reason": "checked"})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, status, "an agent token never resolves: %v", body)
		status, body, err = w.api(http.MethodPost, "/effects/"+string(key)+"/resolve", w.operator,
			map[string]any{"outcome": tc.outcome, "reason": "checked the CRM's history"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "%v", body)
		r, err = w.runAgent("crash.none", event, "")
		require.NoError(t, err)
		if tc.outcome == "delivered" {
			require.Equal(t, true, r.out["replayed"], "%v", r.out)
		} else {
			require.Equal(t, true, r.out["performed"], "%v", r.out)
			require.Equal(t, "done", r.out["state"], "%v", r.out)
		}
		n, err := w.effects("crash.none", key)
		require.NoError(t, err)
		require.Equal(t, tc.want, n)
	}
}

// pastTheWindow is one measured case of a tool whose outside system
// forgets keys: the agent killed after its outside call, restarted once
// the outside system forgot the key. The call ends unknown, for a
// person, with a reason naming the window — never performed again — and
// the outside system counts exactly one effect.
func (w *toolWorld) pastTheWindow(tool, window string, i int) error {
	event := fmt.Sprintf("%s/%d", tool, i)
	key := w.toolKey(tool, event)
	r, err := w.runAgent(tool, event, crashAfterCall)
	if err != nil {
		return err
	}
	if !r.killed {
		return fmt.Errorf("%s: the agent was not killed", event)
	}
	if n, err := w.effects(tool, key); err != nil || n != 1 {
		return fmt.Errorf("%s: %d effects at the outside system after the kill, want 1 (%v)", event, n, err)
	}
	// The restart comes once the outside system has forgotten the key.
	if !await.Poll(30*time.Second, func() bool {
		res, err := http.Get(w.sinks[tool].ProbeURL() + "/" + string(key))
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNotFound
	}) {
		return fmt.Errorf("%s: the outside system did not forget the key within 30s", event)
	}
	// ... and once the killed agent's lease has ended (the server's
	// lease_until), so the restart takes the call over instead of being
	// told it is in flight.
	if !await.Poll(30*time.Second, func() bool {
		_, st, err := w.api(http.MethodGet, "/effects/"+string(key), w.operator, nil)
		if err != nil {
			return false
		}
		until, _ := st["lease_until"].(string)
		end, err := time.Parse(time.RFC3339Nano, until)
		return err != nil || time.Now().After(end)
	}) {
		return fmt.Errorf("%s: the killed agent's lease did not end within 30s", event)
	}
	r, err = w.runAgent(tool, event, "")
	if err != nil {
		return err
	}
	if r.out["performed"] == true || r.out["refused"] != "in doubt" || r.out["state"] != "unknown" {
		return fmt.Errorf("%s: the agent restarted past the window got %v", event, r.out)
	}
	if next, _ := r.out["next"].(string); !strings.Contains(next, window) || !strings.Contains(next, "a person resolves it") {
		return fmt.Errorf("%s: the unknown says %q, want it to name the window (%s) and a person", event, next, window)
	}
	_, st, err := w.api(http.MethodGet, "/effects/"+string(key), w.operator, nil)
	if err != nil {
		return err
	}
	if reason, _ := st["reason"].(string); st["state"] != "unknown" || !strings.Contains(reason, window) {
		return fmt.Errorf("%s: the ledger says %v (%q), want unknown for a reason naming the window", event, st["state"], st["reason"])
	}
	if n, err := w.effects(tool, key); err != nil || n != 1 {
		return fmt.Errorf("%s: %d effects at the outside system after the restart, want exactly 1 (%v)", event, n, err)
	}
	return nil
}

// TestToolCallCrashPastTheWindow: a dedupe tool whose outside system
// honours a key for 2 s (--dedupe-window 2s), and a probe tool whose
// outside system keeps its records for 1 s (--probe-retention 1s), each
// killed after the outside call and restarted after the window, three
// times each: unknown for a person, exactly one effect.
func TestToolCallCrashPastTheWindow(t *testing.T) {
	t.Parallel()
	w := newToolWorld(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, tc := range []struct{ tool, window string }{
		{"crash.dedupe-window", "honours a key for 2s"},
		{"crash.probe-retention", "keeps its records for 1s"},
	} {
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.pastTheWindow(tc.tool, tc.window, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	await.Group(t, &wg, 5*time.Minute, "the agents restarted past the window")
	for _, err := range errs {
		t.Error(err)
	}
}
