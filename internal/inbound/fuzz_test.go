package inbound_test

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
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// The fuzzers: no payload or header makes a parser or an authentication
// function panic; what a parser returns is bounded and complete; what
// authentication refuses is refused with one of its errors, in one line
// naming no secret, and what it takes carries what Accept needs. The
// seeds are the documented examples (testdata), signed here the way
// each provider signs them, and testdata/fuzz/<Fuzz…>/ holds more (plain
// `go test` replays them all).

// examples returns the documented example payloads of a kind.
func examples(tb testing.TB, kind inbound.Kind) [][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", string(kind)+"_*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no documented example of %s: %v", kind, err)
	}
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkEvents holds a parser to its promises: an error returns no
// events, wraps ErrMalformed, and is one line; each event is one of the
// three types, with a recipient and an id, bounded, without NUL.
func checkEvents(t *testing.T, kind inbound.Kind, events []inbound.Event, err error) {
	t.Helper()
	if err != nil {
		if events != nil {
			t.Fatalf("events with an error")
		}
		if !errors.Is(err, inbound.ErrMalformed) {
			t.Fatalf("%s: a parse error that is not ErrMalformed: %v", kind, err)
		}
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("%s: an error of more than one line: %q", kind, err)
		}
		return
	}
	if len(events) > inbound.MaxEventsPerRequest {
		t.Fatalf("%d events", len(events))
	}
	for _, e := range events {
		if e.Kind != kind {
			t.Fatalf("kind %q from the %s parser", e.Kind, kind)
		}
		switch e.Type {
		case inbound.HardBounce, inbound.SoftBounce, inbound.Complaint:
		default:
			t.Fatalf("type %q", e.Type)
		}
		if e.Address == "" || len(e.Address) > 320 || e.ProviderEventID == "" || len(e.ProviderEventID) > 300 {
			t.Fatalf("unbounded or incomplete event %+v", e)
		}
		if strings.Contains(e.Address+e.ProviderEventID+e.MessageID+e.ProviderMessageID+e.Detail, "\x00") {
			t.Fatalf("NUL in %+v", e)
		}
		if len(e.Detail) > 500 || !utf8.ValidString(e.Detail) || strings.ContainsAny(e.Detail, "\r\n") {
			t.Fatalf("detail %q", e.Detail)
		}
		if e.MessageID != "" && (!strings.HasPrefix(e.MessageID, "<") || !strings.HasSuffix(e.MessageID, ">")) {
			t.Fatalf("message id %q", e.MessageID)
		}
		if len(e.Raw) == 0 {
			t.Fatalf("no raw bytes in %+v", e)
		}
	}
}

// FuzzParse: any kind's parser, chosen by the first argument.
func FuzzParse(f *testing.F) {
	for i, k := range inbound.Kinds {
		for _, b := range examples(f, k) {
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(2), []byte(`[{"event":"bounce","email":"a@b.c"},{"event":"spamreport"}]`))
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		kind := inbound.Kinds[int(k)%len(inbound.Kinds)]
		events, err := inbound.Parse(kind, body)
		checkEvents(t, kind, events, err)
	})
}

// fuzzParser is one kind's parser fuzzed on its own, from its examples.
func fuzzParser(f *testing.F, kind inbound.Kind) {
	for _, b := range examples(f, kind) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := inbound.Parse(kind, body)
		checkEvents(t, kind, events, err)
		if err == nil {
			again, err := inbound.Parse(kind, body)
			if err != nil || len(again) != len(events) {
				t.Fatalf("a second parse differs")
			}
			for i := range events {
				if again[i].ProviderEventID != events[i].ProviderEventID {
					t.Fatalf("event ids differ from one parse to the next: a re-delivery would be recorded twice")
				}
			}
		}
	})
}

func FuzzParseSES(f *testing.F)      { fuzzParser(f, inbound.SES) }
func FuzzParsePostmark(f *testing.F) { fuzzParser(f, inbound.Postmark) }
func FuzzParseSendGrid(f *testing.F) { fuzzParser(f, inbound.SendGrid) }
func FuzzParseMailgun(f *testing.F)  { fuzzParser(f, inbound.Mailgun) }
func FuzzParseGeneric(f *testing.F)  { fuzzParser(f, inbound.Generic) }

// FuzzParseSNS: the SNS envelope, and the canonical text its signature
// covers.
func FuzzParseSNS(f *testing.F) {
	for _, b := range examples(f, inbound.SES) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := inbound.ParseSNS(body)
		if err != nil {
			if !errors.Is(err, inbound.ErrMalformed) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("refusal %q", err)
			}
			return
		}
		if m.MessageID == "" || m.TopicArn == "" || m.Timestamp == "" {
			t.Fatalf("taken without its ids: %+v", m)
		}
		if !strings.HasSuffix(m.StringToSign(), "Type\n"+m.Type+"\n") {
			t.Fatalf("the signed text does not end with the Type")
		}
	})
}

// --- authentication ---

// Secrets of the fuzzed endpoints: no refusal may show one.
const (
	fuzzMailgunKey = "key-fuzz-0123456789abcdef"
	fuzzGeneric    = "generic-fuzz-0123456789"
	fuzzPMUser     = "hooks"
	fuzzPMPassword = "pm-fuzz-password"
)

// checkAuth holds authentication to its promises: a refusal wraps one of
// its errors, is one line and shows no secret; what is taken is of the
// endpoint's kind.
func checkAuth(t *testing.T, kind inbound.Kind, s inbound.Signed, err error, secrets ...string) {
	t.Helper()
	if s.Kind != kind {
		t.Fatalf("Signed of kind %q from a %s endpoint", s.Kind, kind)
	}
	if err == nil {
		_ = s.Fresh(time.Now()) // whatever the signed time, judging it does not panic
		return
	}
	if !errors.Is(err, inbound.ErrUnsigned) && !errors.Is(err, onceplan.ErrForbidden) &&
		!errors.Is(err, inbound.ErrMalformed) && !errors.Is(err, onceplan.ErrUnavailable) {
		t.Fatalf("%s: a refusal with no class: %v", kind, err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("%s: a refusal of more than one line: %q", kind, msg)
	}
	for _, secret := range secrets {
		if strings.Contains(msg, secret) {
			t.Fatalf("%s: the refusal shows the secret: %q", kind, msg)
		}
	}
}

// resignMailgun replaces a Mailgun body's signature with the HMAC of its
// own timestamp and token under key.
func resignMailgun(tb testing.TB, body []byte, key string) []byte {
	tb.Helper()
	var b struct {
		Signature struct{ Timestamp, Token, Signature string } `json:"signature"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		tb.Fatal(err)
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(b.Signature.Timestamp + b.Signature.Token))
	return bytes.Replace(body, []byte(b.Signature.Signature), []byte(hex.EncodeToString(m.Sum(nil))), 1)
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FuzzAuthenticateMailgun: Mailgun's signature covers only its timestamp
// and token, so mutations of the event keep it valid: the fuzzer reaches
// the token's checks and the content digest a token is bound to.
func FuzzAuthenticateMailgun(f *testing.F) {
	ep, err := inbound.ParseEndpoint("mailgun=" + fuzzMailgunKey)
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range examples(f, inbound.Mailgun) {
		f.Add(resignMailgun(f, b, fuzzMailgunKey))
		f.Add(b) // the documented placeholder signature: refused
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ep.Authenticate(context.Background(), inbound.Request{Body: body})
		checkAuth(t, inbound.Mailgun, s, err, fuzzMailgunKey)
		if err != nil {
			return
		}
		if s.Token == "" || len(s.Token) > 200 || strings.ContainsRune(s.Token, 0) || !hex64.MatchString(s.Digest) || s.SignedAt.IsZero() {
			t.Fatalf("taken without a storable token, digest and time: %+v", s)
		}
		// The digest is of the content: another event under the same
		// signature block gets another digest.
		other := bytes.Replace(body, []byte(`"event-data"`), []byte(`"event-data":{"event":"x"},"other"`), 1)
		if !bytes.Equal(other, body) {
			if s2, err := ep.Authenticate(context.Background(), inbound.Request{Body: other}); err == nil && s2.Digest == s.Digest {
				t.Fatalf("two contents, one digest")
			}
		}
	})
}

// FuzzAuthenticateSendGrid: the timestamp header, the signature header
// and the body.
func FuzzAuthenticateSendGrid(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		f.Fatal(err)
	}
	ep, err := inbound.ParseEndpoint("sendgrid=" + base64.StdEncoding.EncodeToString(pub))
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range examples(f, inbound.SendGrid) {
		for _, ts := range []string{"1513299569", "-1", "99999999999999999999", " 1513299569"} {
			d := sha256.Sum256(append([]byte(ts), b...))
			sig, err := ecdsa.SignASN1(rand.Reader, key, d[:])
			if err != nil {
				f.Fatal(err)
			}
			f.Add(ts, base64.StdEncoding.EncodeToString(sig), b)
		}
	}
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(inbound.SendGridTimestampHeader, ts)
		h.Set(inbound.SendGridSignatureHeader, sig)
		s, err := ep.Authenticate(context.Background(), inbound.Request{Header: h, Body: body})
		checkAuth(t, inbound.SendGrid, s, err)
		if err == nil {
			sec, perr := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
			if perr != nil || !s.SignedAt.Equal(time.Unix(sec, 0)) {
				t.Fatalf("taken with a signed time %s that is not the header's %q", s.SignedAt, ts)
			}
		}
	})
}

// FuzzAuthenticateGeneric: the timestamp header, the signature header
// and the body.
func FuzzAuthenticateGeneric(f *testing.F) {
	ep, err := inbound.ParseEndpoint("generic=" + fuzzGeneric)
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range examples(f, inbound.Generic) {
		f.Add("1764583200", inbound.Sign(fuzzGeneric, 1764583200, b), b)
		f.Add("1764583200", "sha256="+strings.TrimPrefix(inbound.Sign(fuzzGeneric, 1764583200, b), "v1="), b)
		f.Add("", inbound.Sign(fuzzGeneric, 0, b), b)
	}
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(inbound.GenericTimestampHeader, ts)
		h.Set(inbound.GenericSignatureHeader, sig)
		s, err := ep.Authenticate(context.Background(), inbound.Request{Header: h, Body: body})
		checkAuth(t, inbound.Generic, s, err, fuzzGeneric)
		if err == nil && !strings.HasPrefix(sig, "v1=") {
			t.Fatalf("taken without a v1 signature: %q", sig)
		}
	})
}

// FuzzAuthenticatePostmark: the Authorization header.
func FuzzAuthenticatePostmark(f *testing.F) {
	ep, err := inbound.ParseEndpoint("postmark=" + fuzzPMUser + ":" + fuzzPMPassword)
	if err != nil {
		f.Fatal(err)
	}
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte(fuzzPMUser+":"+fuzzPMPassword))
	for _, a := range []string{good, "basic " + base64.StdEncoding.EncodeToString([]byte(fuzzPMUser+":")), "Basic", "Bearer x", ""} {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, authorization string) {
		s, err := ep.Authenticate(context.Background(), inbound.Request{Header: http.Header{"Authorization": {authorization}}})
		checkAuth(t, inbound.Postmark, s, err, fuzzPMPassword)
		if err == nil && !s.SignedAt.IsZero() {
			t.Fatalf("basic auth signs no time")
		}
	})
}

// memoryTransport serves one certificate for any request, without a
// network (and without the goroutines of a real transport).
type memoryTransport struct{ pem []byte }

func (m memoryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(m.pem)), Header: http.Header{}, Request: r}, nil
}

// FuzzAuthenticateSES: SNS messages, signed with a certificate served
// from memory under the production URL checks.
func FuzzAuthenticateSES(f *testing.F) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sns.amazonaws.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		f.Fatal(err)
	}
	var topic string
	for _, b := range examples(f, inbound.SES) {
		m, err := inbound.ParseSNS(b)
		if err != nil {
			f.Fatal(err)
		}
		topic = m.TopicArn
		f.Add(b) // the documented placeholder signature: refused
		for _, v := range []string{"1", "2"} {
			h, hash := crypto.SHA256, sha256.Sum256([]byte(m.StringToSign()))
			digest := hash[:]
			if v == "1" {
				h, digest = crypto.SHA1, sha1Sum([]byte(m.StringToSign()))
			}
			sig, err := rsa.SignPKCS1v15(rand.Reader, key, h, digest)
			if err != nil {
				f.Fatal(err)
			}
			m.SignatureVersion, m.Signature = v, base64.StdEncoding.EncodeToString(sig)
			out, err := json.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(out)
		}
	}
	ep, err := inbound.ParseEndpoint("ses=" + topic)
	if err != nil {
		f.Fatal(err)
	}
	ep.SNS().Client = &http.Client{Transport: memoryTransport{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ep.Authenticate(context.Background(), inbound.Request{Body: body})
		checkAuth(t, inbound.SES, s, err)
		if err == nil && s.SignedAt.IsZero() {
			t.Fatalf("an SNS message taken without its Timestamp")
		}
	})
}

func sha1Sum(b []byte) []byte {
	d := sha1.Sum(b) //nolint:gosec // SNS SignatureVersion 1
	return d[:]
}
