package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// TestAuditMaildirRecognisesTestSendsAndNotifications: a campaign's test
// send to a reviewer and an email notification go through the campaign's
// maildir provider beside its targets' messages. `audit --maildir` lists
// neither as a stray ("no attempt in the ledger has this effect"): it
// names them as what they are, and the audit holds.
func TestAuditMaildirRecognisesTestSendsAndNotifications(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	ctx := context.Background()
	f := audittest.NewFixture(t, b.pool)
	dir := t.TempDir()
	p, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	defer p.Close()
	reg, err := provider.NewRegistry(p)
	require.NoError(t, err)

	// A draft of two targets, and a test send of its first to the approver.
	res, err := f.Service.Create(ctx, f.Proposer, approval.CreateParams{
		Name: "Autumn", Provider: "outbox",
		Payload: plan.Payload{From: "billing@example.com", Subject: "Invoice", Text: "Your invoice is due."},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\nann@example.com\nbob@example.com\n")},
	})
	require.NoError(t, err)
	c := audittest.Campaign{ID: res.Campaign.ID, Name: "Autumn"}
	sender, err := approval.NewTestSender(approval.TestSendConfig{DB: b.pool, Providers: reg})
	require.NoError(t, err)
	sent, err := sender.Send(ctx, f.Proposer, approval.TestSendParams{CampaignID: c.ID, To: []string{f.Approver.Email}})
	require.NoError(t, err)
	require.Equal(t, provider.OutcomeDone, sent.Deliveries[0].Outcome)

	// Submitted, approved and started; the submission's notification is
	// mailed to a fixed address through the same maildir.
	f.Approve(&c)
	n, err := notify.ParseFlag("team=mailto:ops@example.com?provider=outbox&users=false", notify.ParseOptions{Providers: reg})
	require.NoError(t, err)
	notifiers, err := notify.NewRegistry(n)
	require.NoError(t, err)
	svc, err := notify.NewService(notify.Config{DB: b.pool, Notifiers: notifiers})
	require.NoError(t, err)
	var submitted int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM campaign_event WHERE campaign_id = $1 AND action = 'submit'`, c.ID).Scan(&submitted))
	recorded, err := svc.Expand(ctx, notify.Source{Event: submitted}, func(context.Context, pgx.Tx, []notify.Recorded) error { return nil })
	require.NoError(t, err)
	require.Len(t, recorded, 1)
	_, err = svc.Deliver(ctx, recorded[0].ID, 1, true)
	require.NoError(t, err)

	// The targets are sent, each once.
	for _, tg := range c.Targets {
		e := f.Claim(tg)
		raw, err := p.Send(ctx, provider.Request{Key: string(tg.Key), Target: tg.Address,
			Message: plan.Message{From: "billing@example.com", To: tg.Address, Subject: "Invoice", Text: "Your invoice is due."}})
		require.NoError(t, err)
		require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome)
		f.Settle(e, ledger.StateDone)
	}

	r := b.run(t, runAudit, "", c.ID, "--maildir", dir)
	require.NoError(t, r.err, r.stdout)
	require.NotContains(t, r.stdout, "strays", r.stdout)
	require.NotContains(t, r.stdout, "no attempt in the ledger has this effect", r.stdout)
	require.Contains(t, r.stdout, "\nrecognised (Onceplan's test sends and notifications, not target effects): 2\n", r.stdout)
	require.Contains(t, r.stdout, `a test send of campaign "Autumn" to `+f.Approver.Email, r.stdout)
	require.Contains(t, r.stdout, `a notification of campaign "Autumn" to ops@example.com`, r.stdout)
	require.True(t, strings.HasSuffix(r.stdout, "\n2/2 exactly once; holds\n"), r.stdout)

	r = b.run(t, runAudit, "", c.ID, "--maildir", dir, "--json")
	require.NoError(t, r.err, r.stdout)
	var got struct {
		Holds          bool `json:"holds"`
		Reconciliation struct {
			Strays     struct{ Count int } `json:"strays"`
			Recognised struct {
				Count int `json:"count"`
				Items []struct {
					Key     string   `json:"key"`
					Target  string   `json:"target"`
					State   string   `json:"state"`
					Files   int      `json:"maildir_files"`
					Sources []string `json:"sources"`
				} `json:"items"`
			} `json:"recognised"`
		} `json:"reconciliation"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.True(t, got.Holds)
	require.Zero(t, got.Reconciliation.Strays.Count)
	require.Equal(t, 2, got.Reconciliation.Recognised.Count)
	first := got.Reconciliation.Recognised.Items[0]
	require.Equal(t, sent.Deliveries[0].Key, first.Key)
	require.Equal(t, "test send", first.State)
	require.Equal(t, f.Approver.Email, first.Target)
	require.Equal(t, 1, first.Files)
	require.Len(t, first.Sources, 1)
	require.Contains(t, first.Sources[0], provider.MaildirFileName(first.Key, 0))
	require.Equal(t, "notification", got.Reconciliation.Recognised.Items[1].State)
}
