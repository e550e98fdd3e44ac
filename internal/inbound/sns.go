package inbound

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // SNS SignatureVersion 1 is SHA1withRSA; version 2 is SHA256
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// SNS message types.
const (
	snsNotification    = "Notification"
	snsSubscription    = "SubscriptionConfirmation"
	snsUnsubscribeConf = "UnsubscribeConfirmation"
)

// SNSMessage is an Amazon SNS HTTP(S) delivery: a notification (its
// Message is SES's JSON) or a subscription (un)confirmation.
type SNSMessage struct {
	Type             string  `json:"Type"`
	MessageID        string  `json:"MessageId"`
	Token            string  `json:"Token"`
	TopicArn         string  `json:"TopicArn"`
	Subject          *string `json:"Subject"`
	Message          string  `json:"Message"`
	Timestamp        string  `json:"Timestamp"`
	SignatureVersion string  `json:"SignatureVersion"`
	Signature        string  `json:"Signature"`
	SigningCertURL   string  `json:"SigningCertURL"`
	SubscribeURL     string  `json:"SubscribeURL"`
	UnsubscribeURL   string  `json:"UnsubscribeURL"`
}

// ParseSNS reads an SNS message (it does not verify it).
func ParseSNS(body []byte) (SNSMessage, error) {
	var m SNSMessage
	if err := unmarshal(body, &m, "an Amazon SNS message"); err != nil {
		return m, err
	}
	switch m.Type {
	case snsNotification, snsSubscription, snsUnsubscribeConf:
	case "":
		return m, malformed("the SNS message has no Type")
	default:
		return m, malformed("the SNS message Type %q is not one this endpoint takes", oneLine(m.Type, 40))
	}
	if m.MessageID == "" || m.TopicArn == "" || m.Timestamp == "" {
		return m, malformed("the SNS message lacks MessageId, TopicArn or Timestamp")
	}
	return m, nil
}

// StringToSign is the SNS canonical text a message's signature covers:
// "Name\nvalue\n" for each signed field, in byte order of the names.
func (m SNSMessage) StringToSign() string {
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	add("Message", m.Message)
	add("MessageId", m.MessageID)
	if m.Type == snsNotification {
		if m.Subject != nil {
			add("Subject", *m.Subject)
		}
	} else {
		add("SubscribeURL", m.SubscribeURL)
	}
	add("Timestamp", m.Timestamp)
	if m.Type != snsNotification {
		add("Token", m.Token)
	}
	add("TopicArn", m.TopicArn)
	add("Type", m.Type)
	return b.String()
}

// snsHost is SNS's own endpoint in a region: sns.<region>.amazonaws.com,
// or sns.<region>.amazonaws.com.cn in the China regions. Nothing else
// under amazonaws.com will do: anyone can serve a file from an S3 bucket
// there.
var snsHost = regexp.MustCompile(`^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// isSNSHost reports whether u is https on SNS's own host, default port,
// no user.
func isSNSHost(u *url.URL) bool {
	return u.Scheme == "https" && u.User == nil && u.Port() == "" && snsHost.MatchString(u.Host)
}

// DefaultSNSCertURLAllowed accepts a signing certificate URL only over
// https, on sns.<region>.amazonaws.com(.cn) (default port), for a .pem
// file.
func DefaultSNSCertURLAllowed(u *url.URL) bool {
	return isSNSHost(u) && strings.HasSuffix(u.Path, ".pem")
}

// DefaultSNSSubscribeURLAllowed accepts a SubscribeURL only over https on
// sns.<region>.amazonaws.com(.cn) (default port).
func DefaultSNSSubscribeURLAllowed(u *url.URL) bool {
	return isSNSHost(u)
}

// SNSVerifier checks SNS messages' signatures and confirms subscriptions.
// The zero value accepts no topic; with TopicARNs set, certificates are
// fetched with a 10 s client, only from DefaultSNSCertURLAllowed's hosts.
type SNSVerifier struct {
	// Client fetches certificates and confirms subscriptions.
	Client *http.Client
	// CertURLAllowed decides which SigningCertURLs may be fetched
	// (default DefaultSNSCertURLAllowed; tests point it at their own
	// server).
	CertURLAllowed func(*url.URL) bool
	// SubscribeURLAllowed decides which SubscribeURLs are visited
	// (default DefaultSNSSubscribeURLAllowed).
	SubscribeURLAllowed func(*url.URL) bool
	// TopicARNs are the only topics accepted: none when empty.
	TopicARNs []string
	// Now is the clock for the certificate's validity (default time.Now).
	Now func() time.Time

	mu    sync.Mutex
	certs map[string]*x509.Certificate
}

const (
	maxCertBytes   = 64 << 10
	maxCachedCerts = 32
)

func (v *SNSVerifier) client() *http.Client {
	if v.Client != nil {
		return v.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// Verify checks m's signature against its signing certificate, and that
// the topic is allowed. ErrUnsigned: no signature; onceplan.ErrForbidden: a
// certificate URL not allowed, a bad signature, a topic not allowed;
// onceplan.ErrUnavailable: the certificate could not be fetched now.
func (v *SNSVerifier) Verify(ctx context.Context, m SNSMessage) error {
	if m.Signature == "" || m.SigningCertURL == "" {
		return fmt.Errorf("%w: the SNS message is not signed", ErrUnsigned)
	}
	if !contains(v.TopicARNs, m.TopicArn) {
		return fmt.Errorf("%w: the SNS topic is not one this endpoint accepts", onceplan.ErrForbidden)
	}
	var h crypto.Hash
	switch m.SignatureVersion {
	case "1":
		h = crypto.SHA1
	case "2":
		h = crypto.SHA256
	default:
		return fmt.Errorf("%w: SNS SignatureVersion must be 1 or 2", onceplan.ErrForbidden)
	}
	u, err := url.Parse(m.SigningCertURL)
	allowed := v.CertURLAllowed
	if allowed == nil {
		allowed = DefaultSNSCertURLAllowed
	}
	if err != nil || !allowed(u) {
		return fmt.Errorf("%w: the SNS SigningCertURL is not an https URL on sns.<region>.amazonaws.com(.cn)", onceplan.ErrForbidden)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return fmt.Errorf("%w: the SNS Signature is not base64", onceplan.ErrForbidden)
	}
	cert, err := v.cert(ctx, u.String())
	if err != nil {
		return err
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if t := now(); t.Before(cert.NotBefore) || t.After(cert.NotAfter) {
		return fmt.Errorf("%w: the SNS signing certificate is not valid now", onceplan.ErrForbidden)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("%w: the SNS signing certificate has no RSA key", onceplan.ErrForbidden)
	}
	var digest []byte
	text := []byte(m.StringToSign())
	if h == crypto.SHA1 {
		d := sha1.Sum(text) //nolint:gosec // SignatureVersion 1
		digest = d[:]
	} else {
		d := sha256.Sum256(text)
		digest = d[:]
	}
	if err := rsa.VerifyPKCS1v15(pub, h, digest, sig); err != nil {
		return fmt.Errorf("%w: the SNS signature does not verify", onceplan.ErrForbidden)
	}
	return nil
}

func (v *SNSVerifier) cert(ctx context.Context, raw string) (*x509.Certificate, error) {
	v.mu.Lock()
	c := v.certs[raw]
	v.mu.Unlock()
	if c != nil {
		return c, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the SNS SigningCertURL is not a URL", onceplan.ErrForbidden)
	}
	resp, err := v.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: fetching the SNS signing certificate: %v", onceplan.ErrUnavailable, redactURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: fetching the SNS signing certificate: HTTP %d", onceplan.ErrUnavailable, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCertBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the SNS signing certificate: %v", onceplan.ErrUnavailable, err)
	}
	if len(body) > maxCertBytes {
		return nil, fmt.Errorf("%w: the SNS signing certificate is larger than %d bytes", onceplan.ErrForbidden, maxCertBytes)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: the SNS signing certificate is not a PEM certificate", onceplan.ErrForbidden)
	}
	c, err = x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: the SNS signing certificate does not parse", onceplan.ErrForbidden)
	}
	v.mu.Lock()
	if v.certs == nil || len(v.certs) >= maxCachedCerts {
		v.certs = map[string]*x509.Certificate{}
	}
	v.certs[raw] = c
	v.mu.Unlock()
	return c, nil
}

// Confirm visits a verified SubscriptionConfirmation's SubscribeURL, which
// is how SNS learns the endpoint wants the topic's messages. Only a URL
// SubscribeURLAllowed accepts is visited.
func (v *SNSVerifier) Confirm(ctx context.Context, m SNSMessage) error {
	if m.Type != snsSubscription {
		return nil
	}
	u, err := url.Parse(m.SubscribeURL)
	allowed := v.SubscribeURLAllowed
	if allowed == nil {
		allowed = DefaultSNSSubscribeURLAllowed
	}
	if err != nil || !allowed(u) {
		return fmt.Errorf("%w: the SNS SubscribeURL is not an https URL on sns.<region>.amazonaws.com(.cn)", ErrMalformed)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: the SNS SubscribeURL is not a URL", ErrMalformed)
	}
	resp, err := v.client().Do(req)
	if err != nil {
		return fmt.Errorf("%w: confirming the SNS subscription: %v", onceplan.ErrUnavailable, redactURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: confirming the SNS subscription: HTTP %d", onceplan.ErrUnavailable, resp.StatusCode)
	}
	return nil
}

// redactURL keeps a transport error's cause without the URL it names
// (a SubscribeURL carries the subscription's token).
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
