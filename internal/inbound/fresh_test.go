package inbound_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// TestFreshWindows: each signed kind's signature is taken up to its
// window old and MaxAhead ahead, and refused one second past either,
// with ErrForbidden and a sentence; Postmark signs no time. A Mailgun
// token outlives every signature it can be fresh with.
func TestFreshWindows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for kind, window := range map[inbound.Kind]time.Duration{
		inbound.SES: 2 * time.Hour, inbound.SendGrid: 25 * time.Hour, inbound.Mailgun: 15 * time.Minute, inbound.Generic: 15 * time.Minute,
	} {
		require.Equal(t, window, inbound.MaxAge(kind), kind)
		at := func(d time.Duration) inbound.Signed { return inbound.Signed{Kind: kind, SignedAt: now.Add(d)} }
		require.NoError(t, at(-window).Fresh(now), kind)
		require.NoError(t, at(inbound.MaxAhead).Fresh(now), kind)
		err := at(-window - time.Second).Fresh(now)
		require.ErrorIs(t, err, onceplan.ErrForbidden, kind)
		require.ErrorContains(t, err, "ago", kind)
		err = at(inbound.MaxAhead + time.Second).Fresh(now)
		require.ErrorIs(t, err, onceplan.ErrForbidden, kind)
		require.ErrorContains(t, err, "ahead", kind)
	}
	require.NoError(t, inbound.Signed{Kind: inbound.Postmark}.Fresh(now))
	require.Greater(t, inbound.TokenRetention, inbound.MailgunMaxAge+inbound.MaxAhead+30*time.Minute)
}

// TestGenericSignIsNotifySign: the generic webhook takes the scheme of
// the notifications Onceplan sends (one sender library for both).
func TestGenericSignIsNotifySign(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"1","type":"complaint","address":"a@example.com"}`)
	require.Equal(t, notify.Sign([]byte("0123456789abcdef"), 1764583200, body), inbound.Sign("0123456789abcdef", 1764583200, body))
}

// TestDocumentedExamplesAuthenticate: each provider's documented example
// (testdata), signed the way its provider signs it (with keys made here:
// the examples' own signatures are placeholders), authenticates; the
// time it was signed at is the one its signature covers, so it is fresh
// then and stale a window later.
func TestDocumentedExamplesAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(name string, ep *inbound.Endpoint, r inbound.Request, want time.Time) inbound.Signed {
		t.Helper()
		s, err := ep.Authenticate(ctx, r)
		require.NoError(t, err, name)
		require.True(t, want.Equal(s.SignedAt), "%s: signed at %s, want %s", name, s.SignedAt, want)
		require.NoError(t, s.Fresh(want.Add(time.Minute)), name)
		require.ErrorIs(t, s.Fresh(want.Add(inbound.MaxAge(ep.Kind)+time.Second)), onceplan.ErrForbidden, name)
		_, err = inbound.Parse(ep.Kind, r.Body)
		require.NoError(t, err, name)
		return s
	}

	// Mailgun: the HMAC of the example's own timestamp and token.
	const mgKey = "key-test-0123456789abcdef"
	mg, err := inbound.ParseEndpoint("mailgun=" + mgKey)
	require.NoError(t, err)
	for _, name := range []string{"mailgun_failed_permanent.json", "mailgun_complained.json"} {
		body := readTestdata(t, name)
		var b struct {
			Signature struct{ Timestamp, Token string } `json:"signature"`
		}
		require.NoError(t, json.Unmarshal(body, &b))
		body = resignMailgun(t, body, mgKey)
		sec, _ := strconv.ParseInt(b.Signature.Timestamp, 10, 64)
		s := check(name, mg, inbound.Request{Body: body}, time.Unix(sec, 0))
		require.Equal(t, b.Signature.Token, s.Token)
		require.Regexp(t, `^[0-9a-f]{64}$`, s.Digest)
	}

	// SendGrid: ECDSA over the timestamp and the body.
	sgKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pub, err := x509.MarshalPKIXPublicKey(&sgKey.PublicKey)
	require.NoError(t, err)
	sg, err := inbound.ParseEndpoint("sendgrid=" + base64.StdEncoding.EncodeToString(pub))
	require.NoError(t, err)
	for _, name := range []string{"sendgrid_events.json", "sendgrid_bounce_blocked.json"} {
		body := readTestdata(t, name)
		ts := "1513299569"
		d := sha256.Sum256(append([]byte(ts), body...))
		sig, err := ecdsa.SignASN1(rand.Reader, sgKey, d[:])
		require.NoError(t, err)
		h := http.Header{inbound.SendGridSignatureHeader: {base64.StdEncoding.EncodeToString(sig)}, inbound.SendGridTimestampHeader: {ts}}
		check(name, sg, inbound.Request{Header: h, Body: body}, time.Unix(1513299569, 0))
	}

	// Generic: signed at the example's own "at".
	gen, err := inbound.ParseEndpoint("generic=0123456789abcdef")
	require.NoError(t, err)
	body := readTestdata(t, "generic_hard_bounce.json")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := http.Header{inbound.GenericTimestampHeader: {strconv.FormatInt(at.Unix(), 10)}, inbound.GenericSignatureHeader: {inbound.Sign("0123456789abcdef", at.Unix(), body)}}
	check("generic_hard_bounce.json", gen, inbound.Request{Header: h, Body: body}, at)

	// SES: the SNS envelopes, signed with a certificate served here.
	snsKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &snsKey.PublicKey, snsKey)
	require.NoError(t, err)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}))
	t.Cleanup(srv.Close)
	for _, name := range []string{"ses_bounce.json", "ses_complaint.json", "ses_subscription_confirmation.json"} {
		m, err := inbound.ParseSNS(readTestdata(t, name))
		require.NoError(t, err)
		ses, err := inbound.ParseEndpoint("ses=" + m.TopicArn)
		require.NoError(t, err)
		v := ses.SNS()
		v.Client = srv.Client()
		v.CertURLAllowed = func(u *url.URL) bool { return u.Host == srv.Listener.Addr().String() }
		m.SigningCertURL = srv.URL + "/SimpleNotificationService-test.pem"
		digest := sha256.Sum256([]byte(m.StringToSign()))
		sig, err := rsa.SignPKCS1v15(rand.Reader, snsKey, crypto.SHA256, digest[:])
		require.NoError(t, err)
		m.SignatureVersion, m.Signature = "2", base64.StdEncoding.EncodeToString(sig)
		body, err := json.Marshal(m)
		require.NoError(t, err)
		want, err := time.Parse(time.RFC3339, m.Timestamp)
		require.NoError(t, err)
		check(name, ses, inbound.Request{Body: body}, want)
	}
}

// TestMailgunTokenBounds: a correctly signed Mailgun webhook whose token
// or timestamp could not be stored or judged (NUL, longer than any
// Mailgun token, a time no clock shows) is refused, not stored.
func TestMailgunTokenBounds(t *testing.T) {
	t.Parallel()
	const key = "key-test-0123456789abcdef"
	ep, err := inbound.ParseEndpoint("mailgun=" + key)
	require.NoError(t, err)
	signed := func(ts, token string) []byte {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(ts + token))
		b, err := json.Marshal(map[string]any{
			"signature":  map[string]string{"timestamp": ts, "token": token, "signature": hex.EncodeToString(m.Sum(nil))},
			"event-data": map[string]any{"event": "failed", "id": "x", "recipient": "a@example.com"},
		})
		require.NoError(t, err)
		return b
	}
	s, err := ep.Authenticate(context.Background(), inbound.Request{Body: signed("1529006854", strings.Repeat("t", 50))})
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("t", 50), s.Token)
	for _, tc := range []struct{ ts, token string }{
		{"1529006854", "\x00abc"},
		{"1529006854", strings.Repeat("t", 201)},
		{"99999999999999999999", "tok"},
		{"1e9", "tok"},
		{"-999999999999999", "tok"},
	} {
		_, err := ep.Authenticate(context.Background(), inbound.Request{Body: signed(tc.ts, tc.token)})
		require.ErrorIs(t, err, onceplan.ErrForbidden, "%q %q", tc.ts, tc.token)
	}
}
