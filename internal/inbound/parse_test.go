package inbound_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// want is what a documented example must parse to.
type want struct {
	Type              inbound.Type
	Address           string
	MessageID         string
	ProviderMessageID string
	ProviderEventID   string
	At                time.Time
}

func got(e inbound.Event) want {
	return want{e.Type, e.Address, e.MessageID, e.ProviderMessageID, e.ProviderEventID, e.At}
}

// TestParseDocumentedExamples: each provider's own documented example
// payloads (testdata/README.md says where each comes from) parse to the
// events they describe — type, recipient, Message-ID, the provider's
// message id and event id — and the events we do not record (deliveries,
// opens, clicks, drops, unsubscribes) are left out.
func TestParseDocumentedExamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind inbound.Kind
		file string
		want []want
	}{
		{inbound.SES, "ses_bounce.json", []want{{
			inbound.HardBounce, "jane@example.com", "<custom-message-ID>",
			"00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000", "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
			time.Date(2016, 1, 27, 14, 59, 38, 237e6, time.UTC),
		}}},
		{inbound.SES, "ses_complaint.json", []want{{
			inbound.Complaint, "richard@example.com", "<custom-message-ID>",
			"000001378603177f-7a5433e7-8edb-42ae-af10-f0181f34d6ee-000000", "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf325",
			time.Date(2016, 1, 27, 14, 59, 38, 237e6, time.UTC),
		}}},
		{inbound.SES, "ses_subscription_confirmation.json", nil},
		{inbound.Postmark, "postmark_bounce.json", []want{{
			// The ID is larger than a float64 holds exactly: kept as text.
			inbound.HardBounce, "john@example.com", "", "883953f4-6105-42a2-a16a-77a8eac79483", "4323372036854775807",
			time.Date(2019, 11, 5, 16, 33, 54, 907025900, time.UTC),
		}}},
		{inbound.Postmark, "postmark_spam_complaint.json", []want{{
			inbound.Complaint, "john@example.com", "", "00000000-0000-0000-0000-000000000000", "42",
			time.Date(2019, 11, 5, 16, 33, 54, 907025900, time.UTC),
		}}},
		{inbound.SendGrid, "sendgrid_events.json", []want{
			{inbound.SoftBounce, "example@test.com", "<14c5d75ce93.dfd.64b469@ismtpd-555>", "sg_message_id", "sg_event_id", time.Unix(1513299569, 0).UTC()},
			{inbound.HardBounce, "example@test.com", "<14c5d75ce93.dfd.64b469@ismtpd-555>", "sg_message_id", "sg_event_id", time.Unix(1513299569, 0).UTC()},
			{inbound.Complaint, "example@test.com", "<14c5d75ce93.dfd.64b469@ismtpd-555>", "sg_message_id", "sg_event_id", time.Unix(1513299569, 0).UTC()},
		}},
		{inbound.SendGrid, "sendgrid_bounce_blocked.json", []want{{
			inbound.SoftBounce, "noemail@this.does.not.exist.tld", "<870b3a2a-160c-4fc8-bc9a-bd0d5b943b81@forum.umbraco.com>",
			"euo2iKxdSayPF4YE4--I7A.recvd-5f54b5d587-pczjm-1-67BADEEA-6.0", "Ym91bmNlLTQtNTA0ODUxOTUtZXVvMmlLeGRTYXlQRjRZRTQtLUk3QS0w",
			time.Unix(1740300320, 0).UTC(),
		}}},
		{inbound.Mailgun, "mailgun_failed_permanent.json", []want{{
			inbound.HardBounce, "alice@example.com", "<20130503182626.18666.16540@sandbox1234.mailgun.org>",
			"20130503182626.18666.16540@sandbox1234.mailgun.org", "G9Bn5sl1TC6nu79C8C0bwg",
			time.Unix(1521233195, 375624000).UTC(),
		}}},
		{inbound.Mailgun, "mailgun_complained.json", []want{{
			inbound.Complaint, "alice@example.com", "<20110215055645.25246.63817@sandbox1234.mailgun.org>",
			"20110215055645.25246.63817@sandbox1234.mailgun.org", "-Agny091SquKnsrW2NEKUA",
			time.Unix(1521233123, 501324000).UTC(),
		}}},
		{inbound.Generic, "generic_hard_bounce.json", []want{{
			inbound.HardBounce, "ann@example.com", "<0123456789abcdef0123456789abcdef@onceplan>", "", "evt-2026-12-01-0001",
			time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			raw := readTestdata(t, tc.file)
			events, err := inbound.Parse(tc.kind, raw)
			require.NoError(t, err)
			var gotten []want
			for _, e := range events {
				require.Equal(t, tc.kind, e.Kind)
				require.NotEmpty(t, e.Raw)
				require.NotEmpty(t, e.Detail)
				g := got(e)
				// Compare instants, not the monotonic/zone representation.
				require.True(t, g.At.Equal(e.At))
				g.At = g.At.UTC()
				gotten = append(gotten, g)
			}
			for i := range tc.want {
				tc.want[i].At = tc.want[i].At.UTC()
			}
			require.Equal(t, tc.want, gotten)
		})
	}
}

// TestParseDetail: the reason people read keeps the provider's words.
func TestParseDetail(t *testing.T) {
	t.Parallel()
	events, err := inbound.Parse(inbound.SES, readTestdata(t, "ses_bounce.json"))
	require.NoError(t, err)
	require.Equal(t, "Permanent/General: smtp; 550 5.1.1 <jane@example.com>... User", events[0].Detail)
	events, err = inbound.Parse(inbound.Mailgun, readTestdata(t, "mailgun_failed_permanent.json"))
	require.NoError(t, err)
	require.Equal(t, "failed (permanent) suppress-bounce: 605 Not delivering to previously bounced address", events[0].Detail)
}

// TestParseMalformed: what does not parse is refused in one sentence that
// wraps ErrMalformed and echoes nothing of the body.
func TestParseMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind inbound.Kind
		body string
		says string
	}{
		{inbound.Generic, `{`, "invalid JSON"},
		{inbound.Generic, `{"id":"1","type":"bounced","address":"a@example.com"}`, `"type" must be`},
		{inbound.Generic, `{"type":"hard_bounce","address":"a@example.com"}`, `"id" is required`},
		{inbound.Generic, `{"id":"1","type":"hard_bounce"}`, "no recipient address"},
		{inbound.Generic, `{"id":"1","type":"hard_bounce","address":"a@example.com","at":"yesterday"}`, "RFC 3339"},
		{inbound.SendGrid, `{"event":"bounce"}`, "JSON array"},
		{inbound.SendGrid, `[{"event":"bounce","email":7}]`, "SendGrid event 1"},
		{inbound.Mailgun, `{"signature":{}}`, "no event-data"},
		{inbound.Postmark, `[1]`, "Postmark webhook object"},
		{inbound.SES, `{"Type":"Notification"}`, "lacks MessageId"},
		{inbound.SES, `{"Type":"Other","MessageId":"1","TopicArn":"a","Timestamp":"t"}`, "is not one this endpoint takes"},
		{inbound.SES, `{"Type":"Notification","MessageId":"1","TopicArn":"a","Timestamp":"t","Message":"secret-looking text"}`, "not an SES notification"},
	} {
		_, err := inbound.Parse(tc.kind, []byte(tc.body))
		require.ErrorIs(t, err, inbound.ErrMalformed, tc.body)
		require.ErrorContains(t, err, tc.says, tc.body)
		require.NotContains(t, err.Error(), "secret-looking", tc.body)
	}
}

// TestParseIgnoresOtherEvents: a delivery or an open is not an event of
// ours, and SES's "not-spam" feedback is not a complaint.
func TestParseIgnoresOtherEvents(t *testing.T) {
	t.Parallel()
	for kind, body := range map[inbound.Kind]string{
		inbound.Postmark: `{"RecordType":"Delivery","MessageID":"x","Recipient":"a@example.com"}`,
		inbound.SendGrid: `[{"event":"delivered","email":"a@example.com","sg_event_id":"e1"},{"event":"open","email":"a@example.com"}]`,
		inbound.Mailgun:  `{"signature":{},"event-data":{"event":"delivered","recipient":"a@example.com","id":"x"}}`,
	} {
		events, err := inbound.Parse(kind, []byte(body))
		require.NoError(t, err, kind)
		require.Empty(t, events, kind)
	}
	msg := `{"notificationType":"Complaint","complaint":{"complaintFeedbackType":"not-spam","complainedRecipients":[{"emailAddress":"a@example.com"}]},"mail":{}}`
	events, err := inbound.Parse(inbound.SES, snsBody(t, msg))
	require.NoError(t, err)
	require.Empty(t, events)
}

// TestParseSESManyRecipients: one SNS message naming several recipients
// gives one event each, with ids stable across a re-delivery.
func TestParseSESManyRecipients(t *testing.T) {
	t.Parallel()
	msg := `{"notificationType":"Bounce","bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull","bouncedRecipients":[{"emailAddress":"a@example.com"},{"emailAddress":"b@example.com"}]},"mail":{"messageId":"m1"}}`
	body := snsBody(t, msg)
	events, err := inbound.Parse(inbound.SES, body)
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, inbound.SoftBounce, events[0].Type)
	require.NotEqual(t, events[0].ProviderEventID, events[1].ProviderEventID)
	again, err := inbound.Parse(inbound.SES, body)
	require.NoError(t, err)
	require.Equal(t, events[1].ProviderEventID, again[1].ProviderEventID)
}

// TestParseNoEventIDUsesDigest: an event without the provider's id is
// known by the digest of its raw JSON.
func TestParseNoEventIDUsesDigest(t *testing.T) {
	t.Parallel()
	events, err := inbound.Parse(inbound.SendGrid, []byte(`[{"event":"spamreport","email":"a@example.com"}]`))
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, events[0].ProviderEventID)
}
