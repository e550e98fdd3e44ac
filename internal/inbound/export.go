package inbound

// Evidence for unknowns: a provider's event export (SES event publishing
// JSON lines, a SendGrid Event Webhook batch, Mailgun webhooks or an Events
// API page, Postmark webhooks) read for what each event proves about one
// message. The webhook parsers above read the same payloads for bounces
// and complaints; this file reuses their types and their rules for finding
// our Message-ID, and adds what only evidence needs: the events that prove
// a provider accepted a message (or never did).
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
	"bytes"
	"encoding/json"
	"errors"
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

// Verdicts of each provider's event names (see the table at the top).
var exportVerdicts = map[Kind]map[string]ledger.Outcome{
	SES: {"Send": ledger.Delivered, "Delivery": ledger.Delivered, "DeliveryDelay": ledger.Delivered,
		"Bounce": ledger.Delivered, "Complaint": ledger.Delivered,
		"Reject": ledger.NotDelivered, "Rendering Failure": ledger.NotDelivered},
	SendGrid: {"processed": ledger.Delivered, "deferred": ledger.Delivered, "delivered": ledger.Delivered,
		"bounce": ledger.Delivered, "spamreport": ledger.Delivered, "dropped": ledger.NotDelivered},
	Mailgun: {"accepted": ledger.Delivered, "delivered": ledger.Delivered, "failed": ledger.Delivered,
		"complained": ledger.Delivered, "rejected": ledger.NotDelivered},
	Postmark: {"Delivery": ledger.Delivered, "Bounce": ledger.Delivered, "SpamComplaint": ledger.Delivered},
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

type exportReader struct {
	name string
	data []byte
	out  *Export
}

// lineAt is the line of the first byte at or after off that is not white
// space or a comma.
func (x *exportReader) lineAt(off int) int {
	for off < len(x.data) && strings.IndexByte(" \t\r\n,", x.data[off]) >= 0 {
		off++
	}
	return 1 + bytes.Count(x.data[:min(off, len(x.data))], []byte{'\n'})
}

func (x *exportReader) fail(off int, format string, args ...any) error {
	return &ExportError{Name: x.name, Line: x.lineAt(off), Reason: fmt.Sprintf(format, args...)}
}

// syntaxError names the line a decoder stopped at: decBase is where the
// decoder's input starts in the file, start where the value began.
func (x *exportReader) syntaxError(decBase, start int, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &ExportError{Name: x.name, Line: 1 + bytes.Count(x.data[:min(decBase+int(se.Offset), len(x.data))], []byte{'\n'}),
			Reason: "this is not valid JSON (" + se.Error() + ")"}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &ExportError{Name: x.name, Line: x.lineAt(start), Reason: "the JSON value starting here is cut short"}
	}
	return x.fail(start, "this is not valid JSON (%s)", jsonProblem(err))
}

func (x *exportReader) read() error {
	dec := json.NewDecoder(bytes.NewReader(x.data))
	for {
		start := int(dec.InputOffset())
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return x.syntaxError(0, start, err)
		}
		start = skipSpace(x.data, start)
		switch raw[0] {
		case '[':
			if err := x.array(raw, start); err != nil {
				return err
			}
		case '{':
			if err := x.object(raw, start); err != nil {
				return err
			}
		default:
			return x.fail(start, "expected an event object or an array of them, not %s", short(string(raw)))
		}
	}
}

func skipSpace(data []byte, off int) int {
	for off < len(data) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	return off
}

// array reads the elements of a JSON array at base, each an event.
func (x *exportReader) array(raw []byte, base int) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return x.syntaxError(base, base, err)
	}
	for dec.More() {
		off := base + int(dec.InputOffset())
		var el json.RawMessage
		if err := dec.Decode(&el); err != nil {
			return x.syntaxError(base, off, err)
		}
		off = skipSpace(x.data, off)
		for off < len(x.data) && (x.data[off] == ',' || strings.IndexByte(" \t\r\n", x.data[off]) >= 0) {
			off++
		}
		if len(el) == 0 || el[0] != '{' {
			return x.fail(off, "expected an event object in the array, not %s", short(string(el)))
		}
		if err := x.event(el, off); err != nil {
			return err
		}
	}
	return nil
}

// exportShape tells an object's provider by the fields it has.
type exportShape struct {
	Items            json.RawMessage `json:"items"`
	EventType        string          `json:"eventType"`
	NotificationType string          `json:"notificationType"`
	Mail             json.RawMessage `json:"mail"`
	Type             string          `json:"Type"`
	Message          json.RawMessage `json:"Message"` // SNS: a string; (case-insensitively) Mailgun's message object
	RecordType       string          `json:"RecordType"`
	DeliveredAt      string          `json:"DeliveredAt"`
	BouncedAt        string          `json:"BouncedAt"`
	Event            string          `json:"event"`
	Email            string          `json:"email"`
	Recipient        string          `json:"recipient"`
	EventData        json.RawMessage `json:"event-data"`
}

// object reads one top-level object: an Events API page, or an event.
func (x *exportReader) object(raw []byte, off int) error {
	var s exportShape
	if err := json.Unmarshal(raw, &s); err == nil && len(s.Items) > 0 && s.Items[0] == '[' && s.Event == "" {
		// A Mailgun Events API page: its items are the events.
		i := bytes.Index(raw, []byte(s.Items))
		if i < 0 {
			return x.fail(off, "cannot find the items of this events page")
		}
		return x.array(raw[i:i+len(s.Items)], off+i)
	}
	return x.event(raw, off)
}

func (x *exportReader) event(raw []byte, off int) error {
	var s exportShape
	if err := json.Unmarshal(raw, &s); err != nil {
		return x.fail(off, "this event does not parse (%s)", jsonProblem(err))
	}
	var (
		proofs []Proof
		kind   Kind
		event  string
		err    error
	)
	switch {
	case len(s.EventData) > 0:
		kind = Mailgun
		proofs, event, err = mailgunProofs(raw)
	case len(s.Mail) > 0 && (s.EventType != "" || s.NotificationType != ""):
		kind = SES
		proofs, event, err = sesProofs(raw)
	case s.Type == snsNotification && len(s.Message) > 0 && s.Message[0] == '"':
		kind = SES
		var msg string
		if err = json.Unmarshal(s.Message, &msg); err == nil {
			proofs, event, err = sesProofs([]byte(msg))
		}
	case s.RecordType != "" || s.DeliveredAt != "" || s.BouncedAt != "":
		kind = Postmark
		proofs, event, err = postmarkProofs(raw)
	case s.Event != "" && s.Email != "":
		kind = SendGrid
		proofs, event, err = sendgridProofs(raw)
	case s.Event != "" && s.Recipient != "":
		kind = Mailgun // an Events API item: the webhook's event-data alone
		proofs, event, err = mailgunProofs(append(append([]byte(`{"event-data":`), raw...), '}'))
	default:
		return x.fail(off, "this is not an SES, SendGrid, Mailgun or Postmark event (no eventType with mail, event with email or recipient, event-data or RecordType)")
	}
	if err != nil {
		return x.fail(off, "this %s event %s", kindName(kind), strings.TrimPrefix(err.Error(), ErrMalformed.Error()+": "))
	}
	x.out.Events++
	if len(proofs) == 0 {
		x.out.Ignored++
		return nil
	}
	line := x.lineAt(off)
	for _, p := range proofs {
		p.Kind, p.Source, p.Line = kind, x.name, line
		if p.Event == "" {
			p.Event = event
		}
		// Bounded and without NULs, like a webhook's events (checkEvent):
		// the reason a resolution records is made of these.
		for _, f := range []*string{&p.Address, &p.MessageID, &p.EffectID, &p.ProviderMessageID, &p.Detail} {
			*f = strings.ReplaceAll(*f, "\x00", "")
		}
		if p.Address == "" || len(p.Address) > maxAddress {
			return x.fail(off, "this %s %s event has no recipient address of at most %d bytes", kindName(kind), p.Event, maxAddress)
		}
		p.MessageID = normalizeMessageID(p.MessageID)
		if len(p.MessageID) > maxMessageID {
			p.MessageID = ""
		}
		if len(p.EffectID) > maxEventID {
			p.EffectID = ""
		}
		if len(p.ProviderMessageID) > maxMessageID {
			p.ProviderMessageID = ""
		}
		p.Address, p.MessageID, p.ProviderMessageID = oneLine(p.Address, maxAddress), oneLine(p.MessageID, maxMessageID), oneLine(p.ProviderMessageID, maxMessageID)
		p.Detail = oneLine(p.Detail, 200)
		x.out.Proofs = append(x.out.Proofs, p)
	}
	return nil
}

func short(s string) string {
	s = oneLine(s, 40)
	return strconv.Quote(s)
}

// --- SES ---

// sesExtra is what evidence reads of an SES record beyond what the
// bounce parser does.
type sesExtra struct {
	Mail struct {
		Timestamp   string   `json:"timestamp"`
		Destination []string `json:"destination"`
	} `json:"mail"`
	Delivery *struct {
		Timestamp  string   `json:"timestamp"`
		Recipients []string `json:"recipients"`
		SMTP       string   `json:"smtpResponse"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		Timestamp         string `json:"timestamp"`
		DelayType         string `json:"delayType"`
		DelayedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"delayedRecipients"`
	} `json:"deliveryDelay"`
	Reject *struct {
		Reason string `json:"reason"`
	} `json:"reject"`
	Failure *struct {
		ErrorMessage string `json:"errorMessage"`
	} `json:"failure"`
}

// sesMessageID is the Message-ID we sent with: SES rewrites the one it
// sends with, and mail.headers keeps the original headers, ours among them.
func sesMessageID(n sesNotification) string {
	for _, h := range n.Mail.Headers {
		if strings.EqualFold(h.Name, "Message-ID") {
			if h.Value != "" {
				return h.Value
			}
			break
		}
	}
	return n.Mail.CommonHeaders.MessageID
}

func sesHeader(n sesNotification, name string) string {
	for _, h := range n.Mail.Headers {
		if strings.EqualFold(h.Name, name) {
			return strings.TrimSpace(h.Value)
		}
	}
	return ""
}

func sesProofs(body []byte) ([]Proof, string, error) {
	var n sesNotification
	if err := unmarshal(body, &n, "an SES event record"); err != nil {
		return nil, "", err
	}
	var ex sesExtra
	if err := unmarshal(body, &ex, "an SES event record"); err != nil {
		return nil, "", err
	}
	event := n.EventType
	if event == "" {
		event = n.NotificationType
	}
	outcome, ok := exportVerdicts[SES][event]
	if !ok {
		return nil, event, nil
	}
	base := Proof{Outcome: outcome, MessageID: sesMessageID(n), EffectID: sesHeader(n, "X-Onceplan-Effect"),
		ProviderMessageID: n.Mail.MessageID, At: parseTime(ex.Mail.Timestamp)}
	var addrs []string
	switch event {
	case "Bounce":
		if n.Bounce == nil {
			return nil, event, malformed("has no bounce object")
		}
		base.At, base.Detail = parseTime(n.Bounce.Timestamp), n.Bounce.BounceType+"/"+n.Bounce.BounceSubType
		for _, r := range n.Bounce.BouncedRecipients {
			addrs = append(addrs, r.EmailAddress)
		}
	case "Complaint":
		if n.Complaint == nil {
			return nil, event, malformed("has no complaint object")
		}
		base.At = parseTime(n.Complaint.Timestamp)
		for _, r := range n.Complaint.ComplainedRecipients {
			addrs = append(addrs, r.EmailAddress)
		}
	case "Delivery":
		if ex.Delivery != nil {
			base.At, base.Detail, addrs = parseTime(ex.Delivery.Timestamp), ex.Delivery.SMTP, ex.Delivery.Recipients
		}
	case "DeliveryDelay":
		if ex.DeliveryDelay != nil {
			base.At, base.Detail = parseTime(ex.DeliveryDelay.Timestamp), ex.DeliveryDelay.DelayType
			for _, r := range ex.DeliveryDelay.DelayedRecipients {
				addrs = append(addrs, r.EmailAddress)
			}
		}
	case "Reject":
		if ex.Reject != nil {
			base.Detail = ex.Reject.Reason
		}
	case "Rendering Failure":
		if ex.Failure != nil {
			base.Detail = ex.Failure.ErrorMessage
		}
	}
	if len(addrs) == 0 {
		addrs = ex.Mail.Destination
	}
	if len(addrs) == 0 {
		return nil, event, malformed("names no recipient (mail.destination is empty)")
	}
	out := make([]Proof, 0, len(addrs))
	for _, a := range addrs {
		p := base
		p.Address = strings.TrimSpace(a)
		out = append(out, p)
	}
	return out, event, nil
}

// --- SendGrid ---

// messageID is the Message-ID a SendGrid event names: our custom argument
// when the sender set one, else smtp-id.
func (s sendgridEvent) messageID() string {
	if s.OnceplanMsgID != "" {
		return s.OnceplanMsgID
	}
	return s.SMTPID
}

// effectArgs are the custom arguments (SendGrid), user variables
// (Mailgun) and metadata (Postmark) keys that may carry our effect id.
var effectArgs = []string{"onceplan_effect", "x-onceplan-effect", "X-Onceplan-Effect", "effect_id"}

func effectIn(m map[string]any) string {
	for _, k := range effectArgs {
		if v, ok := m[k].(string); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func sendgridProofs(body []byte) ([]Proof, string, error) {
	var s sendgridEvent
	if err := unmarshal(body, &s, "a SendGrid event"); err != nil {
		return nil, "", err
	}
	outcome, ok := exportVerdicts[SendGrid][s.Event]
	if !ok {
		return nil, s.Event, nil
	}
	var args map[string]any // custom arguments are top-level fields
	_ = json.Unmarshal(body, &args)
	detail := s.Reason
	if s.Event == "deferred" || s.Event == "delivered" {
		detail = s.Response
	}
	return []Proof{{Outcome: outcome, Address: strings.TrimSpace(s.Email), MessageID: s.messageID(), EffectID: effectIn(args),
		ProviderMessageID: s.SgMessageID, At: unixTime(s.Timestamp), Detail: detail}}, s.Event, nil
}

// --- Mailgun ---

func mailgunProofs(body []byte) ([]Proof, string, error) {
	var b mailgunBody
	if err := unmarshal(body, &b, "a Mailgun event"); err != nil {
		return nil, "", err
	}
	if b.EventData == nil {
		return nil, "", malformed("has no event-data")
	}
	ed := b.EventData
	outcome, ok := exportVerdicts[Mailgun][ed.Event]
	if !ok {
		return nil, ed.Event, nil
	}
	var ex struct {
		EventData struct {
			UserVariables map[string]any `json:"user-variables"`
		} `json:"event-data"`
	}
	_ = json.Unmarshal(body, &ex)
	detail := ed.Reason
	if ed.Event == "failed" {
		detail = strings.TrimSpace(ed.Severity + " " + ed.Reason)
		// Mailgun dropped it without sending: the address is on its
		// suppression list. Like SendGrid's dropped.
		if strings.HasPrefix(ed.Reason, "suppress-") {
			outcome = ledger.NotDelivered
		}
	}
	return []Proof{{Outcome: outcome, Address: strings.TrimSpace(ed.Recipient), MessageID: ed.Message.Headers.MessageID,
		EffectID: effectIn(ex.EventData.UserVariables), ProviderMessageID: ed.Message.Headers.MessageID,
		At: unixTime(ed.Timestamp), Detail: detail}}, ed.Event, nil
}

// --- Postmark ---

func postmarkProofs(body []byte) ([]Proof, string, error) {
	var p postmarkEvent
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return nil, "", malformed("is not a Postmark webhook object (%s)", jsonProblem(err))
	}
	var ex struct {
		Recipient   string `json:"Recipient"`
		DeliveredAt string `json:"DeliveredAt"`
	}
	_ = json.Unmarshal(body, &ex)
	event := p.RecordType
	switch {
	case event == "" && ex.DeliveredAt != "":
		event = "Delivery" // the delivery webhook's older example has no RecordType
	case event == "" && p.BouncedAt != "":
		event = "Bounce"
	}
	outcome, ok := exportVerdicts[Postmark][event]
	if !ok {
		return nil, event, nil
	}
	addr, at := p.Email, parseTime(p.BouncedAt)
	if event == "Delivery" {
		addr, at = ex.Recipient, parseTime(ex.DeliveredAt)
	}
	if addr == "" {
		addr = ex.Recipient
	}
	return []Proof{{Outcome: outcome, Address: strings.TrimSpace(addr), MessageID: postmarkMessageID(p), EffectID: effectIn(p.Metadata),
		ProviderMessageID: p.MessageID, At: at, Detail: oneLine(p.Type+" "+p.Details, 200)}}, event, nil
}
