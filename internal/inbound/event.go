// Package inbound takes in what email providers report after a message
// left: bounces and spam complaints, delivered to POST /webhooks/{kind} by
// Amazon SES (through SNS), Postmark, SendGrid, Mailgun, or anything that
// speaks our own small generic format.
//
// It owns three things. Authentication: each kind proves the request came
// from the provider its own way (an SNS signature checked against the
// signing certificate, HTTP basic auth, an ECDSA signature, HMACs); a
// request that fails it changes nothing, and so does one whose signature
// is stale or already used on other content (Accept, fresh.go): a
// captured request cannot be turned into another. Parsing: each provider's JSON
// becomes Events of three types (hard bounce, soft bounce, complaint);
// everything else a provider reports (deliveries, opens) is ignored.
// Recording (Record): each event is stored raw, write-once, once however
// often the provider re-delivers it (unique on kind and the provider's
// event id), tied to the effect it reports on where our deterministic
// Message-ID or the provider's message id (the effect's receipt) says
// which; a hard bounce or a complaint suppresses the address
// (package suppression) in the same transaction.
//
// It also reads the same providers' event exports as evidence for the
// targets whose effect is unknown (export.go, ReadExport): there a
// delivery or an acceptance counts too, and Propose matches what each
// event proves to the unknown targets, for a person to confirm. It
// proposes; it never resolves.
//
// The package knows no HTTP framework: web/webhook is the route.
package inbound

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Kind names a provider's webhook format: the {kind} of /webhooks/{kind}.
type Kind string

// Kinds.
const (
	SES      Kind = "ses"
	Postmark Kind = "postmark"
	SendGrid Kind = "sendgrid"
	Mailgun  Kind = "mailgun"
	Generic  Kind = "generic"
)

// Kinds lists every kind, in the order the documentation gives them.
var Kinds = []Kind{SES, Postmark, SendGrid, Mailgun, Generic}

func validKind(k Kind) bool {
	for _, x := range Kinds {
		if k == x {
			return true
		}
	}
	return false
}

// Type is what an event says happened to a message.
type Type string

// Types. A provider's other events (delivered, opened, clicked, deferred
// with no bounce) are not recorded.
const (
	HardBounce Type = "hard_bounce" // the address does not take mail: suppressed
	SoftBounce Type = "soft_bounce" // a temporary failure: counted per target
	Complaint  Type = "complaint"   // the recipient marked it as spam: suppressed
)

// Suppresses reports whether an event of this type suppresses its address.
func (t Type) Suppresses() bool { return t == HardBounce || t == Complaint }

// Event is one bounce or complaint, as parsed from a provider's payload.
type Event struct {
	Kind Kind
	// ProviderEventID is the provider's own id of the event (an SNS
	// MessageId, Postmark's bounce ID, sg_event_id, Mailgun's event id,
	// the generic "id"), or "sha256:" + the hex digest of Raw when the
	// provider gives none. A re-delivery carries the same.
	ProviderEventID string
	Type            Type
	// Address is the recipient the event is about.
	Address string
	// MessageID is the RFC 5322 Message-ID of the message the event is
	// about, with its angle brackets, when the payload names it.
	MessageID string
	// ProviderMessageID is the provider's own id of the message (SES's
	// messageId, Postmark's MessageID, sg_message_id), when it has one.
	ProviderMessageID string
	// Detail is the provider's reason in one line (a bounce type, an SMTP
	// diagnostic), for people.
	Detail string
	// At is when the provider says it happened (zero when it does not).
	At time.Time
	// Raw is the event as the provider sent it.
	Raw []byte
}

// ErrMalformed wraps every refusal of a payload that does not parse; its
// message is one sentence saying what is wrong.
var ErrMalformed = onceplan.New(onceplan.CodeInvalid, "malformed")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// rawID is the event id of an event whose provider gives none.
func rawID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// normalizeMessageID returns a Message-ID in angle brackets, trimmed
// ("" for nothing). Providers report it with or without the brackets.
func normalizeMessageID(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if !strings.HasPrefix(s, "<") {
		s = "<" + s
	}
	if !strings.HasSuffix(s, ">") {
		s += ">"
	}
	return s
}

// oneLine bounds a provider's text to one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) > n {
		s = s[:n]
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// Parse reads a payload of kind into its events. It does not authenticate:
// call Endpoint.Authenticate first. For SES the body is the SNS message;
// a subscription confirmation has no events (see ParseSNS).
func Parse(kind Kind, body []byte) ([]Event, error) {
	switch kind {
	case SES:
		m, err := ParseSNS(body)
		if err != nil {
			return nil, err
		}
		if m.Type != snsNotification {
			return nil, nil
		}
		return parseSES(m, body)
	case Postmark:
		return parsePostmark(body)
	case SendGrid:
		return parseSendGrid(body)
	case Mailgun:
		return parseMailgun(body)
	case Generic:
		return parseGeneric(body)
	}
	return nil, fmt.Errorf("inbound: unknown kind %q", kind)
}
