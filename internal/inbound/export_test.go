package inbound_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

func readExport(t *testing.T, name string) inbound.Export {
	t.Helper()
	ex, err := inbound.ReadExport(bytes.NewReader(readTestdata(t, name)), name)
	require.NoError(t, err)
	return ex
}

type verdict struct {
	event   string
	outcome ledger.Outcome
	line    int
}

func verdicts(ex inbound.Export) []verdict {
	var out []verdict
	for _, p := range ex.Proofs {
		out = append(out, verdict{p.Event, p.Outcome, p.Line})
	}
	return out
}

// TestReadExportDocumentedPayloads: each provider's documented example
// events prove what the table in export.go says — acceptance proposes
// delivered, a refusal before sending not delivered, the rest nothing —
// and each proof names the line its event starts on.
func TestReadExportDocumentedPayloads(t *testing.T) {
	t.Parallel()
	ses := readExport(t, "export_ses_firehose.jsonl")
	require.Equal(t, 5, ses.Events)
	require.Equal(t, 1, ses.Ignored) // Open
	require.Equal(t, []verdict{
		{"Send", ledger.Delivered, 1}, {"Delivery", ledger.Delivered, 2}, {"Reject", ledger.NotDelivered, 3},
		{"Bounce", ledger.Delivered, 5},
	}, verdicts(ses))
	d := ses.Proofs[1]
	require.Equal(t, inbound.SES, d.Kind)
	require.Equal(t, "recipient@example.com", d.Address)
	require.Equal(t, "<EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000>", d.MessageID)
	require.Equal(t, time.Date(2016, 10, 19, 23, 21, 4, 133e6, time.UTC), d.At)
	require.Equal(t, "SES Delivery, message id <EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000>, to recipient@example.com, at 2016-10-19 23:21:04 UTC (250 2.6.0 Message received) [export_ses_firehose.jsonl line 2]", d.Describe())
	require.Equal(t, "sender@example.com", ses.Proofs[2].Address) // a Reject names mail.destination

	// The SES bounce as SNS delivers it (the envelope's Message).
	sns := readExport(t, "ses_bounce.json")
	require.Equal(t, []verdict{{"Bounce", ledger.Delivered, 1}}, verdicts(sns))

	// SendGrid's example of every event: processed, deferred, delivered,
	// bounce and spamreport prove it accepted the message; dropped that it
	// never sent it; open, click and unsubscribe prove nothing here.
	sg := readExport(t, "sendgrid_events.json")
	require.Equal(t, 9, sg.Events)
	require.Equal(t, 3, sg.Ignored)
	require.Equal(t, []verdict{
		{"processed", ledger.Delivered, 2}, {"deferred", ledger.Delivered, 11}, {"delivered", ledger.Delivered, 22},
		{"bounce", ledger.Delivered, 54}, {"dropped", ledger.NotDelivered, 66}, {"spamreport", ledger.Delivered, 77},
	}, verdicts(sg))
	require.Equal(t, "<14c5d75ce93.dfd.64b469@ismtpd-555>", sg.Proofs[0].MessageID)

	mg := readExport(t, "export_mailgun_events_page.json")
	require.Equal(t, 3, mg.Events)
	require.Equal(t, []verdict{{"accepted", ledger.Delivered, 3}, {"delivered", ledger.Delivered, 24}}, verdicts(mg))
	require.Equal(t, "<20260203192638.000be97f99f8cea1@sample.mailgun.com>", mg.Proofs[0].MessageID)
	require.Equal(t, "recipient@sample.mailgun.com", mg.Proofs[1].Address)

	// A permanent failure because the address is on Mailgun's suppression
	// list: Mailgun never sent it.
	mgf := readExport(t, "mailgun_failed_permanent.json")
	require.Equal(t, []verdict{{"failed", ledger.NotDelivered, 1}}, verdicts(mgf))

	pm := readExport(t, "export_postmark_delivery.json")
	require.Equal(t, []verdict{{"Delivery", ledger.Delivered, 1}}, verdicts(pm))
	require.Equal(t, "recipeint@example.com", pm.Proofs[0].Address)
	require.Equal(t, "a94dfe84-8ab9-43cf-8a1c-ac234c296e25", pm.Proofs[0].ProviderMessageID)
	pb := readExport(t, "postmark_bounce.json")
	require.Equal(t, []verdict{{"Bounce", ledger.Delivered, 1}}, verdicts(pb))
	pc := readExport(t, "postmark_spam_complaint.json")
	require.Equal(t, []verdict{{"SpamComplaint", ledger.Delivered, 1}}, verdicts(pc))
}

// TestReadExportRefusesNamingTheLine: a file with anything that is not an
// event of a provider Onceplan reads is refused whole, in one sentence
// naming the file's line.
func TestReadExportRefusesNamingTheLine(t *testing.T) {
	t.Parallel()
	good := `{"event":"delivered","email":"a@example.com","timestamp":1513299569}`
	for _, tc := range []struct {
		name, body, says string
	}{
		{"syntax", good + "\n" + good + "\n{\"event\": \"delivered\",, }\n", "events.json line 3: this is not valid JSON"},
		{"cut", good + "\n{\"event\": \"delivered\"", "events.json line 2: the JSON value starting here is cut short"},
		{"stranger", good + "\n\n{\"hello\": \"world\"}\n", "events.json line 3: this is not an SES, SendGrid, Mailgun or Postmark event"},
		{"in an array", "[\n" + good + ",\n  42\n]", "events.json line 3: expected an event object in the array"},
		{"no recipient", `{"eventType":"Send","mail":{"messageId":"x","destination":[]}}`, "events.json line 1: this SES event names no recipient"},
		{"empty", "\n \n", "events.json: the file holds no events"},
		{"no address", `{"event":"delivered","email":" ","timestamp":1513299569}`, "events.json line 1: this SendGrid delivered event has no recipient address"},
	} {
		_, err := inbound.ReadExport(strings.NewReader(tc.body), "events.json")
		require.Error(t, err, tc.name)
		var ee *inbound.ExportError
		require.True(t, errors.As(err, &ee), tc.name)
		require.Contains(t, err.Error(), tc.says, tc.name)
		require.NotContains(t, err.Error(), "\n", tc.name)
	}
}

// TestPropose: a proof is about an unknown target when it names its
// effect (our Message-ID, its effect id, its receipt); one naming another
// effect never is, even to the same address; one naming no Onceplan id
// is only by its address and only after the first attempt; delivered
// wins over not delivered; a target no proof is about gets no proposal.
func TestPropose(t *testing.T) {
	t.Parallel()
	key := func(i int) string { return fmt.Sprintf("v1:%064x", i) }
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	u := func(i int) inbound.Unknown {
		return inbound.Unknown{Ordinal: i, Target: fmt.Sprintf("u%d@example.com", i), Key: key(i), FirstAt: first}
	}
	unknowns := []inbound.Unknown{u(1), u(2), u(3), u(4), u(5), u(6), u(7)}
	unknowns[6].Epoch = 1
	at := first.Add(time.Minute)
	proofs := []inbound.Proof{
		{Event: "Delivery", Outcome: ledger.Delivered, Address: "u1@example.com", MessageID: provider.MessageID(key(1), 0), At: at},
		{Event: "dropped", Outcome: ledger.NotDelivered, Address: "U2@Example.com", EffectID: provider.EffectID(key(2), 0), At: at},
		// 3: another effect's Message-ID to the same address: not this one.
		{Event: "Delivery", Outcome: ledger.Delivered, Address: "u3@example.com", MessageID: provider.MessageID(key(99), 0), At: at},
		// 4: no Onceplan id, same address, after the first attempt.
		{Event: "processed", Outcome: ledger.Delivered, Address: "u4@example.com", At: at},
		// 5: no Onceplan id, same address, a day before: an older message.
		{Event: "processed", Outcome: ledger.Delivered, Address: "u5@example.com", At: first.Add(-24 * time.Hour)},
		// 6: both: delivered wins.
		{Event: "dropped", Outcome: ledger.NotDelivered, Address: "u6@example.com", MessageID: provider.MessageID(key(6), 0), At: at},
		{Event: "processed", Outcome: ledger.Delivered, Address: "u6@example.com", MessageID: provider.MessageID(key(6), 0), At: at.Add(time.Second)},
		// 7 is at epoch 1: the epoch-0 message is an earlier effect.
		{Event: "Delivery", Outcome: ledger.Delivered, Address: "u7@example.com", MessageID: provider.MessageID(key(7), 0), At: at},
	}
	got := inbound.Propose(unknowns, proofs)
	type row struct {
		ordinal   int
		outcome   ledger.Outcome
		event     string
		byAddress bool
		others    int
	}
	var rows []row
	for _, p := range got {
		rows = append(rows, row{p.Ordinal, p.Outcome, p.Proof.Event, p.ByAddress, p.Others})
	}
	require.Equal(t, []row{
		{1, ledger.Delivered, "Delivery", false, 0},
		{2, ledger.NotDelivered, "dropped", false, 0},
		{4, ledger.Delivered, "processed", true, 0},
		{6, ledger.Delivered, "processed", false, 1},
	}, rows)
	require.True(t, strings.HasPrefix(got[0].Reason(), "evidence: Delivery, message id "+provider.MessageID(key(1), 0)), got[0].Reason())
	require.Contains(t, got[2].Reason(), "matched by the recipient address and time alone")
}

// FuzzReadExport: whatever a file holds, ReadExport returns proofs or an
// *ExportError naming a line of the file, in one line, and never panics.
func FuzzReadExport(f *testing.F) {
	for _, name := range []string{"export_ses_firehose.jsonl", "sendgrid_events.json", "export_mailgun_events_page.json",
		"export_postmark_delivery.json", "ses_bounce.json", "mailgun_failed_permanent.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"items": [{"event": "rejected", "recipient": "a@b"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ex, err := inbound.ReadExport(bytes.NewReader(b), "f.json")
		if err != nil {
			var ee *inbound.ExportError
			require.True(t, errors.As(err, &ee), err)
			require.NotContains(t, err.Error(), "\n")
			require.LessOrEqual(t, ee.Line, 1+bytes.Count(b, []byte{'\n'}))
			return
		}
		require.Positive(t, ex.Events)
		for _, p := range ex.Proofs {
			require.Positive(t, p.Line)
			require.Contains(t, []ledger.Outcome{ledger.Delivered, ledger.NotDelivered}, p.Outcome)
		}
	})
}
