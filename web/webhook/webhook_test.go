package webhook_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // SNS SignatureVersion 1
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/web"
	"github.com/onceplan/onceplan/web/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	mailgunKey    = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
	genericSecret = "generic-secret-0123456789"
	topic         = "arn:aws:sns:eu-west-1:123456789012:bounces"
)

// bundle is an echo server with every kind configured, on a fresh
// database, and the keys a provider would sign with.
type bundle struct {
	t        *testing.T
	ctx      context.Context
	e        *echo.Echo
	app      *pgxpool.Pool
	admin    *pgxpool.Pool
	eps      inbound.Endpoints
	sgKey    *ecdsa.PrivateKey
	snsKey   *rsa.PrivateKey
	certURL  string
	certPEM  []byte
	confirms atomic.Int32 // GETs of the test SubscribeURL
	tls      *httptest.Server
	skew     atomic.Int64 // the handler's clock is time.Now plus this
}

// now is the handler's clock.
func (b *bundle) now() time.Time { return time.Now().Add(time.Duration(b.skew.Load())) }

// advance moves the handler's clock (only the handler's: the SNS
// certificate's validity keeps the real one).
func (b *bundle) advance(d time.Duration) { b.skew.Add(int64(d)) }

type setupOpts struct {
	rate  float64
	burst int
	// defaultSNSChecks keeps the SNS verifier's production URL checks.
	defaultSNSChecks bool
}

func setup(t *testing.T, opts setupOpts) *bundle {
	t.Helper()
	b := &bundle{t: t, ctx: t.Context()}
	urls := pgtest.Database(t)
	b.admin, b.app = pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)

	// The SNS signing certificate, served over TLS by a test server.
	var err error
	b.snsKey, err = rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &b.snsKey.PublicKey, b.snsKey)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	b.certPEM = certPEM
	b.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/SimpleNotificationService-test.pem":
			w.Write(certPEM)
		case "/confirm":
			b.confirms.Add(1)
			w.Write([]byte("<ConfirmSubscriptionResponse/>"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(b.tls.Close)
	b.certURL = b.tls.URL + "/SimpleNotificationService-test.pem"

	b.sgKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pub, err := x509.MarshalPKIXPublicKey(&b.sgKey.PublicKey)
	require.NoError(t, err)
	b.eps, err = inbound.ParseEndpoints([]string{
		"ses=" + topic,
		"postmark=hooks:pm-password",
		"sendgrid=" + base64.StdEncoding.EncodeToString(pub),
		"mailgun=" + mailgunKey,
		"generic=" + genericSecret,
	}, "")
	require.NoError(t, err)
	v := b.eps[inbound.SES].SNS()
	v.Client = b.tls.Client()
	if !opts.defaultSNSChecks {
		host := b.tls.Listener.Addr().String()
		v.CertURLAllowed = func(u *url.URL) bool { return u.Scheme == "https" && u.Host == host }
		v.SubscribeURLAllowed = v.CertURLAllowed
	}

	b.e = echo.New()
	b.e.IPExtractor = echo.ExtractIPDirect()
	webhook.Register(b.e, webhook.Config{Pool: b.app, Endpoints: b.eps, RatePerClient: rate.Limit(rateOr(opts.rate)), Burst: opts.burst, Now: b.now})
	return b
}

func rateOr(r float64) float64 {
	if r == 0 {
		return 1000
	}
	return r
}

// post sends a body to /webhooks/kind from client address 192.0.2.1.
func (b *bundle) post(kind string, body []byte, header http.Header) *httptest.ResponseRecorder {
	return b.postFrom("192.0.2.1:5000", kind, body, header)
}

func (b *bundle) postFrom(remote, kind string, body []byte, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/"+kind, bytes.NewReader(body))
	req.RemoteAddr = remote
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	b.e.ServeHTTP(rec, req)
	return rec
}

// state is what a request may change (the tokens taken are counted
// apart: tokens).
type state struct{ events, suppressions int }

func (b *bundle) state() state {
	var s state
	require.NoError(b.t, b.admin.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM inbound_event), (SELECT count(*) FROM suppression)`).
		Scan(&s.events, &s.suppressions))
	return s
}

// tokens counts the Mailgun tokens taken.
func (b *bundle) tokens() int {
	var n int
	require.NoError(b.t, b.admin.QueryRow(b.ctx, `SELECT count(*) FROM inbound_token`).Scan(&n))
	return n
}

func (b *bundle) suppressed(addr string) (suppression.Entry, bool) {
	e, found, err := suppression.Lookup(b.ctx, b.app, addr)
	require.NoError(b.t, err)
	return e, found
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	require.NotEmpty(t, body.Error.Message)
	return body.Error.Code
}

// --- signing, as each provider does ---

// snsMessage is a signed SNS message (version "1" or "2").
func (b *bundle) snsMessage(version, typ, message string, mutate func(m *inbound.SNSMessage)) []byte {
	m := inbound.SNSMessage{
		Type: typ, MessageID: "msg-" + randHex(8), TopicArn: topic, Message: message,
		Timestamp: time.Now().UTC().Format(time.RFC3339), SignatureVersion: version, SigningCertURL: b.certURL,
	}
	if typ == "SubscriptionConfirmation" {
		m.Token = "token-" + randHex(8)
		m.SubscribeURL = b.tls.URL + "/confirm?Token=" + m.Token
	}
	if mutate != nil {
		mutate(&m)
	}
	text := []byte(m.StringToSign())
	var sig []byte
	var err error
	if version == "1" {
		d := sha1.Sum(text) //nolint:gosec // SignatureVersion 1
		sig, err = rsa.SignPKCS1v15(rand.Reader, b.snsKey, crypto.SHA1, d[:])
	} else {
		d := sha256.Sum256(text)
		sig, err = rsa.SignPKCS1v15(rand.Reader, b.snsKey, crypto.SHA256, d[:])
	}
	require.NoError(b.t, err)
	m.Signature = base64.StdEncoding.EncodeToString(sig)
	out, err := json.Marshal(m)
	require.NoError(b.t, err)
	return out
}

func sesBounce(addr string) string {
	return `{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General",` +
		`"bouncedRecipients":[{"emailAddress":"` + addr + `"}]},"mail":{"messageId":"ses-1"}}`
}

func (b *bundle) sendgridHeaders(body []byte) http.Header {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	d := sha256.Sum256(append([]byte(ts), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, b.sgKey, d[:])
	require.NoError(b.t, err)
	return http.Header{
		inbound.SendGridSignatureHeader: {base64.StdEncoding.EncodeToString(sig)},
		inbound.SendGridTimestampHeader: {ts},
	}
}

func mailgunBody(key, event, severity, addr string) []byte {
	ts, token := strconv.FormatInt(time.Now().Unix(), 10), randHex(25)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(ts + token))
	b, _ := json.Marshal(map[string]any{
		"signature": map[string]string{"timestamp": ts, "token": token, "signature": hex.EncodeToString(m.Sum(nil))},
		"event-data": map[string]any{
			"event": event, "severity": severity, "id": "mg-" + randHex(6), "recipient": addr,
			"timestamp": 1521233195.375624, "message": map[string]any{"headers": map[string]string{"message-id": "x@mg.example.com"}},
		},
	})
	return b
}

func basic(user, pass string) http.Header {
	return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// delivery is one kind's request: a correctly authenticated hard bounce
// (or complaint) for addr, and the same request made wrong and unsigned.
type delivery struct {
	kind     string
	reason   suppression.Reason
	signed   func(b *bundle, addr string) ([]byte, http.Header)
	wrong    func(b *bundle, addr string) ([]byte, http.Header)
	unsigned func(b *bundle, addr string) ([]byte, http.Header)
}

var deliveries = []delivery{
	{
		kind: "ses", reason: suppression.HardBounce,
		signed: func(b *bundle, addr string) ([]byte, http.Header) {
			return b.snsMessage("1", "Notification", sesBounce(addr), nil), nil
		},
		wrong: func(b *bundle, addr string) ([]byte, http.Header) {
			// Signed, then the recipient changed: the signature no longer covers it.
			body := b.snsMessage("2", "Notification", sesBounce("someone-else@example.com"), nil)
			return bytes.Replace(body, []byte("someone-else@example.com"), []byte(addr), 1), nil
		},
		unsigned: func(b *bundle, addr string) ([]byte, http.Header) {
			return b.snsMessage("1", "Notification", sesBounce(addr), func(m *inbound.SNSMessage) {}), nil
		},
	},
	{
		kind: "postmark", reason: suppression.HardBounce,
		signed: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`{"RecordType":"Bounce","ID":` + strconv.Itoa(int(time.Now().UnixNano()%1e9)) + `,"Type":"HardBounce","Email":"` + addr + `","MessageID":"pm-1"}`), basic("hooks", "pm-password")
		},
		wrong: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`{"RecordType":"Bounce","ID":1,"Type":"HardBounce","Email":"` + addr + `"}`), basic("hooks", "guess")
		},
		unsigned: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`{"RecordType":"Bounce","ID":1,"Type":"HardBounce","Email":"` + addr + `"}`), nil
		},
	},
	{
		kind: "sendgrid", reason: suppression.Complaint,
		signed: func(b *bundle, addr string) ([]byte, http.Header) {
			body := []byte(`[{"event":"spamreport","email":"` + addr + `","sg_event_id":"sg-` + randHex(6) + `","sg_message_id":"sgm"}]`)
			return body, b.sendgridHeaders(body)
		},
		wrong: func(b *bundle, addr string) ([]byte, http.Header) {
			body := []byte(`[{"event":"spamreport","email":"` + addr + `","sg_event_id":"sg-1"}]`)
			h := b.sendgridHeaders([]byte(`[]`)) // a signature over another body
			return body, h
		},
		unsigned: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`[{"event":"spamreport","email":"` + addr + `","sg_event_id":"sg-1"}]`), nil
		},
	},
	{
		kind: "mailgun", reason: suppression.HardBounce,
		signed: func(b *bundle, addr string) ([]byte, http.Header) {
			return mailgunBody(mailgunKey, "failed", "permanent", addr), nil
		},
		wrong: func(b *bundle, addr string) ([]byte, http.Header) {
			return mailgunBody("key-not-the-signing-key-000000", "failed", "permanent", addr), nil
		},
		unsigned: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`{"event-data":{"event":"failed","severity":"permanent","id":"x","recipient":"` + addr + `"}}`), nil
		},
	},
	{
		kind: "generic", reason: suppression.HardBounce,
		signed: func(b *bundle, addr string) ([]byte, http.Header) {
			body := []byte(`{"id":"g-` + randHex(6) + `","type":"hard_bounce","address":"` + addr + `"}`)
			return body, genericHeaders(genericSecret, time.Now(), body)
		},
		wrong: func(b *bundle, addr string) ([]byte, http.Header) {
			body := []byte(`{"id":"g-1","type":"hard_bounce","address":"` + addr + `"}`)
			return body, genericHeaders("another-secret-0123456789", time.Now(), body)
		},
		unsigned: func(b *bundle, addr string) ([]byte, http.Header) {
			return []byte(`{"id":"g-1","type":"hard_bounce","address":"` + addr + `"}`), nil
		},
	},
}

// TestSignedBounceSuppresses: for each kind, a correctly authenticated
// bounce (or complaint) suppresses the address, from a provider event.
func TestSignedBounceSuppresses(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries {
		t.Run(d.kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			addr := "ann@example.com"
			body, h := d.signed(b, addr)
			rec := b.post(d.kind, body, h)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.JSONEq(t, `{"received":1,"recorded":1,"duplicate":0}`, rec.Body.String())
			e, found := b.suppressed(addr)
			require.True(t, found, "suppressed")
			require.Equal(t, d.reason, e.Reason)
			require.Equal(t, suppression.FromProviderEvent, e.Source)
			require.NotZero(t, e.EventID)
		})
	}
}

// TestRefusedChangesNothing: for each kind, an unsigned request gets 401
// and a wrongly signed one 403, and neither stores an event nor
// suppresses anything.
func TestRefusedChangesNothing(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries {
		t.Run(d.kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			before := b.state()
			body, h := d.unsigned(b, "ann@example.com")
			if d.kind == "ses" {
				// Drop the signature from a signed message.
				var m map[string]any
				require.NoError(t, json.Unmarshal(body, &m))
				delete(m, "Signature")
				body, _ = json.Marshal(m)
			}
			rec := b.post(d.kind, body, h)
			require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
			require.Equal(t, "unauthenticated", errorCode(t, rec))

			body, h = d.wrong(b, "ann@example.com")
			rec = b.post(d.kind, body, h)
			require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
			require.Equal(t, "forbidden", errorCode(t, rec))

			require.Equal(t, before, b.state(), "nothing recorded, nothing suppressed")
			_, found := b.suppressed("ann@example.com")
			require.False(t, found)
		})
	}
}

// TestRedeliveryRecordedOnce: for each kind, the same signed request
// delivered three times is one event and one suppression.
func TestRedeliveryRecordedOnce(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries {
		t.Run(d.kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			body, h := d.signed(b, "bob@example.com")
			for i := range 3 {
				rec := b.post(d.kind, body, h)
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				if i > 0 {
					require.JSONEq(t, `{"received":1,"recorded":0,"duplicate":1}`, rec.Body.String())
				}
			}
			require.Equal(t, state{events: 1, suppressions: 1}, b.state())
		})
	}
}

// TestSNSSubscriptionConfirmation: a signed SubscriptionConfirmation is
// confirmed by one GET of its SubscribeURL, and records nothing.
func TestSNSSubscriptionConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rec := b.post("ses", b.snsMessage("2", "SubscriptionConfirmation", "You have chosen to subscribe.", nil), nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, int32(1), b.confirms.Load())
	require.Equal(t, state{}, b.state())

	// Unsigned, or with its SubscribeURL changed after signing: never visited.
	body := b.snsMessage("2", "SubscriptionConfirmation", "x", nil)
	tampered := bytes.Replace(body, []byte("/confirm?"), []byte("/confirm?evil=1&"), 1)
	rec = b.post("ses", tampered, nil)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	require.Equal(t, int32(1), b.confirms.Load())
}

// TestSNSProductionChecks: with the default checks, a certificate URL
// that is not https on sns.<region>.amazonaws.com is never fetched (403),
// and a SubscribeURL off amazonaws.com is never visited.
func TestSNSProductionChecks(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
		"https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
		"https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem",
	} {
		u, _ := url.Parse(ok)
		require.True(t, inbound.DefaultSNSCertURLAllowed(u), ok)
	}
	for _, bad := range []string{
		"http://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
		"https://sns.eu-west-1.amazonaws.com.evil.example/x.pem",
		"https://evil.example/sns.eu-west-1.amazonaws.com/x.pem",
		"https://s3.amazonaws.com/x.pem",
		"https://sns.eu-west-1.amazonaws.com:8443/x.pem",
		"https://user@sns.eu-west-1.amazonaws.com/x.pem",
		"https://sns.eu-west-1.amazonaws.com/x.txt",
	} {
		u, _ := url.Parse(bad)
		require.False(t, inbound.DefaultSNSCertURLAllowed(u), bad)
	}
	for _, bad := range []string{"http://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription", "https://evil.example/?a=.amazonaws.com", "https://amazonaws.com.evil.example/",
		"https://attacker.s3.amazonaws.com/?Action=ConfirmSubscription", "https://sns.us-east-1.amazonaws.com.evil.com/", "https://sns.us-east-1.amazonaws.com.cn.evil.com/"} {
		u, _ := url.Parse(bad)
		require.False(t, inbound.DefaultSNSSubscribeURLAllowed(u), bad)
	}

	b := setup(t, setupOpts{defaultSNSChecks: true})
	rec := b.post("ses", b.snsMessage("1", "Notification", sesBounce("ann@example.com"), nil), nil)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "SigningCertURL")
	require.Equal(t, state{}, b.state())

	// A SubscribeURL on our test server, with the certificate allowed:
	// the signature verifies, but the URL is not amazonaws.com.
	host := b.tls.Listener.Addr().String()
	b.eps[inbound.SES].SNS().CertURLAllowed = func(u *url.URL) bool { return u.Host == host }
	rec = b.post("ses", b.snsMessage("1", "SubscriptionConfirmation", "x", nil), nil)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Zero(t, b.confirms.Load(), "never visited")
}

// TestSNSTopicAllowList: a message from a topic not configured is refused.
func TestSNSTopicAllowList(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	rec := b.post("ses", b.snsMessage("2", "Notification", sesBounce("ann@example.com"), func(m *inbound.SNSMessage) {
		m.TopicArn = "arn:aws:sns:eu-west-1:999999999999:other"
	}), nil)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	require.Equal(t, state{}, b.state())
}

// TestHostile: what anyone on the network can send.
func TestHostile(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	before := b.state()

	// A kind we do not have, and one we have but that is not configured.
	rec := b.post("sparkpost", []byte(`{}`), nil)
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, "not_found", errorCode(t, rec))
	delete(b.eps, inbound.Mailgun)
	rec = b.post("mailgun", mailgunBody(mailgunKey, "failed", "permanent", "ann@example.com"), nil)
	require.Equal(t, http.StatusNotFound, rec.Code)

	// More than 1 MiB, even correctly signed.
	big := []byte(`{"id":"big","type":"hard_bounce","address":"ann@example.com","pad":"` + strings.Repeat("x", webhook.DefaultMaxBody) + `"}`)
	rec = b.post("generic", big, genericHeaders(genericSecret, time.Now(), big))
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	require.Equal(t, "too_large", errorCode(t, rec))

	// Signed but malformed: 400 with one sentence.
	bad := []byte(`{"id":"1","type":"bounced","address":"ann@example.com"}`)
	rec = b.post("generic", bad, genericHeaders(genericSecret, time.Now(), bad))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Equal(t, "invalid", errorCode(t, rec))
	require.Contains(t, rec.Body.String(), `\"type\" must be hard_bounce, soft_bounce or complaint.`)

	// A GET is not a delivery.
	req := httptest.NewRequest(http.MethodGet, "/webhooks/generic", nil)
	rr := httptest.NewRecorder()
	b.e.ServeHTTP(rr, req)
	require.NotEqual(t, http.StatusOK, rr.Code)

	require.Equal(t, before, b.state())
}

// TestNoAddressLeak: the answer to a signed event is the same whether or
// not its address is in a list or suppressed already.
func TestNoAddressLeak(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	_, _, err := suppression.Add(b.ctx, b.app, suppression.AddParams{Address: "known@example.com", Reason: suppression.Manual, Source: suppression.FromActor, Actor: "admin@example.com"})
	require.NoError(t, err)
	answer := func(addr, id string) string {
		body := []byte(`{"id":"` + id + `","type":"hard_bounce","address":"` + addr + `"}`)
		rec := b.post("generic", body, genericHeaders(genericSecret, time.Now(), body))
		require.Equal(t, http.StatusOK, rec.Code)
		return rec.Body.String()
	}
	require.Equal(t, answer("known@example.com", "1"), answer("unknown@example.com", "2"))
}

// TestRateLimit: one client address past its burst gets 429 with
// Retry-After; another address is served.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{rate: 0.001, burst: 3})
	for i := range 3 {
		rec := b.postFrom("198.51.100.7:1", "generic", []byte(`{}`), nil)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "request %d", i)
	}
	rec := b.postFrom("198.51.100.7:2", "generic", []byte(`{}`), nil)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Equal(t, "rate_limited", errorCode(t, rec))
	rec = b.postFrom("198.51.100.8:1", "generic", []byte(`{}`), nil)
	require.Equal(t, http.StatusUnauthorized, rec.Code, "another client is not limited")
}

// TestRateLimitCountsAnIPv6NetworkAsOneClient: the addresses of one IPv6
// /64 are one client (keyedrate.ClientKey, as the sign-in throttle counts
// them): a burst spent from three of them leaves none for a fourth;
// another /64 is served.
func TestRateLimitCountsAnIPv6NetworkAsOneClient(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{rate: 0.001, burst: 3})
	for i, from := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2::2]:1", "[2001:db8:1:2:ffff::9]:1"} {
		rec := b.postFrom(from, "generic", []byte(`{}`), nil)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "request %d", i)
	}
	rec := b.postFrom("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:2", "generic", []byte(`{}`), nil)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "a fourth address of the same /64")
	require.Equal(t, "rate_limited", errorCode(t, rec))
	rec = b.postFrom("[2001:db8:1:3::1]:1", "generic", []byte(`{}`), nil)
	require.Equal(t, http.StatusUnauthorized, rec.Code, "another /64 is another client")
}

// TestSecretsNeverShown: an endpoint's String and every configuration
// error leave its secret out.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"postmark=hooks:pm-password", "mailgun=" + mailgunKey, "generic=" + genericSecret} {
		e, err := inbound.ParseEndpoint(spec)
		require.NoError(t, err)
		_, secret, _ := strings.Cut(spec, "=")
		require.NotContains(t, e.String(), secret)
		require.NotContains(t, fmt.Sprint(e), secret)
	}
	for _, spec := range []string{"postmark=nocolon-secret-value", "sendgrid=not-base64-secret!", "mailgun=short-secret", "unknown=secret-value-123", "generic"} {
		_, err := inbound.ParseEndpoint(spec)
		require.Error(t, err, spec)
		_, secret, _ := strings.Cut(spec, "=")
		if secret != "" {
			require.NotContains(t, err.Error(), secret, spec)
		}
	}
	_, err := inbound.ParseEndpoints([]string{"generic=" + genericSecret, "generic=" + genericSecret}, "")
	require.ErrorContains(t, err, "twice")

	// The variable, when no flag is given; ignored when one is.
	eps, err := inbound.ParseEndpoints(nil, "postmark=hooks:pm-password, generic="+genericSecret)
	require.NoError(t, err)
	require.Equal(t, []string{"generic", "postmark"}, eps.Names())
	eps, err = inbound.ParseEndpoints([]string{"mailgun=" + mailgunKey}, "generic="+genericSecret)
	require.NoError(t, err)
	require.Equal(t, []string{"mailgun"}, eps.Names())
}

// TestMountedWithoutSessionOrCSRF: mounted on the real server the way
// serve mounts it, a signed delivery from another site, with no session
// cookie and no CSRF token, is taken (the UI's CSRF guard covers the UI's
// own routes, not Mount's).
func TestMountedWithoutSessionOrCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	client, err := river.NewClient(riverpgxv5.New(b.app), &river.Config{})
	require.NoError(t, err)
	srv := web.NewServer(web.Config{
		Pool: b.app, Approval: approval.NewService(b.app, jobs.NewEnqueuer(client)),
		Logger: slog.New(slog.DiscardHandler),
		Mount:  func(e *echo.Echo) { webhook.Register(e, webhook.Config{Pool: b.app, Endpoints: b.eps}) },
	})
	body := []byte(`{"id":"m-1","type":"complaint","address":"ann@example.com"}`)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/generic", bytes.NewReader(body))
	req.Header.Set("Origin", "https://provider.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	for k, v := range genericHeaders(genericSecret, time.Now(), body) {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotEmpty(t, rec.Header().Get("X-Request-Id"), "the server's middleware ran")
	e, found := b.suppressed("ann@example.com")
	require.True(t, found)
	require.Equal(t, suppression.Complaint, e.Reason)
}
