package inbound

import (
	"context"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Authentication errors. A request refused with one changes nothing.
var (
	// ErrUnsigned: the request carries no credentials (HTTP 401).
	ErrUnsigned = onceplan.New(onceplan.CodeUnauthenticated, "unauthenticated")
)

// Header names.
const (
	SendGridSignatureHeader = "X-Twilio-Email-Event-Webhook-Signature"
	SendGridTimestampHeader = "X-Twilio-Email-Event-Webhook-Timestamp"
	GenericSignatureHeader  = "X-Onceplan-Signature"
	GenericTimestampHeader  = "X-Onceplan-Timestamp"
)

// Endpoint is one configured webhook: a kind and the secret it is
// authenticated with. Its String never shows the secret.
type Endpoint struct {
	Kind Kind

	user, password string           // postmark: basic auth
	sendgridKey    *ecdsa.PublicKey // sendgrid
	hmacKey        []byte           // mailgun signing key, generic secret
	sns            *SNSVerifier     // ses
	topics         []string         // ses allow-list, as configured
}

// GoString is String: %#v shows no secret either.
func (e Endpoint) GoString() string { return e.String() }

// String is "kind=…": the spec redacted (value receiver, so that a
// copy of an Endpoint printed with %v shows no secret either).
func (e Endpoint) String() string {
	if e.Kind == SES {
		return string(e.Kind) + "=" + strings.Join(e.topics, ";")
	}
	return string(e.Kind) + "=<redacted>"
}

// SNS is an SES endpoint's verifier (nil for other kinds): tests point its
// certificate and subscribe URL checks at their own server.
func (e *Endpoint) SNS() *SNSVerifier { return e.sns }

// ParseEndpoint reads "KIND=SPEC", the --webhook flag's value:
//
//	ses=TOPIC-ARN[;TOPIC-ARN…]      SNS signatures, from these topics only
//	postmark=USER:PASSWORD          HTTP basic auth
//	sendgrid=BASE64-PUBLIC-KEY      the Event Webhook's ECDSA verification key
//	mailgun=SIGNING-KEY             the HTTP webhook signing key
//	generic=SECRET                  HMAC-SHA256 key (at least 16 bytes)
//
// Errors name the kind, never the secret.
func ParseEndpoint(s string) (*Endpoint, error) {
	k, spec, ok := strings.Cut(strings.TrimSpace(s), "=")
	kind := Kind(strings.ToLower(strings.TrimSpace(k)))
	if !ok || !validKind(kind) {
		return nil, fmt.Errorf("--webhook: %q must be KIND=SECRET with KIND one of %s", redactSpec(s), kindList())
	}
	e := &Endpoint{Kind: kind}
	switch kind {
	case SES:
		for _, t := range strings.Split(spec, ";") {
			if t = strings.TrimSpace(t); t != "" {
				if !strings.HasPrefix(t, "arn:") {
					return nil, fmt.Errorf("--webhook ses=: %q is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)", t)
				}
				e.topics = append(e.topics, t)
			}
		}
		// SNS signs for every AWS account alike: a valid signature says
		// only that some account's topic sent it, so the topic is what
		// says it is ours.
		if len(e.topics) == 0 {
			return nil, errors.New("--webhook ses=: name the SNS topics to take bounces from, as ses=arn:aws:sns:REGION:ACCOUNT:NAME[;ARN…], since without them a topic of any AWS account could post here")
		}
		e.sns = &SNSVerifier{TopicARNs: e.topics}
	case Postmark:
		u, p, ok := strings.Cut(spec, ":")
		if !ok || u == "" || p == "" {
			return nil, errors.New("--webhook postmark=: the secret must be USER:PASSWORD (the basic auth credentials in Postmark's webhook URL)")
		}
		e.user, e.password = u, p
	case SendGrid:
		der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(spec))
		if err != nil {
			return nil, errors.New("--webhook sendgrid=: the secret must be the Event Webhook's verification key, base64 (as SendGrid shows it)")
		}
		pub, err := x509.ParsePKIXPublicKey(der)
		if err != nil {
			return nil, errors.New("--webhook sendgrid=: the verification key is not a public key (base64 of DER)")
		}
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			return nil, errors.New("--webhook sendgrid=: the verification key is not an ECDSA key")
		}
		e.sendgridKey = ec
	case Mailgun, Generic:
		if len(spec) < 16 {
			return nil, fmt.Errorf("--webhook %s=: the secret must be at least 16 characters", kind)
		}
		e.hmacKey = []byte(spec)
	}
	return e, nil
}

func redactSpec(s string) string {
	k, _, ok := strings.Cut(s, "=")
	if ok {
		return oneLine(k, 40) + "=…"
	}
	return "…"
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Endpoints are the configured webhooks, one per kind.
type Endpoints map[Kind]*Endpoint

// ParseEndpoints reads the --webhook flags, or when there are none the
// ONCEPLAN_WEBHOOKS variable (comma-separated KIND=SECRET), as --provider
// and ONCEPLAN_PROVIDERS go. A kind given twice is refused.
func ParseEndpoints(flags []string, env string) (Endpoints, error) {
	specs, where := flags, "--webhook"
	if len(flags) == 0 {
		specs, where = strings.Split(env, ","), "ONCEPLAN_WEBHOOKS"
	}
	out := Endpoints{}
	for _, f := range specs {
		if len(flags) == 0 && strings.TrimSpace(f) == "" {
			continue
		}
		e, err := ParseEndpoint(f)
		if err != nil {
			if where != "--webhook" {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			return nil, err
		}
		if out[e.Kind] != nil {
			return nil, fmt.Errorf("%s: %s is given twice", where, e.Kind)
		}
		out[e.Kind] = e
	}
	return out, nil
}

// Names lists the configured kinds, sorted (what the admin page may show).
func (es Endpoints) Names() []string {
	var out []string
	for k := range es {
		out = append(out, string(k))
	}
	slices.Sort(out)
	return out
}

// Request is what authentication reads of an HTTP request.
type Request struct {
	Header http.Header
	Body   []byte
}

// Authenticate checks that the request comes from the endpoint's provider
// and returns what its signature covers, for Accept to judge its
// freshness and, for Mailgun, its one-time token; it does not look at the
// clock. For SES it verifies the SNS signature (fetching the
// certificate). The error wraps ErrUnsigned, onceplan.ErrForbidden,
// onceplan.ErrUnavailable or ErrMalformed (an SNS message that does not parse
// cannot be checked).
func (e *Endpoint) Authenticate(ctx context.Context, r Request) (Signed, error) {
	signed := Signed{Kind: e.Kind}
	switch e.Kind {
	case SES:
		m, err := ParseSNS(r.Body)
		if err != nil {
			return signed, err
		}
		if err := e.sns.Verify(ctx, m); err != nil {
			return signed, err
		}
		at, err := time.Parse(time.RFC3339Nano, m.Timestamp)
		if err != nil {
			return signed, fmt.Errorf("%w: the SNS Timestamp is not an ISO 8601 time", onceplan.ErrForbidden)
		}
		signed.SignedAt = at
		return signed, nil
	case Postmark:
		u, p, ok := basicAuth(r.Header.Get("Authorization"))
		if !ok {
			return signed, fmt.Errorf("%w: HTTP basic auth is required", ErrUnsigned)
		}
		// Both compared in full, whichever differs.
		uOK := subtle.ConstantTimeCompare([]byte(u), []byte(e.user))
		pOK := subtle.ConstantTimeCompare([]byte(p), []byte(e.password))
		if uOK&pOK != 1 {
			return signed, fmt.Errorf("%w: wrong user or password", onceplan.ErrForbidden)
		}
		// Basic auth signs nothing, no time either
		// (docs/guide/mail-real-people.md, "Postmark signs nothing": allow
		// Postmark's addresses only).
		return signed, nil
	case SendGrid:
		sig, ts := r.Header.Get(SendGridSignatureHeader), r.Header.Get(SendGridTimestampHeader)
		if sig == "" || ts == "" {
			return signed, fmt.Errorf("%w: the %s and %s headers are required", ErrUnsigned, SendGridSignatureHeader, SendGridTimestampHeader)
		}
		der, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			return signed, fmt.Errorf("%w: the signature is not base64", onceplan.ErrForbidden)
		}
		sum := sha256.Sum256(append([]byte(ts), r.Body...))
		if !ecdsa.VerifyASN1(e.sendgridKey, sum[:], der) {
			return signed, fmt.Errorf("%w: the signature does not verify", onceplan.ErrForbidden)
		}
		if signed.SignedAt, err = unixSeconds(ts); err != nil {
			return signed, fmt.Errorf("%w: the %s is not a Unix time", onceplan.ErrForbidden, SendGridTimestampHeader)
		}
		return signed, nil
	case Mailgun:
		var b mailgunBody
		if err := unmarshal(r.Body, &b, "a Mailgun webhook object"); err != nil {
			return signed, err
		}
		s := b.Signature
		if s == nil || s.Signature == "" || s.Token == "" || s.Timestamp == "" {
			return signed, fmt.Errorf("%w: the body's signature {timestamp, token, signature} is required", ErrUnsigned)
		}
		if !hmacHexEqual(e.hmacKey, []byte(s.Timestamp+s.Token), s.Signature) {
			return signed, fmt.Errorf("%w: the signature does not verify", onceplan.ErrForbidden)
		}
		var err error
		if signed.SignedAt, err = unixSeconds(s.Timestamp); err != nil {
			return signed, fmt.Errorf("%w: the signature's timestamp is not a Unix time", onceplan.ErrForbidden)
		}
		// Mailgun's tokens are 50 characters: a much longer one, or one
		// with a NUL (PostgreSQL's text holds none), is not Mailgun's and
		// could not be taken.
		if len(s.Token) > maxToken || strings.ContainsRune(s.Token, 0) {
			return signed, fmt.Errorf("%w: the signature's token is not one Mailgun makes", onceplan.ErrForbidden)
		}
		// The signature covers the token, not the event: the token is
		// what binds it to this content (Accept, inbound_token).
		signed.Token = s.Token
		if signed.Digest, err = canonicalDigest(r.Body); err != nil {
			return signed, malformed("the body is not a Mailgun webhook object (%s)", jsonProblem(err))
		}
		return signed, nil
	case Generic:
		h, ts := r.Header.Get(GenericSignatureHeader), r.Header.Get(GenericTimestampHeader)
		if h == "" {
			return signed, fmt.Errorf("%w: the %s and %s headers are required", ErrUnsigned, GenericSignatureHeader, GenericTimestampHeader)
		}
		if strings.HasPrefix(h, "sha256=") {
			// The first form signed the body alone: one captured request
			// could be replayed for ever.
			return signed, fmt.Errorf("%w: the %s form sha256= signs no time and is no longer taken: sign v1= over the %s, a dot and the body", onceplan.ErrForbidden, GenericSignatureHeader, GenericTimestampHeader)
		}
		if ts == "" {
			return signed, fmt.Errorf("%w: the %s and %s headers are required", ErrUnsigned, GenericSignatureHeader, GenericTimestampHeader)
		}
		at, err := unixSeconds(ts)
		if err != nil {
			return signed, fmt.Errorf("%w: the %s is not a Unix time", onceplan.ErrForbidden, GenericTimestampHeader)
		}
		hexSig, ok := strings.CutPrefix(h, genericVersion)
		if !ok || !hmacHexEqual(e.hmacKey, genericSigned(ts, r.Body), hexSig) {
			return signed, fmt.Errorf("%w: the signature does not verify", onceplan.ErrForbidden)
		}
		signed.SignedAt = at
		return signed, nil
	}
	return signed, fmt.Errorf("%w: unknown kind", onceplan.ErrForbidden)
}

// maxToken bounds a Mailgun token (inbound_token holds 200 characters).
const maxToken = 200

// unixSeconds reads a signed Unix time in seconds.
func unixSeconds(s string) (time.Time, error) {
	sec, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	// Beyond ±10,000 years no provider signs; time.Unix would wrap.
	const limit = 10_000 * 365 * 24 * 3600
	if sec < -limit || sec > limit {
		return time.Time{}, errors.New("out of range")
	}
	return time.Unix(sec, 0).UTC(), nil
}

// genericVersion prefixes a generic signature: the scheme of Onceplan's
// own notifications (notify.Sign), so that one sender library serves
// both.
const genericVersion = "v1="

func genericSigned(ts string, body []byte) []byte {
	msg := make([]byte, 0, len(ts)+1+len(body))
	msg = append(msg, ts...)
	msg = append(msg, '.')
	return append(msg, body...)
}

func hmacHexEqual(key, msg []byte, hexSig string) bool {
	got, err := hex.DecodeString(strings.TrimSpace(hexSig))
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return hmac.Equal(got, m.Sum(nil))
}

func basicAuth(h string) (user, pass string, ok bool) {
	const prefix = "Basic "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}
