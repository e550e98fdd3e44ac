package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestToolAddAsOwnerAndList: an admin (the owner's URL) registers a
// tool's recovery and approval; the list, as the application role, shows
// it beside a tool registered by its first use, shown as such; a call
// begun after the registration follows it.
func TestToolAddAsOwnerAndList(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.owner.run(t, runTool, "", "add", "--name", "payment.send", "--recovery", "probe",
		"--probe-url", "https://pay.example/effects/{key}", "--settle-window", "30s", "--approval", "--description", "pays a vendor")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "registered tool payment.send: recovery: probe https://pay.example/effects/{key} (settle window 30s), approval required (by "+
		cliActor()+"); calls begun from now on follow it\n", r.stdout)

	appPool := pgtest.NewPool(t, b.app.url)
	id := pgtest.User(t, b.owner.pool, pgtest.UserOpts{Email: "agent-owner@example.com", Roles: []string{"proposer"}})
	agent := auth.Actor{UserID: id, Email: "agent-owner@example.com", Roles: []auth.Role{auth.RoleProposer}, Agent: true}
	svc := toolcall.NewService(appPool, toolcall.Options{})
	res, err := svc.Begin(b.app.ctx, agent, toolcall.BeginParams{
		Identity: ledger.KeyInput{Event: "run-1", Tool: "crm.note", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "c-1"}}, Args: []byte(`{}`)})
	require.NoError(t, err)
	require.True(t, res.Registered)
	res, err = svc.Begin(b.app.ctx, agent, toolcall.BeginParams{
		Identity: ledger.KeyInput{Event: "run-1", Tool: "payment.send", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "v-1"}, AmountMinor: 500},
		Args:     []byte(`{"iban":"X"}`)})
	require.NoError(t, err)
	require.Equal(t, toolcall.AwaitingApproval, res.Outcome, "the registration is in force for the next call")

	r = b.app.run(t, runTool, "", "list")
	require.NoError(t, r.err, r.stderr)
	require.Regexp(t, `^TOOL +RECOVERY +APPROVAL +REGISTERED BY +CREATED +POLICY\n`+
		`crm\.note +none +no +first use by agent:agent-owner@example\.com +\d{4}-\d\d-\d\d \d\d:\d\d UTC +no recovery, no approval \(registered on first use\)\n`+
		`payment\.send +probe +required +`+regexp.QuoteMeta(cliActor())+` +\d{4}-\d\d-\d\d \d\d:\d\d UTC +recovery: probe https://pay\.example/effects/\{key\} \(settle window 30s\), approval required\n$`,
		r.stdout)

	r = b.app.run(t, runTool, "", "list", "--json")
	require.NoError(t, r.err, r.stderr)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 2)
	require.Equal(t, true, got[0]["first_use"])
	require.Equal(t, "probe", got[1]["recovery"])
	require.Equal(t, "30s", got[1]["settle_window"])
	require.Equal(t, true, got[1]["approval_required"])
}

// TestToolAddRefusesApplicationRole: the server's role may not register
// a tool's policy; PostgreSQL refuses, the command says which role it
// needs, and nothing is registered.
func TestToolAddRefusesApplicationRole(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.app.run(t, runTool, "", "add", "--name", "crm.set", "--recovery", "dedupe")
	requireOneLine(t, r.err)
	require.Equal(t, "tool add: the database role onceplan_app may not register tools: use the URL of the schema's owner role (onceplan_owner), as for `onceplan migrate` (see docs/guide/secure.md, \"Database roles\")", r.err.Error())
	policies, err := toolcall.Policies(b.app.ctx, b.owner.pool)
	require.NoError(t, err)
	require.Empty(t, policies)
}

// TestToolAddRefusesBadInputBeforeConnecting: the URL leads nowhere, so
// any other answer than the flag's refusal would be a failure to connect.
func TestToolAddRefusesBadInputBeforeConnecting(t *testing.T) {
	t.Parallel()
	b := &cliBundle{ctx: context.Background(), url: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"add"}, "tool add: --name is required"},
		{[]string{"add", "--name", "CRM.set"}, `tool add: --name "CRM.set" is not a tool name: use lower-case ASCII letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{[]string{"add", "--name", "crm.set", "--recovery", "retry"}, `tool add: --recovery "retry": want dedupe, probe or none`},
		{[]string{"add", "--name", "crm.set", "--recovery", "probe"}, "tool add: --probe-url is required with recovery probe: the URL to GET, with {key} where the key goes"},
		{[]string{"add", "--name", "crm.set", "--recovery", "probe", "--probe-url", "https://crm.example/ops"}, `tool add: --probe-url "https://crm.example/ops" has no {key}: the probe must be asked about one key`},
		{[]string{"add", "--name", "crm.set", "--recovery", "probe", "--probe-url", "ftp://crm.example/{key}"}, `tool add: --probe-url "ftp://crm.example/{key}" is not an http(s) URL`},
		{[]string{"add", "--name", "crm.set", "--probe-url", "https://crm.example/{key}"}, "tool add: --probe-url applies only with recovery probe"},
		{[]string{"add", "--name", "crm.set", "--recovery", "dedupe", "--settle-window", "5s"}, "tool add: --settle-window applies only with recovery probe"},
	} {
		r := b.run(t, runTool, "", tc.args...)
		requireOneLine(t, r.err)
		require.Equal(t, tc.msg, r.err.Error(), tc.args)
	}
}

// TestToolAddWindows: an admin declares how long a dedupe tool's outside
// system honours a key and how long a probe tool's keeps its records;
// the list shows both, and a window that does not fit the recovery is
// refused naming its flag.
func TestToolAddWindows(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	r := b.owner.run(t, runTool, "", "add", "--name", "stripe.charge", "--recovery", "dedupe", "--dedupe-window", "24h")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "registered tool stripe.charge: recovery: dedupe by key (window 24h0m0s), no approval")
	r = b.owner.run(t, runTool, "", "add", "--name", "postmark.send", "--recovery", "probe", "--probe-url", "https://pm.example/{key}",
		"--settle-window", "2m", "--probe-retention", "720h")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "recovery: probe https://pm.example/{key} (settle window 2m0s, retention 720h0m0s)")

	r = b.app.run(t, runTool, "", "list")
	require.NoError(t, r.err, r.stderr)
	require.Regexp(t, `postmark\.send +probe .*\(settle window 2m0s, retention 720h0m0s\)`, r.stdout)
	require.Regexp(t, `stripe\.charge +dedupe .*dedupe by key \(window 24h0m0s\)`, r.stdout)
	r = b.app.run(t, runTool, "", "list", "--json")
	require.NoError(t, r.err, r.stderr)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 2)
	require.Equal(t, "720h0m0s", got[0]["probe_retention"])
	require.Nil(t, got[0]["dedupe_window"])
	require.Equal(t, "24h0m0s", got[1]["dedupe_window"])
	require.Nil(t, got[1]["probe_retention"])

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"add", "--name", "crm.set", "--dedupe-window", "24h"}, "tool add: --dedupe-window applies only with recovery dedupe"},
		{[]string{"add", "--name", "crm.set", "--recovery", "dedupe", "--probe-retention", "24h"}, "tool add: --probe-retention applies only with recovery probe"},
		{[]string{"add", "--name", "crm.set", "--recovery", "dedupe", "--dedupe-window", "-1h"}, "tool add: --dedupe-window must be at least 1s (leave it out when the outside system honours a key for ever)"},
	} {
		r := b.owner.run(t, runTool, "", tc.args...)
		requireOneLine(t, r.err)
		require.Equal(t, tc.msg, r.err.Error(), tc.args)
	}
	policies, err := toolcall.Policies(b.app.ctx, b.owner.pool)
	require.NoError(t, err)
	require.Len(t, policies, 2, "a refused registration registers nothing")
}
