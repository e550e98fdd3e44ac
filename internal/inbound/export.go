package inbound

// Evidence for unknowns: a provider's event export (SES event publishing
// JSON lines, a SendGrid Event Webhook batch, Mailgun webhooks or an Events
// API page, Postmark webhooks) read for what each event proves about one
// message. The webhook parsers read the same payloads for bounces and
// complaints; export.go, export_reader.go and export_proof.go reuse their
// types and their rules for finding our Message-ID, and add what only
// evidence needs: the events that prove a provider accepted a message (or
// never did).
//
// What each event proves, conservatively. The question a person answers
// when resolving an unknown is "did our call land": was the message
// accepted by the provider (then sending again makes a second message) or
// not (then the target must be sent once more).
//
//	SES       Send, Delivery, DeliveryDelay, Bounce, Complaint → delivered: SES accepted the message
//	          Reject, Rendering Failure                       → not delivered: SES did not send it
//	SendGrid  processed, deferred, delivered, bounce, spamreport → delivered: SendGrid accepted it
//	          dropped                                         → not delivered: SendGrid never sent it
//	Mailgun   accepted, delivered, failed, complained         → delivered: Mailgun accepted it
//	          rejected, and failed with a suppress-* reason   → not delivered: Mailgun never sent it
//	Postmark  Delivery, Bounce, SpamComplaint                 → delivered: Postmark accepted it
//
// Everything else (opens, clicks, unsubscribes, subscription changes)
// proves nothing either way here and is ignored. A bounce counts as
// delivered on purpose: for exactly-once it is our message, sent; it is
// the recipient's server that refused it (the bounce work suppresses the
// address).

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/onceplan/onceplan/ledger"
)

// MaxExportBytes bounds one export file.
const MaxExportBytes = 64 << 20

// Proof is one event of an export that proves something about a message.
type Proof struct {
	// Source names where the event came from: the file's name, or
	// "received webhook events" for the stored ones.
	Source string
	// Line is the line of the file where the event starts (0 for a
	// stored event; EventID then says which).
	Line    int
	EventID int64
	Kind    Kind
	// Event is the provider's own name for the event ("Delivery",
	// "processed").
	Event   string
	Outcome ledger.Outcome
	// Address is the recipient, as the provider wrote it.
	Address string
	// MessageID is the RFC 5322 Message-ID the event names (ours, when
	// the message was ours), in angle brackets; "" when none.
	MessageID string
	// EffectID is an Onceplan effect id the event carries (the
	// X-Onceplan-Effect header, or metadata); "" when none.
	EffectID          string
	ProviderMessageID string
	At                time.Time
	Detail            string
}

// Describe is the proof in one line, for people and for the reason a
// resolution records: "SES Delivery, message id <…>, at 2017-08-05 00:41:02 UTC (ses.jsonl line 3)".
func (p Proof) Describe() string {
	var b strings.Builder
	if k := kindName(p.Kind); k != "" {
		b.WriteString(k + " ")
	}
	b.WriteString(p.Event)
	switch {
	case p.MessageID != "":
		b.WriteString(", message id " + p.MessageID)
	case p.EffectID != "":
		b.WriteString(", effect " + p.EffectID)
	case p.ProviderMessageID != "":
		b.WriteString(", provider message id " + p.ProviderMessageID)
	}
	if p.Address != "" {
		b.WriteString(", to " + p.Address)
	}
	if !p.At.IsZero() {
		b.WriteString(", at " + p.At.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if p.Detail != "" {
		b.WriteString(" (" + p.Detail + ")")
	}
	switch {
	case p.Line > 0:
		b.WriteString(" [" + p.Source + " line " + strconv.Itoa(p.Line) + "]")
	case p.EventID > 0:
		b.WriteString(" [received webhook event " + strconv.FormatInt(p.EventID, 10) + "]")
	}
	return b.String()
}

func kindName(k Kind) string {
	switch k {
	case SES:
		return "SES"
	case SendGrid:
		return "SendGrid"
	case Mailgun:
		return "Mailgun"
	case Postmark:
		return "Postmark"
	}
	return string(k)
}

// Export is what ReadExport found in a file.
type Export struct {
	Name   string
	Proofs []Proof
	// Events counts the events read; Ignored those that prove nothing
	// (opens, clicks…).
	Events, Ignored int
}

// ExportError refuses an export file in one sentence naming its line.
type ExportError struct {
	Name   string
	Line   int
	Reason string
}

func (e *ExportError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("%s line %d: %s", e.Name, e.Line, e.Reason)
}

// ReadExport reads a provider's event export: JSON lines (SES event
// publishing through Firehose, one record a line), a JSON array of events
// (a SendGrid Event Webhook batch), single webhook objects one after the
// other (SES through SNS, Mailgun, Postmark), or a Mailgun Events API page
// ({"items": [...]}); one file may mix them. Each event's provider is told
// by its shape. A file with anything else in it is refused whole, with an
// *ExportError naming the line: a line skipped could be the one a person
// needed.
func ReadExport(r io.Reader, name string) (Export, error) {
	out := Export{Name: name}
	data, err := io.ReadAll(io.LimitReader(r, MaxExportBytes+1))
	if err != nil {
		return out, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > MaxExportBytes {
		return out, &ExportError{Name: name, Reason: fmt.Sprintf("the file is larger than %d MiB; split it", MaxExportBytes>>20)}
	}
	x := exportReader{name: name, data: data, out: &out}
	if err := x.read(); err != nil {
		return out, err
	}
	if out.Events == 0 {
		return out, &ExportError{Name: name, Reason: "the file holds no events (expected JSON lines, a JSON array or webhook objects from SES, SendGrid, Mailgun or Postmark)"}
	}
	return out, nil
}
