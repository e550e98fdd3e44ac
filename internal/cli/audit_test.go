package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// auditCampaign makes a campaign of n targets on the bundle's database and
// settles the first ones as states says.
func auditCampaign(t *testing.T, f *audittest.Fixture, name string, n int, states ...ledger.State) audittest.Campaign {
	t.Helper()
	c := f.Campaign(name, audittest.Addresses(n))
	for i, s := range states {
		f.Attempt(c.Targets[i], s)
	}
	return c
}

func approvalDraft(name string) approval.CreateParams {
	return approval.CreateParams{Name: name, Provider: "outbox", Payload: plan.Payload{From: "a@example.com", Subject: "S", Text: "T"}}
}

func requireExit(t *testing.T, err error, code int) {
	t.Helper()
	got, ok := ExitCode(err)
	require.True(t, ok, "want exit status %d, got %v", code, err)
	require.Equal(t, code, got)
}

func TestAuditExitCodes(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	done := auditCampaign(t, f, "Spring", 2, ledger.StateDone, ledger.StateDone)
	auditCampaign(t, f, "Summer", 4, ledger.StateDone, ledger.StateUnknown, ledger.StateFailed)

	r := b.run(t, runAudit, "", done.ID)
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^campaign +Spring \(`+done.ID+`\)$`, r.stdout)
	require.Regexp(t, `(?m)^exactly once +2$`, r.stdout)
	require.Contains(t, r.stdout, "ledger only")
	require.NotContains(t, r.stdout, "why it does not hold")
	require.True(t, strings.HasSuffix(r.stdout, "\n2/2 exactly once; holds\n"), r.stdout)

	// By name, with the flags after the campaign.
	r = b.run(t, runAudit, "", "Summer")
	requireExit(t, r.err, 1)
	require.Regexp(t, `(?m)^missing +1  \(no effect of their own at the current epoch\)$`, r.stdout)
	require.Regexp(t, `(?m)^plan intact +yes: its 4 frozen rows hash to the approved [0-9a-f]{12}…, every key is its address's, 1 of 1 approvals$`, r.stdout)
	require.Contains(t, r.stdout, "why it does not hold:\n  - 1 target has no effect of its own at its current epoch: not started yet")
	require.Regexp(t, `(?m)^in doubt +1  \(0 pending, 1 unknown\)$`, r.stdout)
	require.Regexp(t, `(?m)^failed +1  \(0 refused for good, 0 given up after their tries, 0 never reached the provider, 1 to be sent again\)$`, r.stdout)
	require.True(t, strings.HasSuffix(r.stdout, "\n1/4 exactly once; does not hold: 1 missing, 1 in doubt, 1 failed, to be sent again\n"), r.stdout)
	require.Empty(t, r.stderr)
}

func TestAuditJSON(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	c := auditCampaign(t, f, "JSON", 3, ledger.StateDone, ledger.StatePending)

	r := b.run(t, runAudit, "", c.ID, "--json")
	requireExit(t, r.err, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	for name, want := range map[string]any{
		"approved": 3.0, "exactly_once": 1.0, "missing": 1.0, "in_doubt": 1.0, "failed": 0.0, "stranded": 0.0,
		"revoked": 0.0, "duplicates": 0.0, "holds": false, "pending": 1.0, "unknown": 0.0,
		"campaign_id": c.ID, "plan_id": float64(c.PlanID), "campaign": "JSON", "evidence": []any{},
	} {
		require.Equal(t, want, got[name], name)
	}
	require.NotContains(t, got, "reconciliation")
}

func TestAuditMaildir(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	dir := t.TempDir()
	p, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	defer p.Close()
	c := auditCampaign(t, f, "Maildir", 2, ledger.StateDone, ledger.StateDone)
	for _, tg := range c.Targets {
		raw, err := p.Send(context.Background(), provider.Request{Key: string(tg.Key), Target: tg.Address,
			Message: plan.Message{From: "billing@example.com", To: tg.Address, Subject: "Hi", Text: "Hello"}})
		require.NoError(t, err)
		require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome)
	}

	// The evidence agrees: it holds, and --probe agrees too.
	r := b.run(t, runAudit, "", c.ID, "--maildir", dir)
	require.NoError(t, r.err, r.stdout)
	require.Regexp(t, `(?m)^evidence +maildir$`, r.stdout)
	r = b.run(t, runAudit, "", c.ID, "--probe", "--provider", "outbox=maildir://"+dir, "--json")
	require.NoError(t, r.err, r.stdout)
	require.Contains(t, r.stdout, `"probe": {`)

	// A second copy of the first message: a duplicate.
	name := provider.MaildirFileName(string(c.Targets[0].Key), 0)
	body, err := os.ReadFile(filepath.Join(dir, "new", name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cur", "copy:2,S"), body, 0o644))

	r = b.run(t, runAudit, "", c.ID, "--maildir", dir)
	requireExit(t, r.err, 1)
	require.Contains(t, r.stdout, "\nduplicates: 1\n")
	require.Contains(t, r.stdout, filepath.Join(dir, "cur", "copy:2,S"))
	require.True(t, strings.HasSuffix(r.stdout, "\n2/2 exactly once; does not hold: 1 duplicated\n"), r.stdout)

	r = b.run(t, runAudit, "", c.ID, "--maildir", dir, "--json")
	requireExit(t, r.err, 1)
	var got struct {
		Duplicates     int      `json:"duplicates"`
		Holds          bool     `json:"holds"`
		Evidence       []string `json:"evidence"`
		Reconciliation struct {
			Duplicates struct {
				Count int `json:"count"`
				Items []struct {
					Key     string   `json:"key"`
					Files   int      `json:"maildir_files"`
					Sources []string `json:"sources"`
				} `json:"items"`
			} `json:"duplicates"`
		} `json:"reconciliation"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Equal(t, 1, got.Duplicates)
	require.False(t, got.Holds)
	require.Equal(t, []string{"maildir"}, got.Evidence)
	require.Equal(t, 1, got.Reconciliation.Duplicates.Count)
	require.Equal(t, string(c.Targets[0].Key), got.Reconciliation.Duplicates.Items[0].Key)
	require.Equal(t, 2, got.Reconciliation.Duplicates.Items[0].Files)
}

// TestAuditProbeCountsPostmarkDuplicates: `audit --probe` against a
// Postmark that holds two messages with one target's effect id (its
// search answers TotalCount 2) reports one duplicate and does not hold.
func TestAuditProbeCountsPostmarkDuplicates(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	p, err := provider.Parse("outbox", pm.URL())
	require.NoError(t, err)
	defer p.Close()
	c := auditCampaign(t, f, "Postmark", 2, ledger.StateDone, ledger.StateDone)
	for i, tg := range c.Targets {
		if i == 0 {
			pm.AcceptTwice(1)
		}
		raw, err := p.Send(context.Background(), provider.Request{Key: string(tg.Key), Target: tg.Address,
			Message: plan.Message{From: "billing@example.com", To: tg.Address, Subject: "Hi", Text: "Hello"}})
		require.NoError(t, err)
		require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome)
	}
	require.Equal(t, 2, pm.Effects()[provider.EffectID(string(c.Targets[0].Key), 0)], "the stand-in holds the duplicate")

	r := b.run(t, runAudit, "", c.ID, "--probe", "--provider", "outbox="+pm.URL(), "--json")
	requireExit(t, r.err, 1)
	var got struct {
		Duplicates int      `json:"duplicates"`
		Holds      bool     `json:"holds"`
		Reasons    []string `json:"reasons"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Equal(t, 1, got.Duplicates, r.stdout)
	require.False(t, got.Holds)
	require.Contains(t, got.Reasons, "1 target has more than one effect in the provider's evidence: see the reconciliation's duplicates.")

	// The human report names the target and what the probe found.
	r = b.run(t, runAudit, "", c.ID, "--probe", "--provider", "outbox="+pm.URL())
	requireExit(t, r.err, 1)
	require.Contains(t, r.stdout, "\nduplicates: 1\n")
	require.Regexp(t, `(?m)^  person1@example\.com +v1:[0-9a-f]{64} +0 +done +probe found 2 messages +-$`, r.stdout)
	require.Contains(t, r.stdout, "    person1@example.com: probe outbox: 2 messages with this effect id\n")
	require.True(t, strings.HasSuffix(r.stdout, "\n2/2 exactly once; does not hold: 1 duplicated\n"), r.stdout)
}

func TestAuditProviderLog(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	c := auditCampaign(t, f, "Log", 1, ledger.StateDone)
	dir := t.TempDir()
	good := "key,recipient,timestamp\n" + string(c.Targets[0].Key) + ":0,person1@example.com,2026-03-01T10:00:00Z\n"
	path := filepath.Join(dir, "log.csv")
	require.NoError(t, os.WriteFile(path, []byte(good), 0o644))

	r := b.run(t, runAudit, "", c.ID, "--provider-log", path)
	require.NoError(t, r.err, r.stdout)
	r = b.run(t, runAudit, good, c.ID, "--provider-log", "-")
	require.NoError(t, r.err, r.stdout)

	require.NoError(t, os.WriteFile(path, []byte(good+"x,person2@example.com,soon\n"), 0o644))
	r = b.run(t, runAudit, "", c.ID, "--provider-log", path)
	requireOneLine(t, r.err)
	_, isExit := ExitCode(r.err)
	require.False(t, isExit)
	require.Equal(t, 2, Status(r.err), "an audit that could not tell exits 2, not 1 (does not hold)")
	require.Equal(t, `audit: provider log `+path+` line 3: the timestamp "soon" is not RFC 3339 (2006-01-02T15:04:05Z), "2006-01-02 15:04:05" or Unix seconds`, r.err.Error())
	require.Empty(t, r.stdout)
}

func TestAuditExport(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	c := auditCampaign(t, f, "Export", 3, ledger.StateDone, ledger.StateFailed)

	r := b.run(t, runAudit, "", c.ID, "--export", "csv")
	requireExit(t, r.err, 1)
	recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 4)
	require.Equal(t, []string{"person1@example.com", "done"}, []string{recs[1][1], recs[1][4]})
	require.Equal(t, []string{"person2@example.com", "failed"}, []string{recs[2][1], recs[2][4]})
	require.Equal(t, []string{"person3@example.com", "not_started"}, []string{recs[3][1], recs[3][4]})
	require.Contains(t, r.stderr, "1/3 exactly once; does not hold: 1 missing")

	r = b.run(t, runAudit, "", c.ID, "--export", "json", "--json")
	requireExit(t, r.err, 1)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, 3)
	var metric map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stderr), &metric))
	require.Equal(t, 3.0, metric["approved"])
}

func TestAuditRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	f := audittest.NewFixture(t, b.pool)
	auditCampaign(t, f, "Twin", 1)
	auditCampaign(t, f, "Twin", 1)
	draft, err := f.Service.Create(context.Background(), f.Proposer, approvalDraft("Draft"))
	require.NoError(t, err)

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--json"}, "audit: name the campaign: onceplan audit CAMPAIGN (its id or its name)"},
		{[]string{"Nope"}, `audit: not found: there is no campaign with the id or name "Nope"`},
		{[]string{"Twin"}, `audit: ambiguous campaign name: more than one campaign is named "Twin"`},
		{[]string{"Draft"}, `audit: campaign "Draft" (` + draft.Campaign.ID + `) has not been approved yet, so there is nothing to audit`},
		{[]string{"Twin", "Twin"}, `audit: unexpected argument "Twin": give one campaign`},
		{[]string{"Twin", "--export", "xml"}, `audit: --export: export format "xml" is not csv or json`},
		{[]string{"Twin", "--maildir", "/nonexistent/maildir"}, "audit: maildir /nonexistent/maildir: no such file or directory"},
		{[]string{"Twin", "--provider-log", "/nonexistent/log.csv"}, "audit: --provider-log: open /nonexistent/log.csv: no such file or directory"},
		{[]string{"Twin", "--bogus"}, "audit: flag provided but not defined: -bogus (see `onceplan audit --help`)"},
	} {
		r := b.run(t, runAudit, "", tc.args...)
		requireOneLine(t, r.err)
		_, isExit := ExitCode(r.err)
		require.False(t, isExit, tc.args)
		require.Equal(t, 2, Status(r.err), "an audit that could not tell exits 2, not 1 (does not hold): %v", tc.args)
		require.Contains(t, r.err.Error(), tc.msg, tc.args)
		require.Empty(t, r.stdout, tc.args)
	}
}

func TestAuditHelp(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	r := b.run(t, runAudit, "", "--help")
	requireExit(t, r.err, 0)
	require.True(t, strings.HasPrefix(r.stdout, "Usage: onceplan audit CAMPAIGN [flags]\n"), r.stdout)
	for _, flag := range []string{"-json", "-maildir", "-provider-log", "-probe", "-export", "-database-url", "-data-dir"} {
		require.Regexp(t, `(?m)^  `+flag+`\b`, r.stdout, flag)
	}

	var out strings.Builder
	require.NoError(t, Run(context.Background(), []string{"help"}, Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}))
	require.Regexp(t, `(?m)^  audit +check that every approved target got exactly one effect`, out.String())
}
