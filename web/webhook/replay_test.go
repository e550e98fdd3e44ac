package webhook_test

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/web/webhook"
)

// another is a second server process on b's database: its own route and
// handler, nothing shared in memory but the configured endpoints.
func (b *bundle) another(t *testing.T) *bundle {
	t.Helper()
	o := &bundle{t: b.t, ctx: b.ctx, e: echo.New(), app: b.app, admin: b.admin, eps: b.eps}
	o.e.IPExtractor = echo.ExtractIPDirect()
	webhook.Register(o.e, webhook.Config{Pool: b.app, Endpoints: b.eps, RatePerClient: rate.Limit(1000), Now: b.now})
	return o
}

// The attacks on freshness and replay, each through the real route, each
// with a control that the same request made right is taken (so that a
// refusal is the rule's, not a broken signature's).

// mailgunSigned is a Mailgun webhook body with the signature block Mailgun
// would send for (ts, token), and the given event-data.
func mailgunSigned(key string, ts time.Time, token string, eventData map[string]any) []byte {
	sec := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(sec + token))
	b, _ := json.Marshal(map[string]any{
		"signature":  map[string]string{"timestamp": sec, "token": token, "signature": hex.EncodeToString(m.Sum(nil))},
		"event-data": eventData,
	})
	return b
}

func mailgunFailed(id, addr string) map[string]any {
	return map[string]any{
		"event": "failed", "severity": "permanent", "id": id, "recipient": addr, "timestamp": 1521233195.375624,
		"message": map[string]any{"headers": map[string]string{"message-id": "x@mg.example.com"}},
	}
}

// withSignature puts sig's signature block on another body's event-data:
// what anyone holding one captured Mailgun webhook can write.
func withSignature(t *testing.T, captured []byte, eventData map[string]any) []byte {
	t.Helper()
	var b map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(captured, &b))
	ed, err := json.Marshal(eventData)
	require.NoError(t, err)
	b["event-data"] = ed
	out, err := json.Marshal(b)
	require.NoError(t, err)
	return out
}

// TestMailgunStaleSignatureRefused: a Mailgun signature older than the
// freshness window, or dated too far ahead, is refused and changes
// nothing; the same event signed now is taken.
func TestMailgunStaleSignatureRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, at := range []time.Time{time.Now().Add(-16 * time.Minute), time.Now().Add(-30 * 24 * time.Hour), time.Now().Add(10 * time.Minute)} {
		rec := b.post("mailgun", mailgunSigned(mailgunKey, at, randHex(25), mailgunFailed("mg-stale", "ann@example.com")), nil)
		require.Equal(t, http.StatusForbidden, rec.Code, "signed at %s: %s", at, rec.Body.String())
		require.Equal(t, "forbidden", errorCode(t, rec))
		require.Equal(t, state{}, b.state(), "nothing recorded, nothing suppressed")
		require.Zero(t, b.tokens(), "no token taken")
	}
	rec := b.post("mailgun", mailgunSigned(mailgunKey, time.Now().Add(-time.Minute), randHex(25), mailgunFailed("mg-stale", "ann@example.com")), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
}

// TestMailgunReusedTokenRefused: Mailgun's signature covers its timestamp
// and token, not the event, so a captured webhook's signature block put
// on another event is refused while it is fresh too — whether the
// captured webhook carried an event of ours (recorded) or not (a
// delivery, of which nothing is recorded) — and the refusal holds for
// another server process on the same database.
func TestMailgunReusedTokenRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	delivered := mailgunSigned(mailgunKey, time.Now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-d1", "recipient": "bob@example.com"})
	rec := b.post("mailgun", delivered, nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	bounced := mailgunSigned(mailgunKey, time.Now(), randHex(25), mailgunFailed("mg-f1", "carol@example.com"))
	rec = b.post("mailgun", bounced, nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	before := b.state()
	require.Equal(t, state{events: 1, suppressions: 1}, before)
	require.Equal(t, 2, b.tokens())

	other := b.another(t) // a second server process on the same database
	for _, captured := range [][]byte{delivered, bounced} {
		for _, id := range []string{"mg-forged", "mg-f1", "mg-d1"} {
			forged := withSignature(t, captured, mailgunFailed(id, "victim@example.com"))
			for _, srv := range []*bundle{b, other} {
				rec := srv.post("mailgun", forged, nil)
				require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
				require.Equal(t, "forbidden", errorCode(t, rec))
			}
		}
	}
	require.Equal(t, before, b.state(), "nothing recorded, nothing suppressed")
	require.Equal(t, 2, b.tokens(), "no token taken")
	_, found := b.suppressed("victim@example.com")
	require.False(t, found)
}

// TestMailgunRedeliveryTaken: Mailgun re-sending the same webhook (the
// same signature block and event) is answered 2xx and changes nothing,
// from this process or another.
func TestMailgunRedeliveryTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	other := b.another(t)
	body := mailgunSigned(mailgunKey, time.Now().Add(-2*time.Minute), randHex(25), mailgunFailed("mg-r1", "dan@example.com"))
	rec := b.post("mailgun", body, nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"received":1,"recorded":1,"duplicate":0}`, rec.Body.String())
	for _, srv := range []*bundle{b, other, b} {
		rec := srv.post("mailgun", body, nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.JSONEq(t, `{"received":1,"recorded":0,"duplicate":1}`, rec.Body.String())
	}
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())

	// A delivery of no event of ours, re-sent: taken, nothing recorded.
	delivered := mailgunSigned(mailgunKey, time.Now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-d2", "recipient": "dan@example.com"})
	for range 2 {
		rec := b.post("mailgun", delivered, nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
}

// sendgridSignedAt signs a SendGrid body as of ts.
func (b *bundle) sendgridSignedAt(body []byte, ts time.Time) http.Header {
	sec := strconv.FormatInt(ts.Unix(), 10)
	d := sha256.Sum256(append([]byte(sec), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, b.sgKey, d[:])
	require.NoError(b.t, err)
	return http.Header{
		inbound.SendGridSignatureHeader: {base64.StdEncoding.EncodeToString(sig)},
		inbound.SendGridTimestampHeader: {sec},
	}
}

// TestSendGridStaleSignatureRefused: a SendGrid signature whose timestamp
// is older than the window (or too far ahead) is refused and changes
// nothing; signed now, the same batch is taken, and re-delivered it
// changes nothing more.
func TestSendGridStaleSignatureRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	body := []byte(`[{"event":"bounce","type":"bounce","email":"ann@example.com","sg_event_id":"sg-stale-1","sg_message_id":"sgm"}]`)
	for _, at := range []time.Time{time.Now().Add(-26 * time.Hour), time.Now().Add(-90 * 24 * time.Hour), time.Now().Add(10 * time.Minute)} {
		rec := b.post("sendgrid", body, b.sendgridSignedAt(body, at))
		require.Equal(t, http.StatusForbidden, rec.Code, "signed at %s: %s", at, rec.Body.String())
		require.Equal(t, "forbidden", errorCode(t, rec))
		require.Equal(t, state{}, b.state())
	}
	for i := range 3 {
		rec := b.post("sendgrid", body, b.sendgridSignedAt(body, time.Now().Add(-time.Duration(i)*time.Minute)))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.JSONEq(t, `{"received":1,"recorded":`+strconv.Itoa(1-min(i, 1))+`,"duplicate":`+strconv.Itoa(min(i, 1))+`}`, rec.Body.String())
	}
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
}

// genericHeaders signs a generic body as of ts: X-Onceplan-Timestamp and
// X-Onceplan-Signature "v1=" hex HMAC-SHA256(secret, ts + "." + body),
// the scheme of the notifications Onceplan itself sends.
func genericHeaders(secret string, ts time.Time, body []byte) http.Header {
	sec := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(sec + "."))
	m.Write(body)
	return http.Header{
		"X-Onceplan-Timestamp":         {sec},
		inbound.GenericSignatureHeader: {"v1=" + hex.EncodeToString(m.Sum(nil))},
	}
}

// TestGenericStaleSignatureRefused: a generic request signed longer ago
// than the window (or too far ahead) is refused and changes nothing, and
// so is the old form that signed no time at all (a captured request
// could be replayed forever); signed now it is taken, and re-delivered
// (signed again, as a sender retries) it changes nothing more.
func TestGenericStaleSignatureRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	body := []byte(`{"id":"g-stale-1","type":"hard_bounce","address":"ann@example.com"}`)
	for _, at := range []time.Time{time.Now().Add(-16 * time.Minute), time.Now().Add(-365 * 24 * time.Hour), time.Now().Add(10 * time.Minute)} {
		rec := b.post("generic", body, genericHeaders(genericSecret, at, body))
		require.Equal(t, http.StatusForbidden, rec.Code, "signed at %s: %s", at, rec.Body.String())
		require.Equal(t, "forbidden", errorCode(t, rec))
	}
	m := hmac.New(sha256.New, []byte(genericSecret))
	m.Write(body)
	rec := b.post("generic", body, http.Header{inbound.GenericSignatureHeader: {"sha256=" + hex.EncodeToString(m.Sum(nil))}})
	require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, rec.Code, rec.Body.String())
	require.Equal(t, state{}, b.state())

	for i := range 3 {
		rec := b.post("generic", body, genericHeaders(genericSecret, time.Now().Add(-time.Duration(i)*time.Minute), body))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
}

// TestSNSStaleTimestampRefused: an SNS message whose signed Timestamp is
// older than the window (or too far ahead) is refused and changes nothing;
// one SNS retries late within its hour of retries is taken, and its
// re-delivery changes nothing more.
func TestSNSStaleTimestampRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for _, at := range []time.Time{time.Now().Add(-3 * time.Hour), time.Now().Add(-30 * 24 * time.Hour), time.Now().Add(10 * time.Minute)} {
		for _, typ := range []string{"Notification", "SubscriptionConfirmation"} {
			body := b.snsMessage("2", typ, sesBounce("ann@example.com"), func(m *inbound.SNSMessage) {
				m.Timestamp = at.UTC().Format("2006-01-02T15:04:05.000Z")
			})
			rec := b.post("ses", body, nil)
			require.Equal(t, http.StatusForbidden, rec.Code, "%s signed at %s: %s", typ, at, rec.Body.String())
			require.Equal(t, "forbidden", errorCode(t, rec))
		}
	}
	require.Equal(t, state{}, b.state())
	require.Zero(t, b.confirms.Load(), "no stale subscription confirmed")

	late := b.snsMessage("2", "Notification", sesBounce("ann@example.com"), func(m *inbound.SNSMessage) {
		m.Timestamp = time.Now().Add(-55 * time.Minute).UTC().Format("2006-01-02T15:04:05.000Z")
	})
	for range 2 {
		rec := b.post("ses", late, nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
}

// TestMailgunStaleRedeliveryTaken: Mailgun retrying, past the freshness
// window, a webhook whose event was recorded (its first answer was lost)
// gets 2xx and changes nothing — the same signature block, the same
// event — while that token on other content is refused, stale or not,
// and so is a stale token never seen.
func TestMailgunStaleRedeliveryTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	token := randHex(25)
	body := mailgunSigned(mailgunKey, b.now(), token, mailgunFailed("mg-late-1", "erin@example.com"))
	rec := b.post("mailgun", body, nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	want := state{events: 1, suppressions: 1}
	require.Equal(t, want, b.state())

	for _, later := range []time.Duration{20 * time.Minute, 3 * time.Hour} {
		b.advance(later)
		if time.Until(b.now()) > inbound.TokenRetention {
			// Past the token's retention: a fresh delivery prunes it, and
			// the retry is known by its event, stored with the same bytes.
			fresh := mailgunSigned(mailgunKey, b.now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-late-0", "recipient": "erin@example.com"})
			require.Equal(t, http.StatusOK, b.post("mailgun", fresh, nil).Code)
			require.Equal(t, 1, b.tokens(), "the first token pruned")
		}
		rec = b.post("mailgun", body, nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.JSONEq(t, `{"received":1,"recorded":0,"duplicate":1}`, rec.Body.String())

		forged := withSignature(t, body, mailgunFailed("mg-late-2", "victim@example.com"))
		rec = b.post("mailgun", forged, nil)
		require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
		rec = b.post("mailgun", mailgunSigned(mailgunKey, time.Now(), randHex(25), mailgunFailed("mg-late-3", "victim@example.com")), nil)
		require.Equal(t, http.StatusForbidden, rec.Code, "a stale token never taken: %s", rec.Body.String())
		require.Equal(t, want, b.state())
	}
}

// TestMailgunTokensPruned: tokens are kept while their signature can be
// fresh, and each later write deletes those past the retention, so the
// table holds one retention's worth of deliveries, not every delivery
// ever; a pruned token's signature is refused as stale all the same.
func TestMailgunTokensPruned(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	first := mailgunSigned(mailgunKey, b.now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-p0", "recipient": "f@example.com"})
	require.Equal(t, http.StatusOK, b.post("mailgun", first, nil).Code)
	for i := range 4 {
		body := mailgunSigned(mailgunKey, b.now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-p" + strconv.Itoa(i+1), "recipient": "f@example.com"})
		require.Equal(t, http.StatusOK, b.post("mailgun", body, nil).Code)
	}
	require.Equal(t, 5, b.tokens())

	// Within the retention, nothing is pruned.
	b.advance(inbound.TokenRetention - time.Minute)
	require.Equal(t, http.StatusOK, b.post("mailgun", mailgunSigned(mailgunKey, b.now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-p5", "recipient": "f@example.com"}), nil).Code)
	require.Equal(t, 6, b.tokens())

	// Past it, the next write deletes the five old ones and keeps its own
	// and the one signed a retention later.
	b.advance(2 * time.Minute)
	require.Equal(t, http.StatusOK, b.post("mailgun", mailgunSigned(mailgunKey, b.now(), randHex(25), map[string]any{"event": "delivered", "id": "mg-p6", "recipient": "f@example.com"}), nil).Code)
	require.Equal(t, 2, b.tokens())

	// The first token is gone; its signature on another event is stale.
	rec := b.post("mailgun", withSignature(t, first, mailgunFailed("mg-p7", "victim@example.com")), nil)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	require.Equal(t, state{}, b.state())
}
