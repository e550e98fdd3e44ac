package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/api"
)

// resolveWorld is a campaign with unknown targets behind a running API,
// and tokens: an operator's, a viewer's and an agent's (whose owner is an
// operator).
type resolveWorld struct {
	b      *cliBundle
	f      *audittest.Fixture
	c      audittest.Campaign
	server string
	tokens map[string]string
}

func newResolveWorld(t *testing.T, n int) *resolveWorld {
	t.Helper()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	w := &resolveWorld{b: b, f: f, c: f.Campaign("Evidence", audittest.Addresses(n)), tokens: map[string]string{}}
	e := echo.New()
	api.Register(e, api.Config{Pool: b.pool, Approval: f.Service})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	w.server = srv.URL
	for _, u := range []struct {
		name  string
		role  auth.Role
		agent bool
	}{{"operator", auth.RoleOperator, false}, {"viewer", auth.RoleViewer, false}, {"agent", auth.RoleOperator, true}} {
		email := u.name + "@example.com"
		_, err := auth.CreateUser(b.ctx, b.pool, auth.NewUser{Email: email, Roles: []auth.Role{u.role}, Password: "correct horse battery staple"})
		require.NoError(t, err)
		secret, _, err := auth.CreateToken(b.ctx, b.pool, email, "cli", u.agent)
		require.NoError(t, err)
		w.tokens[u.name] = secret
	}
	return w
}

func (w *resolveWorld) resolve(t *testing.T, who string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	err := runResolve(context.Background(), env, append([]string{"--server", w.server, "--token", w.tokens[who]}, args...))
	return result{stdout.String(), stderr.String(), err}
}

func (w *resolveWorld) state(t *testing.T, i int) ledger.Effect {
	t.Helper()
	e, err := ledger.NewStore(w.b.pool).Current(context.Background(), w.c.Targets[i].Key)
	require.NoError(t, err)
	return e
}

// sendgridBatch is a SendGrid Event Webhook batch naming our messages by
// their smtp-id (the Message-ID we sent).
func sendgridBatch(events ...string) string { return "[\n" + strings.Join(events, ",\n") + "\n]\n" }

func sgEvent(event, addr, messageID string) string {
	return fmt.Sprintf(`  {"email": %q, "timestamp": 1764583200, "smtp-id": %q, "event": %q, "sg_event_id": "e-%s-%s", "sg_message_id": "sg.%s"}`,
		addr, messageID, event, event, addr, addr)
}

// TestResolveEvidence: the CLI proposes exactly per the file, resolves
// nothing without --yes or --only (a dry run that says how to confirm),
// resolves exactly the --only ones as the file says, and leaves the rest
// unknown; --yes resolves the remaining proposals.
func TestResolveEvidence(t *testing.T) {
	t.Parallel()
	w := newResolveWorld(t, 5)
	for i := 0; i < 4; i++ {
		w.f.Attempt(w.c.Targets[i], ledger.StateUnknown)
	}
	w.f.Attempt(w.c.Targets[4], ledger.StateDone)
	mid := func(i int) string { return provider.MessageID(string(w.c.Targets[i].Key), 0) }
	addr := func(i int) string { return w.c.Targets[i].Address }
	file := filepath.Join(t.TempDir(), "sendgrid.json")
	require.NoError(t, os.WriteFile(file, []byte(sendgridBatch(
		sgEvent("processed", addr(0), mid(0)),
		sgEvent("delivered", addr(0), mid(0)),
		sgEvent("dropped", addr(1), mid(1)),
		sgEvent("delivered", addr(2), mid(2)),
		sgEvent("open", addr(3), mid(3)), // 4 (ordinal) only opened: proves nothing
		sgEvent("delivered", addr(4), mid(4)),
	)), 0o600))

	r := w.resolve(t, "operator", "--evidence", file, w.c.ID)
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "4 unknown targets; read 6 events")
	require.Regexp(t, `(?m)^  1 +person1@example.com +delivered +evidence: SendGrid processed, message id `+mid(0), r.stdout)
	require.Regexp(t, `(?m)^  2 +person2@example.com +not delivered +evidence: SendGrid dropped`, r.stdout)
	require.Regexp(t, `(?m)^  3 +person3@example.com +delivered `, r.stdout)
	require.NotContains(t, r.stdout, "person4@")
	require.NotContains(t, r.stdout, "person5@")
	require.Contains(t, r.stdout, "Dry run: nothing was resolved. To resolve them all: onceplan resolve --evidence "+file+" "+w.c.ID+" --yes")
	for i := 0; i < 4; i++ {
		require.Equal(t, ledger.StateUnknown, w.state(t, i).State, "target %d", i+1)
	}

	r = w.resolve(t, "operator", "--evidence", file, w.c.ID, "--json")
	require.NoError(t, r.err)
	var out struct {
		DryRun    bool `json:"dry_run"`
		Unknown   int  `json:"unknown"`
		Proposals []struct {
			Ordinal int    `json:"ordinal"`
			Outcome string `json:"outcome"`
		} `json:"proposals"`
		Resolved []int `json:"resolved"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.True(t, out.DryRun)
	require.Equal(t, 4, out.Unknown)
	require.Len(t, out.Proposals, 3)
	require.Equal(t, "not_delivered", out.Proposals[1].Outcome)
	require.Empty(t, out.Resolved)

	// An agent token and a viewer cannot confirm: the server refuses,
	// and nothing changes.
	for _, who := range []string{"agent", "viewer"} {
		r = w.resolve(t, who, "--evidence", file, w.c.ID, "--yes")
		requireOneLine(t, r.err)
		require.Contains(t, r.err.Error(), "403", who)
		require.Equal(t, ledger.StateUnknown, w.state(t, 0).State, who)
	}
	// A target without a proposal is refused before anything resolves.
	r = w.resolve(t, "operator", "--evidence", file, w.c.ID, "--only", "1,4")
	requireOneLine(t, r.err)
	require.Contains(t, r.err.Error(), "target 4 has no proposal (the proposals are 1,2,3)")
	require.Equal(t, ledger.StateUnknown, w.state(t, 0).State)

	r = w.resolve(t, "operator", "--evidence", file, w.c.ID, "--only", "1-2")
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "Resolved 2: 1,2")
	e := w.state(t, 0)
	require.Equal(t, ledger.StateDone, e.State)
	require.Equal(t, "user:operator@example.com", e.ResolvedBy)
	require.Contains(t, e.Resolution, "evidence: SendGrid processed, message id "+mid(0)+", to person1@example.com, at 2025-12-01 10:00:00 UTC")
	require.Contains(t, e.Resolution, "sendgrid.json line 2")
	_, err := ledger.NewStore(w.b.pool).Current(context.Background(), w.c.Targets[1].Key)
	require.ErrorIs(t, err, onceplan.ErrNotFound, "not delivered: the attempt failed and the key is free")
	require.Equal(t, ledger.StateUnknown, w.state(t, 2).State)
	require.Equal(t, ledger.StateUnknown, w.state(t, 3).State)

	// --yes: what remains proposed (3) is resolved; 4 stays unknown.
	r = w.resolve(t, "operator", "--evidence", file, w.c.ID, "--yes")
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "Resolved 1: 3")
	require.Equal(t, ledger.StateDone, w.state(t, 2).State)
	require.Equal(t, ledger.StateUnknown, w.state(t, 3).State)
}

// TestResolveEvidenceBadFile: a malformed export is refused in one line
// naming the file's line, before the server is asked anything.
func TestResolveEvidenceBadFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "events.json")
	require.NoError(t, os.WriteFile(file, []byte("[\n  {\"event\": \"delivered\", \"email\": \"a@example.com\"},\n  {\"event\": \"delivered\" \"email\": 1}\n]\n"), 0o600))
	var stdout, stderr bytes.Buffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	// The server address is nothing listening: the file is refused first.
	err := runResolve(context.Background(), env, []string{"--server", "http://127.0.0.1:1", "--token", "x", "--evidence", file, "some-campaign"})
	requireOneLine(t, err)
	require.Contains(t, err.Error(), "resolve: "+file+" line 3: this is not valid JSON")

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"c"}, "--evidence FILE is required"},
		{[]string{"--evidence", file}, "name the campaign"},
		{[]string{"--evidence", file, "c", "--yes", "--only", "1"}, "not both"},
		{[]string{"--evidence", file, "c", "--only", "x"}, `"x" is not a target ordinal`},
	} {
		err := runResolve(context.Background(), env, tc.args)
		requireOneLine(t, err)
		require.Contains(t, err.Error(), tc.says)
	}
	require.Empty(t, stdout.String())
}
