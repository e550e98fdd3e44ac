package inbound_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// bundle is a database with one campaign whose target ann@example.com
// has a done effect (receipt "pm-receipt-0001-abcdef").
type bundle struct {
	ctx        context.Context
	app, admin *pgxpool.Pool
	campaignID string
	key        string
	effectID   int64
}

func setup(t *testing.T) bundle {
	t.Helper()
	ctx := t.Context()
	urls := pgtest.Database(t)
	admin, app := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	client, err := river.NewClient(riverpgxv5.New(app), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(app, jobs.NewEnqueuer(client))
	email := "pat@example.com"
	proposer := auth.Actor{UserID: pgtest.User(t, admin, pgtest.UserOpts{Email: email, Roles: []string{"proposer"}}),
		Email: email, Roles: []auth.Role{auth.RoleProposer}}
	created, err := svc.Create(ctx, proposer, approval.CreateParams{
		Name: "bounces", Provider: "outbox",
		Payload: plan.Payload{From: "a@example.com", Subject: "Hello", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\nAnn@Example.com\nbob@example.com\n")},
	})
	require.NoError(t, err)
	b := bundle{ctx: ctx, app: app, admin: admin, campaignID: created.Campaign.ID}
	require.NoError(t, admin.QueryRow(ctx, `SELECT key FROM target WHERE target = 'ann@example.com'`).Scan(&b.key))
	// The sent effect the bounces name, written as the superuser: outside
	// any plan, the server writes only a tool call's (migration 0037).
	store := ledger.NewStore(admin)
	c, err := store.Claim(ctx, ledger.ClaimParams{Key: ledger.Key(b.key), Owner: "w1"})
	require.NoError(t, err)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte("200 ok"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "pm-receipt-0001-abcdef"})
	require.NoError(t, err)
	b.effectID = c.Effect.ID
	return b
}

func (b bundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.admin.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// snsBody wraps an SES notification in an (unsigned) SNS envelope.
func snsBody(t *testing.T, sesJSON string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]string{
		"Type": "Notification", "MessageId": "11111111-2222-3333-4444-" + strings.Repeat("5", 12),
		"TopicArn": "arn:aws:sns:eu-west-1:123456789012:bounces", "Message": sesJSON, "Timestamp": "2026-12-01T10:00:00.000Z",
	})
	require.NoError(t, err)
	return b
}

// TestRecordTiesAndSuppresses: an SES hard bounce naming our Message-ID
// for ann's effect is stored raw, tied to that effect (its key, epoch and
// campaign), and suppresses ann's address pointing at the event and the
// campaign; the target page's EventsAbout lists it.
func TestRecordTiesAndSuppresses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgID := provider.MessageID(b.key, 0)
	ses := `{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General",
		"bouncedRecipients":[{"emailAddress":"ANN@example.com","diagnosticCode":"smtp; 550 5.1.1 user unknown"}],
		"timestamp":"2026-12-01T09:59:00.000Z"},
		"mail":{"messageId":"0102-ses-id","headers":[{"name":"Message-ID","value":"` + msgID + `"}],
		"commonHeaders":{"messageId":"<rewritten@email.amazonses.com>"}}}`
	body := snsBody(t, ses)
	events, err := inbound.Parse(inbound.SES, body)
	require.NoError(t, err)
	res, err := inbound.Record(b.ctx, b.app, events)
	require.NoError(t, err)
	require.Equal(t, inbound.Result{Recorded: 1, Tied: 1, Suppressed: 1}, res)

	got, err := inbound.EventsAbout(b.ctx, b.app, b.key, "ann@example.com")
	require.NoError(t, err)
	require.Len(t, got, 1)
	e := got[0]
	require.Equal(t, inbound.HardBounce, e.Type)
	require.Equal(t, "ann@example.com", e.Address, "normalised like a target")
	require.Equal(t, msgID, e.MessageID)
	require.Equal(t, b.effectID, e.EffectID)
	require.Equal(t, 0, e.Epoch)
	require.Equal(t, b.campaignID, e.CampaignID)
	raw, err := inbound.Raw(b.ctx, b.app, e.ID)
	require.NoError(t, err)
	require.Equal(t, body, raw, "stored raw, byte for byte")

	s, found, err := suppression.Lookup(b.ctx, b.app, "ann@example.com")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, suppression.HardBounce, s.Reason)
	require.Equal(t, suppression.FromProviderEvent, s.Source)
	require.Equal(t, e.ID, s.EventID)
	require.Equal(t, b.campaignID, s.CampaignID)
}

// TestRecordOnce: a provider re-delivering the same event (same kind and
// event id) records it once and suppresses once; the same event id from
// another kind is another event.
func TestRecordOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"e-1","type":"complaint","address":"bob@example.com"}`))
	require.NoError(t, err)
	for i := range 3 {
		res, err := inbound.Record(b.ctx, b.app, events)
		require.NoError(t, err)
		if i == 0 {
			require.Equal(t, inbound.Result{Recorded: 1, Suppressed: 1}, res)
		} else {
			require.Equal(t, inbound.Result{Duplicate: 1}, res)
		}
	}
	require.Equal(t, 1, b.count(t, "inbound_event"))
	require.Equal(t, 1, b.count(t, "suppression"))

	other, err := inbound.Parse(inbound.SendGrid, []byte(`[{"event":"spamreport","email":"bob@example.com","sg_event_id":"e-1"}]`))
	require.NoError(t, err)
	res, err := inbound.Record(b.ctx, b.app, other)
	require.NoError(t, err)
	require.Equal(t, inbound.Result{Recorded: 1}, res, "recorded; the address was suppressed already")
	require.Equal(t, 1, b.count(t, "suppression"))
}

// TestRecordSoftBounceTiedByReceipt: a Postmark soft bounce names
// Postmark's own message id, which is the effect's receipt: tied, counted
// on the target page, and the address is not suppressed.
func TestRecordSoftBounceTiedByReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Postmark, []byte(`{"RecordType":"Bounce","ID":7,"Type":"SoftBounce",
		"MessageID":"pm-receipt-0001-abcdef","Email":"ann@example.com","Details":"mailbox full","BouncedAt":"2026-12-01T10:00:00Z"}`))
	require.NoError(t, err)
	res, err := inbound.Record(b.ctx, b.app, events)
	require.NoError(t, err)
	require.Equal(t, inbound.Result{Recorded: 1, Tied: 1}, res)
	got, err := inbound.EventsAbout(b.ctx, b.app, b.key, "ann@example.com")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, inbound.SoftBounce, got[0].Type)
	_, found, err := suppression.Lookup(b.ctx, b.app, "ann@example.com")
	require.NoError(t, err)
	require.False(t, found)
}

// TestRecordUntied: an event for an address no list holds, or naming a
// Message-ID that is not ours, is stored untied; a hard bounce still
// suppresses (the address does not take mail, whoever sent to it).
func TestRecordUntied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"x","type":"hard_bounce","address":"ann@example.com","message_id":"<other@example.com>"}`))
	require.NoError(t, err)
	res, err := inbound.Record(b.ctx, b.app, events)
	require.NoError(t, err)
	require.Equal(t, inbound.Result{Recorded: 1, Suppressed: 1}, res)
	// The target page lists it for the address, tied to no message.
	got, err := inbound.EventsAbout(b.ctx, b.app, b.key, "ann@example.com")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Empty(t, got[0].Key)
	require.Zero(t, got[0].EffectID)
	got, err = inbound.EventsAbout(b.ctx, b.app, b.key, "bob@example.com")
	require.NoError(t, err)
	require.Empty(t, got, "nothing of ann's on another address's page")
	s, found, err := suppression.Lookup(b.ctx, b.app, "ann@example.com")
	require.NoError(t, err)
	require.True(t, found)
	require.Empty(t, s.CampaignID)
}

// TestRecordUnparsableAddress: an address that is not one is kept as the
// provider wrote it (less any NUL, which PostgreSQL text cannot hold)
// and suppresses nothing.
func TestRecordUnparsableAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"x\u0000","type":"hard_bounce","address":"not an\u0000 address"}`))
	require.NoError(t, err)
	res, err := inbound.Record(b.ctx, b.app, events)
	require.NoError(t, err)
	require.Equal(t, inbound.Result{Recorded: 1}, res)
	require.Zero(t, b.count(t, "suppression"))
}

// TestInboundEventWriteOnce: the application role may insert and read
// provider events, never change or delete one (plain SQL, as the role the
// server connects as); the owner's triggers refuse it too.
func TestInboundEventWriteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"x","type":"soft_bounce","address":"ann@example.com"}`))
	require.NoError(t, err)
	_, err = inbound.Record(b.ctx, b.app, events)
	require.NoError(t, err)
	for _, stmt := range []string{
		`UPDATE inbound_event SET type = 'hard_bounce'`,
		`UPDATE inbound_event SET raw = '\x00'`,
		`DELETE FROM inbound_event`,
		`TRUNCATE inbound_event`,
	} {
		_, err := b.app.Exec(b.ctx, stmt)
		require.Error(t, err, "as %s: %s", "onceplan_app", stmt)
		_, err = b.admin.Exec(b.ctx, stmt+` /* superuser */`)
		require.Error(t, err, "the trigger refuses even the superuser: %s", stmt)
	}
	var typ string
	require.NoError(t, b.admin.QueryRow(b.ctx, `SELECT type FROM inbound_event`).Scan(&typ))
	require.Equal(t, "soft_bounce", typ)
}

// TestRecordConcurrentDeliveries: a provider delivering one event on many
// connections at once (SNS and SendGrid retry in parallel) still records
// it once, with one suppression.
func TestRecordConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := inbound.Parse(inbound.Generic, []byte(`{"id":"c-1","type":"hard_bounce","address":"bob@example.com"}`))
	require.NoError(t, err)
	const n = 10
	results := make(chan inbound.Result, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			res, err := inbound.Record(b.ctx, b.app, events)
			results <- res
			errs <- err
		}()
	}
	var total inbound.Result
	for range n {
		require.NoError(t, await.Recv(t, errs, time.Minute, "a concurrent delivery recorded"))
		r := await.Recv(t, results, time.Minute, "a concurrent delivery's result")
		total.Recorded += r.Recorded
		total.Duplicate += r.Duplicate
		total.Suppressed += r.Suppressed
	}
	require.Equal(t, inbound.Result{Recorded: 1, Duplicate: n - 1, Suppressed: 1}, total)
	require.Equal(t, 1, b.count(t, "inbound_event"))
	require.Equal(t, 1, b.count(t, "suppression"))
}
