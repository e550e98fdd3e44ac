package crashtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(toolAgentEnv) != "" {
		// Run again as the crash tests' agent process (toolcall_test.go).
		os.Exit(toolAgentMain())
	}
	dir, err := os.MkdirTemp("", "onceplan-crash-bin-")
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

// env is one test's world: its own database, users, and the approval
// service (enqueueing through an insert-only River client).
type env struct {
	ctx      context.Context
	url      string
	owner    string // the database as the schema's owner, for what the app role may not do
	pool     *pgxpool.Pool
	enq      *jobs.Enqueuer
	svc      *approval.Service
	proposer auth.Actor
	approver auth.Actor
	operator auth.Actor
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.Database(t)
	url := db.App
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	// The test's service judges a worker dead as the workers do (their
	// --owner-timeout): a target a dead worker's job still holds is free
	// to queue again once every process says so.
	enq := jobs.NewEnqueuer(client)
	enq.OwnerTimeout = ownerTimeout
	e := &env{ctx: context.Background(), url: url, owner: db.Owner, pool: pool, enq: enq, svc: approval.NewService(pool, enq)}
	mk := func(email string, role auth.Role) auth.Actor {
		id := pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: []string{string(role)}})
		return auth.Actor{UserID: id, Email: email, Roles: []auth.Role{role}}
	}
	e.proposer = mk("proposer@example.com", auth.RoleProposer)
	e.approver = mk("approver@example.com", auth.RoleApprover)
	e.operator = mk("operator@example.com", auth.RoleOperator)
	return e
}

// campaign creates, approves and starts a campaign of n targets on provider.
func (e *env) campaign(t *testing.T, provider string, n int) string {
	t.Helper()
	return e.campaignOf(t, provider, n, plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}", HTML: "<p>Hi {{.name}}</p>"})
}

// campaignOf is campaign with the message payload.
func (e *env) campaignOf(t *testing.T, provider string, n int, payload plan.Payload) string {
	t.Helper()
	var csv strings.Builder
	csv.WriteString("email,name\n")
	for i := range n {
		fmt.Fprintf(&csv, "t%04d@example.com,T%d\n", i, i)
	}
	res, err := e.svc.Create(e.ctx, e.proposer, approval.CreateParams{
		Name: "crash " + provider, Provider: provider,
		Payload: payload,
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

// worker is a running `onceplan worker` child process.
type worker struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs strings.Builder
	done chan struct{}
}

// ownerTimeout is the workers' --owner-timeout in these tests.
const ownerTimeout = 1500 * time.Millisecond

// fast recovery settings, so the suite runs in minutes.
var fastFlags = []string{"--owner-timeout", ownerTimeout.String(), "--maintenance-interval", "300ms", "--job-timeout", "5s", "--rescue-after", "20s"}

func (e *env) startWorker(t *testing.T, providers []string, extraEnv ...string) *worker {
	t.Helper()
	return e.startWorkerWith(t, providers, nil, extraEnv...)
}

// startWorkerWith is startWorker with more flags.
func (e *env) startWorkerWith(t *testing.T, providers, flags []string, extraEnv ...string) *worker {
	t.Helper()
	args := []string{"worker", "--database-url", e.url}
	for _, p := range providers {
		args = append(args, "--provider", p)
	}
	args = append(append(args, fastFlags...), flags...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &worker{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.logs.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
		}
		cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.kill()
		if t.Failed() {
			t.Logf("worker %d logs:\n%s", cmd.Process.Pid, w.Logs())
		}
	})
	return w
}

func (w *worker) Logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

func (w *worker) kill() {
	w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// exited reports whether the process ended (on its own, e.g. a crash point).
func (w *worker) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(timeout):
		t.Fatalf("the worker did not exit within %s:\n%s", timeout, w.Logs())
	}
}

// states counts the campaign's targets by their ledger state at the
// current epoch ("" for targets with no attempt).
func (e *env) states(t *testing.T, campaign string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, state := range e.stateByOrdinal(t, campaign) {
		out[state]++
	}
	return out
}

// stateByOrdinal is the ledger state of each target's latest attempt, by
// ordinal ("" for a target never attempted).
func (e *env) stateByOrdinal(t *testing.T, campaign string) map[int]string {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `
		SELECT t.ordinal, coalesce((SELECT f.state::text FROM effect f WHERE f.key = t.key ORDER BY f.id DESC LIMIT 1), '')
		FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1`, campaign)
	require.NoError(t, err)
	out := map[int]string{}
	var (
		o     int
		state string
	)
	_, err = pgx.ForEachRow(rows, []any{&o, &state}, func() error { out[o] = state; return nil })
	require.NoError(t, err)
	return out
}

// targetAt is the address and key of campaign's target at ordinal.
func (e *env) targetAt(t *testing.T, campaign string, ordinal int) (address, key string) {
	t.Helper()
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT t.target, t.key FROM campaign c JOIN plan p ON p.id = c.plan_id
		JOIN target t ON t.list_id = p.list_id WHERE c.id = $1 AND t.ordinal = $2`, campaign, ordinal).Scan(&address, &key))
	return address, key
}

func (e *env) campaignState(t *testing.T, id string) approval.State {
	t.Helper()
	c, err := approval.GetCampaign(e.ctx, e.pool, id)
	require.NoError(t, err)
	return c.State
}

// waitFor is await.Until, showing the workers' logs when it runs out.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, logs ...*worker) {
	t.Helper()
	explain := make([]func() string, len(logs))
	for i, w := range logs {
		explain[i] = func() string { return "worker logs:\n" + w.Logs() }
	}
	await.Until(t, timeout, what, cond, explain...)
}

// keysByTarget maps each planned target to its effect id as the outside
// world sees it (provider.EffectID at the key's current epoch).
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
