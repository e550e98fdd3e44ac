package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// binary is the onceplan binary the tests run as child processes.
var binary string

func TestMain(m *testing.M) {
	// Built next to the test binary, in the directory `go test` removes
	// when the run ends (pgtest.Main exits the process, so a deferred
	// removal would never run).
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(filepath.Dir(self), "onceplan-faulttest")
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/onceplan").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building onceplan: %v\n%s", err, out)
		os.Exit(1)
	}
	pgtest.Main(m)
}

// faultsEnv turns the slow fault tests on; `make test-faults` sets it.
const faultsEnv = "ONCEPLAN_FAULTS"

// slow skips a test that takes a minute or restarts PostgreSQL unless the
// fault suite was asked for.
func slow(t *testing.T) {
	t.Helper()
	if os.Getenv(faultsEnv) != "1" {
		t.Skipf("a slow fault test: it runs under `make test-faults` (%s=1), which CI runs after `make test`", faultsEnv)
	}
}

// env is one test's Onceplan database with its users and the approval
// service (enqueueing through an insert-only River client), as in
// internal/crashtest.
type env struct {
	ctx      context.Context
	url      string
	pool     *pgxpool.Pool
	svc      *approval.Service
	proposer auth.Actor
	approver auth.Actor
	operator auth.Actor
}

// newEnv uses a fresh database of the shared test cluster.
func newEnv(t *testing.T) *env { return newEnvAt(t, pgtest.URL(t), 0) }

// poolEnv connects to the migrated database at url, without users or
// service: enough to read the ledger.
func poolEnv(t *testing.T, url string) *env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &env{ctx: context.Background(), url: url, pool: pool}
}

// newEnvAt uses the migrated database at url. ownerTimeout, when not 0,
// is the processes' --owner-timeout: the test's own resumes and
// resolutions then judge a job of a dead process live or not as the
// processes do (with the default 30 s, a dead worker's job would hold its
// targets for 30 s in the test's eyes, 1.5 s in theirs).
func newEnvAt(t *testing.T, url string, ownerTimeout time.Duration) *env {
	t.Helper()
	e := poolEnv(t, url)
	client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{})
	require.NoError(t, err)
	enq := jobs.NewEnqueuer(client)
	if ownerTimeout != 0 {
		enq.OwnerTimeout = ownerTimeout
	}
	e.svc = approval.NewService(e.pool, enq)
	pool := e.pool
	mk := func(email string, role auth.Role) auth.Actor {
		id := pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: []string{string(role)}})
		return auth.Actor{UserID: id, Email: email, Roles: []auth.Role{role}}
	}
	e.proposer = mk("proposer@example.com", auth.RoleProposer)
	e.approver = mk("approver@example.com", auth.RoleApprover)
	e.operator = mk("operator@example.com", auth.RoleOperator)
	return e
}

// campaign creates, approves and starts a campaign of n targets
// (PREFIX0000@example.com …) on the provider called providerName.
func (e *env) campaign(t *testing.T, providerName, prefix string, n int) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("email,name\n")
	for i := range n {
		fmt.Fprintf(&csv, "%s%04d@example.com,T%d\n", prefix, i, i)
	}
	res, err := e.svc.Create(e.ctx, e.proposer, approval.CreateParams{
		Name: "fault " + prefix + " on " + providerName, Provider: providerName,
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}", HTML: "<p>Hi {{.name}}</p>"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv.String())},
	})
	require.NoError(t, err)
	sub, err := e.svc.Submit(e.ctx, e.proposer, res.Campaign.ID)
	require.NoError(t, err)
	_, err = e.svc.Approve(e.ctx, e.approver, res.Campaign.ID, sub.PlanHash)
	require.NoError(t, err)
	_, err = e.svc.Start(e.ctx, e.operator, res.Campaign.ID)
	require.NoError(t, err)
	return res.Campaign.ID
}

// states counts the campaign's targets by the ledger state of their latest
// attempt ("" for targets with no attempt). It returns the database's
// error rather than failing: the PostgreSQL fault tests poll it while the
// database is away.
func (e *env) states(campaign string) (map[string]int, error) {
	rows, err := e.pool.Query(e.ctx, `
		SELECT coalesce((SELECT f.state::text FROM effect f WHERE f.key = t.key ORDER BY f.id DESC LIMIT 1), ''), count(*)
		FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1 GROUP BY 1`, campaign)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var state string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error { out[state] = n; return nil })
	return out, err
}

// mustStates is states, failing the test on a database error.
func (e *env) mustStates(t *testing.T, campaign string) map[string]int {
	t.Helper()
	st, err := e.states(campaign)
	require.NoError(t, err)
	return st
}

// completed reports whether the campaign completed with all n targets done.
func (e *env) completed(campaign string, n int) bool {
	var state string
	if err := e.pool.QueryRow(e.ctx, `SELECT state FROM campaign WHERE id = $1`, campaign).Scan(&state); err != nil {
		return false
	}
	st, err := e.states(campaign)
	return err == nil && approval.State(state) == approval.StateCompleted && st["done"] == n
}

// attempt is one ledger row of a campaign's target.
type attempt struct {
	Target  string
	Key     string
	State   string
	Attempt int
	Reason  string
	Kinds   []string // the kinds of raw answers recorded (send, resend, probe)
}

// attempts lists every ledger row of the campaign's plan, oldest first.
func (e *env) attempts(t *testing.T, campaign string) []attempt {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `
		SELECT t.target, f.key, f.state::text, f.attempt, coalesce(f.reason, ''),
		       coalesce((SELECT array_agg(r.kind::text ORDER BY r.id) FROM effect_response r WHERE r.effect_id = f.id), '{}')
		FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		JOIN effect f ON f.key = t.key
		WHERE c.id = $1 ORDER BY f.id`, campaign)
	require.NoError(t, err)
	var out []attempt
	var a attempt
	_, err = pgx.ForEachRow(rows, []any{&a.Target, &a.Key, &a.State, &a.Attempt, &a.Reason, &a.Kinds}, func() error {
		a.Kinds = slices.Clone(a.Kinds)
		out = append(out, a)
		return nil
	})
	require.NoError(t, err)
	return out
}

// targets maps each planned target address to its key.
func (e *env) targets(t *testing.T, campaign string) map[string]ledger.Key {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT t.target, t.key FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id WHERE c.id = $1`, campaign)
	require.NoError(t, err)
	out := map[string]ledger.Key{}
	var target, key string
	_, err = pgx.ForEachRow(rows, []any{&target, &key}, func() error { out[target] = ledger.Key(key); return nil })
	require.NoError(t, err)
	return out
}

// requireHolds checks the ledger's own audit: every approved target has
// exactly one done effect, none missing, in doubt or duplicated.
func (e *env) requireHolds(t *testing.T, campaign string) {
	t.Helper()
	m, err := audit.ForCampaign(e.ctx, e.pool, campaign)
	require.NoError(t, err)
	require.True(t, m.Holds, "the audit must hold: %+v", m)
	require.Equal(t, m.Approved, m.ExactlyOnce, "%+v", m)
}

// world is a provider and the outside world it lands in.
type world struct {
	name     string // the provider's name
	provider string // NAME=URL for --provider
	// effects counts what the outside world received, per target address.
	effects func() map[string]int
}

// maildirWorld delivers into dir.
func maildirWorld(t *testing.T, name, dir, opts string) *world {
	return &world{name: name, provider: name + "=" + sink.WithOption("maildir://"+dir, opts),
		effects: func() map[string]int { return maildirCount(t, dir) }}
}

// webhookWorld posts to providerURL (the sink itself or a fault-injecting
// front of it) and counts the effects hook applied.
func webhookWorld(name string, hook *sink.Webhook, providerURL, opts string) *world {
	return &world{name: name, provider: name + "=" + sink.WithOption(providerURL, opts), effects: func() map[string]int {
		out := map[string]int{}
		for _, e := range hook.Effects() {
			out[e.Target]++
		}
		return out
	}}
}

// smtpWorld sends to an SMTP sink.
func smtpWorld(name string, s *sink.SMTP, providerURL, opts string) *world {
	return &world{name: name, provider: name + "=" + sink.WithOption(providerURL, opts), effects: func() map[string]int {
		out := map[string]int{}
		for _, m := range s.Messages() {
			for _, rcpt := range m.Rcpts {
				out[rcpt]++
			}
		}
		return out
	}}
}

// maildirCount counts delivered messages per recipient by reading every
// file in new/ and cur/.
func maildirCount(t *testing.T, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, sub := range []string{"new", "cur"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, sub, e.Name()))
			require.NoError(t, err)
			for line := range strings.SplitSeq(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "To: "); ok {
					out[strings.Trim(strings.TrimSpace(rest), "<>")]++
					break
				}
			}
		}
	}
	return out
}

func requireNoDuplicates(t *testing.T, w *world, stage string) {
	t.Helper()
	for target, n := range w.effects() {
		require.LessOrEqual(t, n, 1, "%s: %s got %d effects", stage, target, n)
	}
}

// requireExactlyOnce: every planned target got exactly one effect in the
// outside world (0 duplicates, 0 missing), and nothing else arrived.
func requireExactlyOnce(t *testing.T, w *world, targets map[string]ledger.Key) {
	t.Helper()
	got := w.effects()
	var missing, dup []string
	for target := range targets {
		switch n := got[target]; {
		case n == 0:
			missing = append(missing, target)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s×%d", target, n))
		}
	}
	require.Empty(t, dup, "duplicates at the provider %s", w.name)
	require.Empty(t, missing, "targets missing at the provider %s", w.name)
	require.Len(t, got, len(targets), "no effect outside the plan at %s", w.name)
}

// proc is a running onceplan child process; it keeps everything the
// process writes on stdout and stderr.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs strings.Builder
	done chan struct{}
}

// fastFlags: recovery settings short enough for the suite to run in
// minutes (the crash suite's).
var fastFlags = []string{"--owner-timeout", "1500ms", "--maintenance-interval", "300ms", "--job-timeout", "5s", "--rescue-after", "20s"}

// ownerTimeoutOf is the --owner-timeout flags give.
func ownerTimeoutOf(t *testing.T, flags []string) time.Duration {
	t.Helper()
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == "--owner-timeout" {
			d, err := time.ParseDuration(flags[i+1])
			require.NoError(t, err)
			return d
		}
	}
	return 0
}

// flagsWith returns fastFlags with some of them replaced.
func flagsWith(over ...string) []string {
	out := append([]string(nil), fastFlags...)
	for i := 0; i+1 < len(over); i += 2 {
		replaced := false
		for j := 0; j+1 < len(out); j += 2 {
			if out[j] == over[i] {
				out[j+1], replaced = over[i+1], true
			}
		}
		if !replaced {
			out = append(out, over[i], over[i+1])
		}
	}
	return out
}

// startWorker runs `onceplan worker` on the database at url.
func startWorker(t *testing.T, url string, providers []string, flags []string) *proc {
	t.Helper()
	args := []string{"worker", "--database-url", url}
	for _, p := range providers {
		args = append(args, "--provider", p)
	}
	return startProc(t, "worker", append(args, flags...), nil)
}

// startServe runs `onceplan serve` on a free port and waits until it serves;
// it returns the process and its base URL.
func startServe(t *testing.T, url string, providers []string, flags []string, extraEnv []string) (*proc, string) {
	t.Helper()
	args := []string{"serve", "--database-url", url, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}
	for _, p := range providers {
		args = append(args, "--provider", p)
	}
	p := startProc(t, "serve", append(args, flags...), extraEnv)
	var base string
	waitFor(t, 60*time.Second, "onceplan serve to listen", func() bool {
		base = p.servingURL()
		return base != ""
	}, p)
	return p, base
}

func startProc(t *testing.T, name string, args []string, extraEnv []string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout // one stream, in order
	require.NoError(t, cmd.Start())
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s %d output:\n%s", name, cmd.Process.Pid, p.Logs())
		}
	})
	return p
}

// Logs is everything the process wrote so far.
func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// servingURL is the URL from serve's "onceplan is serving" line, or "".
func (p *proc) servingURL() string {
	for line := range strings.SplitSeq(p.Logs(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "onceplan is serving" {
			return rec.URL
		}
	}
	return ""
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop stops the process as an operator would (SIGTERM) and waits.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not stop within 90s:\n%s", p.name, p.Logs())
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor is await.Until, showing the processes' output when it runs out.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	explain := make([]func() string, len(procs))
	for i, p := range procs {
		explain[i] = func() string { return p.name + " output:\n" + p.Logs() }
	}
	await.Until(t, timeout, what, cond, explain...)
}

// requireAlive fails when a process ended on its own: a fault must never
// make Onceplan exit.
func requireAlive(t *testing.T, procs ...*proc) {
	t.Helper()
	for _, p := range procs {
		require.False(t, p.exited(), "%s exited on its own:\n%s", p.name, p.Logs())
	}
}

// httpGet returns the status of GET url (0 when no answer came).
func httpGet(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
