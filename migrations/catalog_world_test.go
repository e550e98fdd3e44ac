package migrations_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// catalogWorld is a database written the way the server writes it: every
// table the application role may write holds rows its own code paths
// wrote, as that role, so that a refused write is refused on real rows
// (and their triggers fire), not only by a privilege check on an empty
// table. The owner registers what the command line registers (a bump
// policy, tool policies).
type catalogWorld struct {
	ctx   context.Context
	app   *pgxpool.Pool // onceplan_app: the server, and the attacker
	admin *pgxpool.Pool // the superuser: only to look
	owner *pgxpool.Pool // the schema's owner: what the command line does as it

	admins, proposer, approver, operator auth.Actor
	// The campaigns, by what became of them.
	completed, batched, archived, failed, draft, pending string
}

// newCatalogWorld writes the world: users signed in with tokens; a
// campaign through maildir run to the end by the workers (one of its
// addresses suppressed: a suppressed outcome), one through a Resend
// stand-in in batch calls paced through the database, one archived, one
// left a draft (with a test send) and one pending approval; a bump and a revoke; a
// suppression taken off by an admin; tool calls (one approved by a person
// and settled, one in flight); a bounce through a signed webhook;
// notifications delivered to a webhook notifier; a worker's heartbeat.
func newCatalogWorld(t *testing.T) *catalogWorld {
	t.Helper()
	urls := pgtest.Database(t)
	w := &catalogWorld{ctx: t.Context(), app: pgtest.NewPool(t, urls.App), admin: pgtest.NewPool(t, urls.Admin), owner: pgtest.NewPool(t, urls.Owner)}
	ctx := w.ctx

	// What the owner registers (onceplan policy add, onceplan tool add).
	require.NoError(t, ledger.NewStore(w.owner).RegisterPolicy(ctx, "monthly", "a new invoice every month", "cli:ops"))
	_, err := toolcall.Register(ctx, w.owner, toolcall.RegisterParams{Tool: "ticket.create", Recovery: toolcall.RecoveryDedupe,
		ApprovalRequired: true, Description: "opens a support ticket", RegisteredBy: "cli:ops"})
	require.NoError(t, err)

	// Users, as `onceplan user add` and an admin's page make them; each
	// signs in (one first with a wrong password) and the proposer makes
	// an API token, used once.
	user := func(email string, roles ...auth.Role) auth.Actor {
		u, err := auth.CreateUser(ctx, w.app, auth.NewUser{Email: email, Name: strings.Split(email, "@")[0], Roles: roles, Password: "correct horse battery"})
		require.NoError(t, err)
		require.NoError(t, auth.RecordCLIEvent(ctx, w.app, "cli:ops", "user_add", email, map[string]any{"roles": roles}))
		_, _, err = auth.Login(ctx, w.app, email, "correct horse battery", auth.LoginMeta{IP: "192.0.2.1", UserAgent: "test"})
		require.NoError(t, err)
		return u.Actor()
	}
	w.admins = user("ada@example.com", auth.RoleAdmin)
	w.proposer = user("pat@example.com", auth.RoleProposer)
	w.approver = user("amy@example.com", auth.RoleApprover)
	w.operator = user("oli@example.com", auth.RoleOperator)
	_, _, err = auth.Login(ctx, w.app, "amy@example.com", "wrong password!", auth.LoginMeta{IP: "192.0.2.2"})
	require.Error(t, err)
	secret, _, err := auth.CreateToken(ctx, w.app, w.proposer.Email, "ci", false)
	require.NoError(t, err)
	_, _, err = auth.TokenActor(ctx, w.app, secret)
	require.NoError(t, err)
	_, old, err := auth.CreateToken(ctx, w.app, w.proposer.Email, "laptop", true)
	require.NoError(t, err)
	_, err = auth.RevokeToken(ctx, w.app, old.ID)
	require.NoError(t, err)
	_, err = auth.SetRoles(ctx, w.app, "oli@example.com", []auth.Role{auth.RoleOperator, auth.RoleViewer})
	require.NoError(t, err)
	require.NoError(t, notify.SetPreferences(ctx, w.app, w.approver.UserID, map[notify.Event]bool{notify.EventCompleted: false}))

	// The workers, as serve runs them: a maildir provider, a Resend
	// stand-in taking batch calls at an account-wide pace (the shared
	// schedule in provider_pace), and a webhook notifier.
	resend := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(resend.Close)
	hook := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(hook.Close)
	receiver := sink.NewReceiver()
	t.Cleanup(receiver.Close)
	var ps []provider.Provider
	for _, item := range []string{
		"outbox=maildir://" + t.TempDir(),
		"hook=" + hook.URL(),
		"mail=resend://" + url.PathEscape(resend.APIKey()) + "@?endpoint=" + url.QueryEscape(resend.Endpoint()) + "&batch=2&rate=1000/s&rate_scope=account",
	} {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	reg.PaceThrough(w.app)
	const publicURL = "https://onceplan.example.com"
	nots, err := notify.ParseList([]string{"ops=" + receiver.URL()}, notify.ParseOptions{Providers: reg, PublicURL: publicURL})
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(testLogOut{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := jobs.NewRunner(jobs.Config{Pool: w.app, Providers: reg, Logger: logger, PublicURL: publicURL, Notifiers: nots,
		WorkersPerQueue: 1, MaintenanceInterval: 200 * time.Millisecond, PausedSnooze: 200 * time.Millisecond,
		NotifyWindow: time.Second, NotifyWait: 100 * time.Millisecond, NotifyRetryBase: 100 * time.Millisecond})
	require.NoError(t, err)
	svc := approval.NewService(w.app, runner.Enqueuer())
	svc.Announcer = runner.Announcer()
	require.NoError(t, runner.Start(ctx, svc))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, runner.Stop(sctx))
	}
	t.Cleanup(stop)

	create := func(name, providerName string, addrs []string, idem string) string {
		res, err := svc.Create(ctx, w.proposer, approval.CreateParams{
			Name: name, Provider: providerName,
			Payload:        plan.Payload{From: "news@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}"},
			Targets:        &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email,name\n" + strings.Join(addrs, ",x\n") + ",x\n")},
			IdempotencyKey: idem, RequestHash: strings.Repeat("a", 64),
		})
		require.NoError(t, err)
		return res.Campaign.ID
	}
	approve := func(id string) {
		sub, err := svc.Submit(ctx, w.proposer, id)
		require.NoError(t, err)
		_, err = svc.Approve(ctx, w.approver, id, sub.PlanHash)
		require.NoError(t, err)
	}
	run := func(id string) {
		approve(id)
		_, err := svc.Start(ctx, w.operator, id)
		require.NoError(t, err)
	}
	state := func(id string) approval.State {
		c, err := approval.GetCampaign(ctx, w.app, id)
		require.NoError(t, err)
		return c.State
	}

	// A suppression an admin takes off again, and one in force that the
	// maildir campaign meets at its claim.
	_, _, err = suppression.Add(ctx, w.app, suppression.AddParams{Address: "gone@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: w.admins.Email})
	require.NoError(t, err)
	_, err = suppression.Remove(ctx, w.app, "gone@example.com", w.admins.Email, "asked to be back")
	require.NoError(t, err)
	w.completed = create("maildir", "outbox", []string{"ann@example.com", "bob@example.com", "cy@example.com"}, "idem-1")
	require.NoError(t, err)
	_, err = svc.Edit(ctx, w.proposer, w.completed, plan.Payload{From: "news@example.com", Subject: "Hello again {{.name}}", Text: "Hi {{.name}}"})
	require.NoError(t, err)
	approve(w.completed)
	// Suppressed after the approval: the claim records a suppressed outcome.
	_, _, err = suppression.Add(ctx, w.app, suppression.AddParams{Address: "cy@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: w.admins.Email})
	require.NoError(t, err)
	_, err = svc.Start(ctx, w.operator, w.completed)
	require.NoError(t, err)
	// Eight targets on one worker: jobs of two, each one batch call.
	w.batched = create("batched", "mail", []string{"dee@example.com", "eve@example.com", "fay@example.com", "gus@example.com",
		"hap@example.com", "ike@example.com", "jon@example.com", "kay@example.com"}, "")
	run(w.batched)
	w.archived = create("archived", "outbox", []string{"hal@example.com"}, "")
	run(w.archived)
	// A webhook campaign whose one call is rejected for good and whose
	// other's answer is lost after the receiver applied it (unknown, for a
	// person): attention for the operators.
	hook.FailNext(1, 400, nil, `{"error":"no such account"}`)
	hook.ApplyThenFail(1, 500)
	w.failed = create("webhook", "hook", []string{"lee@example.com", "max@example.com"}, "")
	run(w.failed)
	for _, id := range []string{w.completed, w.batched, w.archived, w.failed} {
		await.Until(t, time.Minute, "campaign "+id+" to complete", func() bool { return state(id) == approval.StateCompleted })
	}
	w.pending = create("pending", "outbox", []string{"ivy@example.com"}, "")
	_, err = svc.Submit(ctx, w.proposer, w.pending)
	require.NoError(t, err)
	w.draft = create("draft", "outbox", []string{"jay@example.com", "kim@example.com"}, "")
	// A test send of the draft to its proposer, as the draft page makes it.
	tests, err := approval.NewTestSender(approval.TestSendConfig{DB: w.app, Providers: reg})
	require.NoError(t, err)
	_, err = tests.Send(ctx, w.proposer, approval.TestSendParams{CampaignID: w.draft, To: []string{w.proposer.Email}})
	require.NoError(t, err)

	_, err = ledger.NewStore(w.app).ArchiveCampaign(ctx, w.archived, "user:"+w.admins.Email)
	require.NoError(t, err)

	// A done target superseded (a bump: sent again at the next epoch), and
	// another revoked, as an operator does on the campaign's page.
	keyOf := func(campaign, addr string) string {
		_, k, err := plan.TargetKey(campaign, "email.send", addr)
		require.NoError(t, err)
		return string(k)
	}
	_, err = svc.SupersedeEffect(ctx, w.approver, w.completed, keyOf(w.completed, "ann@example.com"), "ann@example.com", "the first one had a typo")
	require.NoError(t, err)
	await.Until(t, time.Minute, "the superseded target to be sent again", func() bool { return state(w.completed) == approval.StateCompleted })
	_, err = svc.RevokeEffect(ctx, w.operator, w.completed, keyOf(w.completed, "bob@example.com"), "recalled")
	require.NoError(t, err)

	// Tool calls: one whose tool needs a person's approval (requested,
	// approved, performed, settled), one in flight holding its lease.
	calls := toolcall.NewService(w.app, toolcall.Options{Logger: logger})
	agent := w.proposer
	agent.Agent = true
	ticket := toolcall.BeginParams{Identity: ledger.KeyInput{Event: "order-1", Tool: "ticket.create",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "ann@example.com"}}, Args: []byte(`{"title":"refund"}`)}
	begun, err := calls.Begin(ctx, agent, ticket)
	require.NoError(t, err)
	require.Equal(t, toolcall.AwaitingApproval, begun.Outcome)
	_, err = calls.Decide(ctx, w.approver, begun.Status.ApprovalID, begun.Status.ArgsDigest, true, "")
	require.NoError(t, err)
	begun, err = calls.Begin(ctx, agent, ticket)
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, begun.Outcome)
	_, err = calls.Heartbeat(ctx, agent, begun.Status.Key, begun.Status.LeaseID, 10*time.Minute)
	require.NoError(t, err)
	_, err = calls.Settle(ctx, agent, toolcall.SettleParams{Key: begun.Status.Key, Lease: begun.Status.LeaseID, Raw: []byte(`{"id":"T-1"}`),
		Outcome: toolcall.Done, Receipt: "T-1"})
	require.NoError(t, err)
	inFlight, err := calls.Begin(ctx, agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: "order-2", Tool: "slack.post",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "bob@example.com"}}, Args: []byte(`{"text":"hi"}`),
		Lease: 30 * time.Minute}) // live through the attacks, however slow the machine
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, inFlight.Outcome)

	// Notifications delivered (submitted, approved, completed), then the
	// workers stop; the executor's heartbeat leaves the process's row.
	await.Until(t, time.Minute, "the webhook campaign's attention to be recorded", func() bool {
		var n int
		require.NoError(t, w.admin.QueryRow(ctx, `SELECT count(*) FROM notification_attention`).Scan(&n))
		return n > 0
	})
	await.Until(t, time.Minute, "every notification to be delivered", func() bool {
		var open int
		require.NoError(t, w.admin.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&open))
		return open == 0
	})
	stop()
	ex, err := executor.New(executor.Config{Pool: w.app, Providers: reg, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(ex.Close)
	require.NoError(t, ex.Heartbeat(ctx))

	// A bounce through a signed webhook (Mailgun: a one-time token).
	_, err = inbound.Accept(ctx, w.app, inbound.Signed{Kind: inbound.Mailgun, SignedAt: time.Now(), Token: "tok-1", Digest: strings.Repeat("b", 64)},
		[]inbound.Event{{Kind: inbound.Mailgun, ProviderEventID: "ev-1", Type: inbound.HardBounce, Address: "bob@example.com", Detail: "550 no such user", Raw: []byte(`{"event":"failed"}`)}},
		time.Now())
	require.NoError(t, err)
	return w
}

// testLogOut sends the workers' warnings to the test's log.
type testLogOut struct{ t *testing.T }

func (o testLogOut) Write(p []byte) (int, error) {
	o.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
