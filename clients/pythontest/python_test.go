package pythontest

import (
	"bufio"
	"encoding/json"
	"fmt"
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

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "onceplan-python-bin-")
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

// python3 is the interpreter: missing, the test fails (make test installs
// it first, scripts/ensure-python.sh).
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not installed: run `bash scripts/ensure-python.sh` (make test runs it) to install Debian's python3")
	}
	return p
}

// unittest runs `python3 -m unittest` in clients/python with env, and
// fails the test with its output when the suite fails.
func unittest(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(python3(t), append([]string{"-m", "unittest", "-v"}, args...)...)
	cmd.Dir = "../python"
	cmd.Env = append(os.Environ(), append([]string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("python3 -m unittest %s skipped tests that must run here:\n%s", strings.Join(args, " "), out)
	}
	t.Logf("%s", out)
}

// TestPythonUnit: the client against a scripted server (the clients'
// shared table, clients/testdata/cases.json) and wrap_tool with plain
// callables. The kill matrix is TestPythonKillMatrix's.
func TestPythonUnit(t *testing.T) {
	t.Parallel()
	unittest(t, nil, "tests.test_cases", "tests.test_tools")
}

// world is a running `onceplan serve` with the tools registered by the
// schema's owner (`onceplan tool add`), an agent's and an operator's
// token, and the outside systems: one deduplicating by Idempotency-Key,
// one not (both answer probes), each appending every effect to a synced
// record file.
type world struct {
	url, agent, operator string
	tools                map[string]map[string]string
	logsMu               sync.Mutex
	logs                 strings.Builder
}

var servingURL = regexp.MustCompile(`"url":"(http://[^"]+)"`)

func (w *world) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "onceplan %s: %s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(string(out))
}

func newWorld(t *testing.T) *world {
	t.Helper()
	urls := pgtest.Database(t)
	dir := t.TempDir()
	w := &world{tools: map[string]map[string]string{}}
	dedupe := sink.NewWebhook(sink.WebhookOpts{Dedupe: true, Record: filepath.Join(dir, "dedupe.jsonl")})
	plain := sink.NewWebhook(sink.WebhookOpts{Record: filepath.Join(dir, "plain.jsonl")})
	t.Cleanup(dedupe.Close)
	t.Cleanup(plain.Close)
	for _, tool := range []struct {
		name, recovery string
		outside        *sink.Webhook
		record         string
		flags          []string
	}{
		{"py.dedupe", "dedupe", dedupe, "dedupe.jsonl", nil},
		{"py.probe", "probe", plain, "plain.jsonl", []string{"--probe-url", plain.ProbeURL() + "/{key}", "--settle-window", "1s"}},
		{"py.none", "none", plain, "plain.jsonl", nil},
	} {
		w.cli(t, append([]string{"tool", "add", "--database-url", urls.Owner, "--name", tool.name, "--recovery", tool.recovery}, tool.flags...)...)
		w.tools[tool.name] = map[string]string{"recovery": tool.recovery, "sink": tool.outside.URL(), "record": filepath.Join(dir, tool.record)}
	}
	w.cli(t, "user", "add", "--database-url", urls.App, "--email", "owner@example.com", "--role", "proposer")
	w.cli(t, "user", "add", "--database-url", urls.App, "--email", "oli@example.com", "--role", "operator")
	w.agent = w.cli(t, "token", "create", "--database-url", urls.App, "--user", "owner@example.com", "--agent", "--name", "python agent")
	w.operator = w.cli(t, "token", "create", "--database-url", urls.App, "--user", "oli@example.com", "--name", "operator")

	cmd := exec.Command(binary, "serve", "--database-url", urls.App, "--listen", "127.0.0.1:0", "--data-dir", dir,
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
		t.Fatal("serve did not say where it listens within 60s")
	}
	return w
}

// TestPythonKillMatrix: agents using the Python client, killed with
// SIGKILL after the intent is durable, after the body started and after
// the outside call, for dedupe, probe and none, then restarted: exactly
// one effect for each in the end (none's unknown resolved by an operator
// through the API), never two. Once per case; three times under `make
// test-faults` (ONCEPLAN_FAULTS=1).
func TestPythonKillMatrix(t *testing.T) {
	t.Parallel()
	python3(t)
	w := newWorld(t)
	runs := "1"
	if os.Getenv("ONCEPLAN_FAULTS") != "" {
		runs = "3"
	}
	tools, err := json.Marshal(w.tools)
	require.NoError(t, err)
	unittest(t, []string{"ONCEPLAN_IT=1", "ONCEPLAN_URL=" + w.url, "ONCEPLAN_AGENT_TOKEN=" + w.agent,
		"ONCEPLAN_OPERATOR_TOKEN=" + w.operator, "ONCEPLAN_IT_TOOLS=" + string(tools), "ONCEPLAN_KILL_RUNS=" + runs},
		"tests.test_kill")
}
