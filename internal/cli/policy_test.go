package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// policyBundle is one test database reached as the schema's owner and as
// the application role, with a superuser's pool to look at it.
type policyBundle struct {
	owner, app *cliBundle
	store      *ledger.Store
}

func setupPolicy(t *testing.T) *policyBundle {
	t.Helper()
	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.Admin)
	ctx := context.Background()
	return &policyBundle{
		owner: &cliBundle{ctx: ctx, url: urls.Owner, pool: pool},
		app:   &cliBundle{ctx: ctx, url: urls.App, pool: pool},
		store: ledger.NewStore(pool),
	}
}

func TestPolicyAddAsOwnerAndList(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.owner.run(t, runPolicy, "", "add", "--name", "monthly-reminder", "--description", "  one reminder per calendar month\n")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "registered bump policy monthly-reminder (by "+cliActor()+")\n", r.stdout)

	policies, err := b.store.Policies(b.owner.ctx)
	require.NoError(t, err)
	require.Len(t, policies, 1)
	require.Equal(t, "monthly-reminder", policies[0].Name)
	require.Equal(t, "one reminder per calendar month", policies[0].Description)
	require.Equal(t, cliActor(), policies[0].RegisteredBy)
	require.WithinDuration(t, time.Now(), policies[0].CreatedAt, time.Minute)

	// Listing only reads: the application role may.
	r = b.app.run(t, runPolicy, "", "list")
	require.NoError(t, r.err, r.stderr)
	require.Regexp(t, `^NAME +REGISTERED BY +CREATED +DESCRIPTION\nmonthly-reminder +`+regexp.QuoteMeta(cliActor())+
		` +\d{4}-\d\d-\d\d \d\d:\d\d UTC +one reminder per calendar month\n$`, r.stdout)

	r = b.app.run(t, runPolicy, "", "list", "--json")
	require.NoError(t, r.err, r.stderr)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 1)
	require.Equal(t, "monthly-reminder", got[0]["name"])
	require.Equal(t, "one reminder per calendar month", got[0]["description"])
	require.Equal(t, cliActor(), got[0]["registered_by"])
	at, err := time.Parse(time.RFC3339Nano, got[0]["created_at"].(string))
	require.NoError(t, err)
	require.True(t, at.Equal(policies[0].CreatedAt))

	// And the server's role bumps under it.
	appPool := pgtest.NewPool(t, b.app.url)
	target, err := ledger.NewEmailTarget("ann@example.com")
	require.NoError(t, err)
	key, err := ledger.NewKey(ledger.KeyInput{Event: "campaign-1", Tool: "email.send", Target: target})
	require.NoError(t, err)
	epoch, err := ledger.NewStore(appPool).Bump(b.app.ctx, ledger.BumpParams{
		Key: key, ActorKind: ledger.ActorPolicy, Actor: "scheduler", Policy: "monthly-reminder", Reason: "next month",
	})
	require.NoError(t, err)
	require.Equal(t, 1, epoch)
}

func TestPolicyListEmpty(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.app.run(t, runPolicy, "", "list", "--json")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "[]\n", r.stdout)
	r = b.app.run(t, runPolicy, "", "list")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "NAME  REGISTERED BY  CREATED  DESCRIPTION\n", r.stdout)
}

// TestPolicyAddRefusesApplicationRole: the server's role may not register
// a policy (migration 0014); PostgreSQL refuses, and the command says
// which role it needs in one sentence.
func TestPolicyAddRefusesApplicationRole(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.app.run(t, runPolicy, "", "add", "--name", "monthly-reminder", "--description", "one reminder per calendar month")
	requireOneLine(t, r.err)
	require.Equal(t, "policy add: the database role onceplan_app may not register bump policies: "+
		"use the URL of the schema's owner role (onceplan_owner), as for `onceplan migrate` (see docs/guide/secure.md, \"Database roles\")", r.err.Error())
	require.Empty(t, r.stdout)
	policies, err := b.store.Policies(b.app.ctx)
	require.NoError(t, err)
	require.Empty(t, policies)
}

func TestPolicyAddRefusesDuplicate(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	require.NoError(t, b.owner.run(t, runPolicy, "", "add", "--name", "weekly", "--description", "once a week").err)
	r := b.owner.run(t, runPolicy, "", "add", "--name", "weekly", "--description", "twice a week")
	requireOneLine(t, r.err)
	require.Equal(t, `policy add: a bump policy named "weekly" already exists, and policies are write-once: register the new one under another name`, r.err.Error())
	require.Empty(t, r.stdout)
	policies, err := b.store.Policies(b.owner.ctx)
	require.NoError(t, err)
	require.Len(t, policies, 1)
	require.Equal(t, "once a week", policies[0].Description)
}

// TestPolicyAddRefusesBadInputBeforeConnecting: the database URL leads
// nowhere, so an answer other than the flag's refusal would be a failure
// to connect.
func TestPolicyAddRefusesBadInputBeforeConnecting(t *testing.T) {
	t.Parallel()
	b := &cliBundle{ctx: context.Background(), url: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	const rule = "use 1 to 64 lower-case letters, digits, _, . and -, starting with a letter or digit"
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"add", "--description", "d"}, "policy add: --name is required"},
		{[]string{"add", "--name", "Monthly", "--description", "d"}, `policy add: --name "Monthly" is not a policy name: ` + rule},
		{[]string{"add", "--name", "-monthly", "--description", "d"}, `policy add: --name "-monthly" is not a policy name: ` + rule},
		{[]string{"add", "--name", "a b", "--description", "d"}, `policy add: --name "a b" is not a policy name: ` + rule},
		{[]string{"add", "--name", strings.Repeat("a", 65), "--description", "d"}, `policy add: --name "` + strings.Repeat("a", 65) + `" is not a policy name: ` + rule},
		{[]string{"add", "--name", "monthly"}, "policy add: --description is required (say what the policy bumps and when)"},
		{[]string{"add", "--name", "monthly", "--description", " \t\n"}, "policy add: --description is required (say what the policy bumps and when)"},
		{[]string{"add", "--name", "monthly", "--description", "d", "extra"}, `policy add: unexpected argument "extra"`},
		{[]string{"remove"}, `policy: unknown subcommand "remove": use one of add, list`},
	} {
		r := b.run(t, runPolicy, "", tc.args...)
		requireOneLine(t, r.err)
		require.Contains(t, r.err.Error(), tc.msg, tc.args)
		require.NotContains(t, r.err.Error(), "connect", tc.args)
		require.Empty(t, r.stdout)
	}
	// The longest name the table allows passes the check (and only then
	// fails to connect).
	r := b.run(t, runPolicy, "", "add", "--name", "a"+strings.Repeat("z", 63), "--description", "d")
	require.ErrorContains(t, r.err, "cannot connect to the database")
}

// TestPolicyAddEmbeddedDefault: without a database URL, policy add starts
// the embedded cluster and registers as its owner by itself; policy list
// then reads it as the application role.
func TestPolicyAddEmbeddedDefault(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts an embedded PostgreSQL cluster")
	}
	dataDir, err := os.MkdirTemp("", "onceplan-cli-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dataDir, 0o755)) // the postgres account enters it when we are root
	t.Cleanup(func() { os.RemoveAll(dataDir) })

	run := func(args ...string) result {
		var stdout, stderr bytes.Buffer
		env := Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
		err := runPolicy(context.Background(), env, append(args, "--data-dir", dataDir))
		return result{stdout.String(), stderr.String(), err}
	}
	r := run("add", "--name", "yearly", "--description", "one renewal notice a year")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "registered bump policy yearly (by "+cliActor()+")\n", r.stdout)
	r = run("list")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "yearly")
	require.Contains(t, r.stdout, "one renewal notice a year")
	r = run("add", "--name", "yearly", "--description", "again")
	require.ErrorContains(t, r.err, `a bump policy named "yearly" already exists`)
}

func TestPolicyHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage: onceplan policy SUBCOMMAND [flags]", "add", "list"}},
		{[]string{"add", "--help"}, []string{"Usage: onceplan policy add [flags]", "-name", "-description", "onceplan_owner"}},
		{[]string{"list", "-h"}, []string{"Usage: onceplan policy list [flags]", "-json"}},
	} {
		var stdout bytes.Buffer
		err := runPolicy(context.Background(), Env{Stdout: &stdout, Stderr: &stdout, Getenv: func(string) string { return "" }}, tc.args)
		code, ok := ExitCode(err)
		require.True(t, ok, tc.args)
		require.Zero(t, code)
		for _, w := range tc.want {
			require.Contains(t, stdout.String(), w, tc.args)
		}
	}
	var stdout bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"--help"}, Env{Stdout: &stdout, Stderr: &stdout, Getenv: func(string) string { return "" }}))
	require.Regexp(t, `(?m)^  policy +manage bump policies.*: add \(as the schema's owner role, like migrate\), list$`, stdout.String())
}
