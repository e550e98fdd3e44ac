package provider

// SMTP relays that deduplicate by a message header: smtp://…?
// idempotency_header=NAME puts the effect id in header NAME of every
// message, and declares that the relay accepts a repeat with the same
// value and delivers nothing new, for its window from the first message
// with it. Recovery then sends again with the same header while that window
// is open, as it does for resend://.

import (
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// KnownIdempotencyHeaders are the SMTP idempotency headers whose relays'
// windows are documented, by lower-case name:
//   - Resend-Idempotency-Key: Resend's SMTP relay, 24 hours (as its API);
//   - X-EE-Idempotency-Key: EmailEngine's SMTP interface, which keeps keys
//     in day buckets and looks back at least 24 hours.
//
// Another header name needs dedupe_window= said explicitly.
var KnownIdempotencyHeaders = map[string]time.Duration{
	"resend-idempotency-key": 24 * time.Hour,
	"x-ee-idempotency-key":   24 * time.Hour,
}

// headersOnceplanWrites are the headers the SMTP provider sets itself; an
// idempotency header must not be one of them.
var headersOnceplanWrites = []string{
	"from", "to", "cc", "bcc", "subject", "date", "message-id", "user-agent", "mime-version",
	"content-type", "content-transfer-encoding", "list-unsubscribe", "list-unsubscribe-post",
	strings.ToLower(string(effectHeader)),
}

// validHeaderName reports whether v is an RFC 5322 field name (printable
// ASCII but ':', at most 76 characters so it fits a folded line) that is
// not one of the headers Onceplan writes itself.
func validHeaderName(v string) bool {
	if v == "" || len(v) > 76 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 33 || c > 126 || c == ':' {
			return false
		}
	}
	lower := strings.ToLower(v)
	for _, h := range headersOnceplanWrites {
		if lower == h {
			return false
		}
	}
	return true
}

// configureDedupe applies idempotency_header= and dedupe_window= to an
// SMTP provider.
func (p *smtpProvider) configureDedupe(o options) error {
	if o.idempotencyHeader == "" {
		if o.dedupeWindowSet {
			return errorf(p.name, "dedupe_window applies to an smtp provider only with idempotency_header=NAME")
		}
		return nil
	}
	p.idemHeader = o.idempotencyHeader
	switch w, known := KnownIdempotencyHeaders[strings.ToLower(o.idempotencyHeader)]; {
	case o.dedupeWindowSet:
		p.dedupeWindow = o.dedupeWindow
	case known:
		p.dedupeWindow = w
	default:
		return errorf(p.name, "idempotency_header %q has no documented window: say how long the relay deduplicates by it with dedupe_window=DURATION", o.idempotencyHeader)
	}
	return nil
}

// withDedupe adds the relay's deduplication to c.
func (p *smtpProvider) withDedupe(c Capabilities) Capabilities {
	if p.idemHeader != "" {
		c.Dedupe, c.DedupeWindow = true, p.dedupeWindow
	}
	return c
}

// markIdempotency puts the effect id in the idempotency header.
func (p *smtpProvider) markIdempotency(m *gomail.Msg, r Request) {
	if p.idemHeader != "" {
		m.SetGenHeader(gomail.Header(p.idemHeader), EffectID(r.Key, r.Epoch))
	}
}
