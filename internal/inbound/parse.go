package inbound

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds of what one payload may carry.
const (
	// MaxEventsPerRequest bounds the events of one request (SendGrid
	// batches; SES lists several recipients of one message).
	MaxEventsPerRequest = 1000
	maxAddress          = 320
	maxMessageID        = 998
	maxDetail           = 500
	maxEventID          = 300
)

func unmarshal(body []byte, v any, what string) error {
	if err := json.Unmarshal(body, v); err != nil {
		return malformed("the body is not %s (%s)", what, jsonProblem(err))
	}
	return nil
}

// jsonProblem says what is wrong with a JSON text without echoing it.
func jsonProblem(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return "invalid JSON at byte " + strconv.FormatInt(e.Offset, 10)
	case *json.UnmarshalTypeError:
		if e.Field != "" {
			return "field " + strconv.Quote(e.Field) + " must be " + e.Type.String()
		}
		return "expected " + e.Type.String()
	}
	return "invalid JSON"
}

// checkEvent bounds an event's fields (a provider's payload is outside
// input like any other) and refuses one without recipient or id.
func checkEvent(e *Event) error {
	// PostgreSQL's text holds no NUL, which JSON's \u0000 can carry.
	for _, f := range []*string{&e.Address, &e.ProviderEventID, &e.MessageID, &e.ProviderMessageID, &e.Detail} {
		*f = strings.ReplaceAll(*f, "\x00", "")
	}
	e.Address = strings.TrimSpace(e.Address)
	if e.Address == "" {
		return malformed("a %s event has no recipient address", e.Type)
	}
	if len(e.Address) > maxAddress {
		return malformed("a recipient address is longer than %d bytes", maxAddress)
	}
	if e.ProviderEventID == "" {
		e.ProviderEventID = rawID(e.Raw)
	}
	if len(e.ProviderEventID) > maxEventID {
		return malformed("an event id is longer than %d bytes", maxEventID)
	}
	e.MessageID = normalizeMessageID(e.MessageID)
	if len(e.MessageID) > maxMessageID {
		e.MessageID = ""
	}
	if len(e.ProviderMessageID) > maxMessageID {
		e.ProviderMessageID = ""
	}
	e.ProviderMessageID = strings.TrimSpace(e.ProviderMessageID)
	e.Detail = oneLine(e.Detail, maxDetail)
	return nil
}

// --- Amazon SES (the SNS message's Message) ---

type sesNotification struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"` // SES event publishing's name for it
	Bounce           *struct {
		BounceType        string `json:"bounceType"`
		BounceSubType     string `json:"bounceSubType"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"bounce"`
	Complaint *struct {
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		Timestamp             string `json:"timestamp"`
	} `json:"complaint"`
	Mail struct {
		MessageID string `json:"messageId"`
		Headers   []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
		CommonHeaders struct {
			MessageID string `json:"messageId"`
		} `json:"commonHeaders"`
	} `json:"mail"`
}

func parseSES(m SNSMessage, raw []byte) ([]Event, error) {
	var n sesNotification
	if err := unmarshal([]byte(m.Message), &n, "an SES notification in the SNS Message"); err != nil {
		return nil, err
	}
	kind := n.NotificationType
	if kind == "" {
		kind = n.EventType
	}
	msgID := sesMessageID(n) // one rule, shared with the evidence reader (export_proof.go)
	var out []Event
	add := func(t Type, addr, detail, at string) {
		out = append(out, Event{
			Kind: SES, Type: t, Address: addr, MessageID: msgID, ProviderMessageID: n.Mail.MessageID,
			Detail: detail, At: parseTime(at), Raw: raw,
		})
	}
	switch kind {
	case "Bounce":
		if n.Bounce == nil {
			return nil, malformed("an SES bounce notification has no bounce object")
		}
		t := SoftBounce // Transient, and Undetermined: not sure enough to suppress
		if n.Bounce.BounceType == "Permanent" {
			t = HardBounce
		}
		for _, r := range n.Bounce.BouncedRecipients {
			d := n.Bounce.BounceType + "/" + n.Bounce.BounceSubType
			if r.DiagnosticCode != "" {
				d += ": " + r.DiagnosticCode
			} else if r.Status != "" {
				d += ": " + r.Status
			}
			add(t, r.EmailAddress, d, n.Bounce.Timestamp)
		}
	case "Complaint":
		if n.Complaint == nil {
			return nil, malformed("an SES complaint notification has no complaint object")
		}
		if n.Complaint.ComplaintFeedbackType == "not-spam" {
			return nil, nil // the recipient says it is not spam
		}
		for _, r := range n.Complaint.ComplainedRecipients {
			d := "complaint"
			if n.Complaint.ComplaintFeedbackType != "" {
				d += ": " + n.Complaint.ComplaintFeedbackType
			}
			add(Complaint, r.EmailAddress, d, n.Complaint.Timestamp)
		}
	default:
		return nil, nil // Delivery, Send, Open…: not ours to record
	}
	// One SNS message, one id: each recipient's event gets its own.
	for i := range out {
		out[i].ProviderEventID = m.MessageID
		if len(out) > 1 {
			out[i].ProviderEventID += "#" + strconv.Itoa(i+1)
		}
		if m.MessageID == "" {
			out[i].ProviderEventID = ""
		}
	}
	return finish(out)
}

func finish(out []Event) ([]Event, error) {
	if len(out) > MaxEventsPerRequest {
		return nil, malformed("the body carries more than %d events", MaxEventsPerRequest)
	}
	for i := range out {
		if err := checkEvent(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

func unixTime(f float64) time.Time {
	if f <= 0 || math.IsNaN(f) || f > 1e11 {
		return time.Time{}
	}
	// Providers send microseconds; a float64 of today's seconds holds no
	// more, so round there.
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3).UTC()
}

// --- Postmark (bounce and spam complaint webhooks) ---

type postmarkEvent struct {
	RecordType string           `json:"RecordType"`
	ID         json.Number      `json:"ID"`
	Type       string           `json:"Type"`
	MessageID  string           `json:"MessageID"`
	Details    string           `json:"Details"`
	Email      string           `json:"Email"`
	BouncedAt  string           `json:"BouncedAt"`
	Content    string           `json:"Content"`
	Metadata   map[string]any   `json:"Metadata"`
	Headers    []postmarkHeader `json:"Headers"`
}

type postmarkHeader struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

// Postmark bounce types (its TypeCode table) that mean the address does
// not take mail, and those that are temporary. The rest (AutoResponder,
// Subscribe, OpenRelayTest…) are not bounces of ours.
var (
	postmarkHard = map[string]bool{"HardBounce": true, "BadEmailAddress": true, "ManuallyDeactivated": true}
	postmarkSoft = map[string]bool{"SoftBounce": true, "Transient": true, "DnsError": true, "Blocked": true,
		"SMTPApiError": true, "Unknown": true, "ChallengeVerification": true, "DMARCPolicy": true}
)

func parsePostmark(body []byte) ([]Event, error) {
	var p postmarkEvent
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return nil, malformed("the body is not a Postmark webhook object (%s)", jsonProblem(err))
	}
	var t Type
	switch {
	case p.RecordType == "SpamComplaint" || p.Type == "SpamComplaint":
		t = Complaint
	case p.RecordType != "" && p.RecordType != "Bounce":
		return nil, nil // Delivery, Open, Click, SubscriptionChange
	case postmarkHard[p.Type]:
		t = HardBounce
	case postmarkSoft[p.Type]:
		t = SoftBounce
	default:
		return nil, nil
	}
	id := ""
	if p.ID != "" {
		id = p.ID.String()
	}
	e := Event{
		Kind: Postmark, ProviderEventID: id, Type: t, Address: p.Email,
		MessageID: postmarkMessageID(p), ProviderMessageID: p.MessageID,
		Detail: p.Type + ": " + p.Details, At: parseTime(p.BouncedAt), Raw: body,
	}
	return finish([]Event{e})
}

// postmarkMessageID finds the Message-ID we sent with: Postmark's
// MessageID is its own id, so look in the metadata, the headers, and the
// bounced message's dump (Content, when the webhook includes it).
func postmarkMessageID(p postmarkEvent) string {
	for _, k := range []string{"message_id", "message-id", "Message-ID", "onceplan_message_id"} {
		if v, ok := p.Metadata[k].(string); ok && v != "" {
			return v
		}
	}
	for _, h := range p.Headers {
		if strings.EqualFold(h.Name, "Message-ID") {
			return h.Value
		}
	}
	return headerIn(p.Content, "Message-ID")
}

// headerIn finds a header's value in a message's text (its header block).
func headerIn(msg, name string) string {
	if msg == "" {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(msg))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	prefix := strings.ToLower(name) + ":"
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			return ""
		}
		if strings.HasPrefix(strings.ToLower(line), prefix) {
			return strings.TrimSpace(line[len(prefix):])
		}
	}
	return ""
}

// --- SendGrid (Event Webhook: a JSON array of events) ---

type sendgridEvent struct {
	Event         string  `json:"event"`
	Type          string  `json:"type"`
	Email         string  `json:"email"`
	SgEventID     string  `json:"sg_event_id"`
	SgMessageID   string  `json:"sg_message_id"`
	SMTPID        string  `json:"smtp-id"`
	Timestamp     float64 `json:"timestamp"`
	Reason        string  `json:"reason"`
	Response      string  `json:"response"`
	Status        string  `json:"status"`
	OnceplanMsgID string  `json:"onceplan_message_id"` // a custom arg, when the sender set one
}

func parseSendGrid(body []byte) ([]Event, error) {
	var raws []json.RawMessage
	if err := unmarshal(body, &raws, "a JSON array of SendGrid events"); err != nil {
		return nil, err
	}
	if len(raws) > MaxEventsPerRequest {
		return nil, malformed("the body carries more than %d events", MaxEventsPerRequest)
	}
	var out []Event
	for i, r := range raws {
		var s sendgridEvent
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, malformed("SendGrid event %d is not an event object (%s)", i+1, jsonProblem(err))
		}
		var t Type
		var detail string
		switch s.Event {
		case "bounce":
			t = HardBounce
			if s.Type == "blocked" { // a temporary refusal; "bounce" is permanent
				t = SoftBounce
			}
			detail = s.Type + ": " + s.Status + " " + s.Reason
		case "deferred":
			t = SoftBounce
			detail = "deferred: " + s.Response
		case "spamreport":
			t = Complaint
			detail = "spamreport"
		default:
			continue // processed, delivered, dropped, open, click, unsubscribe…
		}
		msgID := s.messageID() // shared with the evidence reader (export_proof.go)
		out = append(out, Event{
			Kind: SendGrid, ProviderEventID: s.SgEventID, Type: t, Address: s.Email,
			MessageID: msgID, ProviderMessageID: s.SgMessageID, Detail: detail,
			At: unixTime(s.Timestamp), Raw: []byte(r),
		})
	}
	return finish(out)
}

// --- Mailgun (webhooks: {"signature": {…}, "event-data": {…}}) ---

type mailgunBody struct {
	Signature *mailgunSignature `json:"signature"`
	EventData *struct {
		Event     string  `json:"event"`
		ID        string  `json:"id"`
		Severity  string  `json:"severity"`
		Reason    string  `json:"reason"`
		Recipient string  `json:"recipient"`
		Timestamp float64 `json:"timestamp"`
		Message   struct {
			Headers struct {
				MessageID string `json:"message-id"`
			} `json:"headers"`
		} `json:"message"`
		DeliveryStatus struct {
			Code        json.Number `json:"code"`
			Message     string      `json:"message"`
			Description string      `json:"description"`
		} `json:"delivery-status"`
	} `json:"event-data"`
}

type mailgunSignature struct {
	Timestamp string `json:"timestamp"`
	Token     string `json:"token"`
	Signature string `json:"signature"`
}

func parseMailgun(body []byte) ([]Event, error) {
	var b mailgunBody
	if err := unmarshal(body, &b, "a Mailgun webhook object"); err != nil {
		return nil, err
	}
	if b.EventData == nil {
		return nil, malformed("a Mailgun webhook has no event-data")
	}
	ed := b.EventData
	var t Type
	switch {
	case ed.Event == "complained":
		t = Complaint
	case ed.Event == "failed" && ed.Severity == "permanent":
		t = HardBounce
	case ed.Event == "failed":
		t = SoftBounce
	default:
		return nil, nil // accepted, delivered, opened, clicked, unsubscribed…
	}
	detail := ed.Event
	if ed.Severity != "" {
		detail += " (" + ed.Severity + ")"
	}
	if ed.Reason != "" {
		detail += " " + ed.Reason
	}
	if ds := ed.DeliveryStatus; ds.Code != "" || ds.Message != "" || ds.Description != "" {
		detail += ": " + strings.TrimSpace(ds.Code.String()+" "+ds.Message+" "+ds.Description)
	}
	id := ed.ID
	// Mailgun's message id is the Message-ID header itself.
	e := Event{
		Kind: Mailgun, ProviderEventID: id, Type: t, Address: ed.Recipient,
		MessageID: ed.Message.Headers.MessageID, ProviderMessageID: ed.Message.Headers.MessageID,
		Detail: detail, At: unixTime(ed.Timestamp), Raw: body,
	}
	return finish([]Event{e})
}

// --- generic: our own small format ---

// GenericEvent is the body POST /webhooks/generic takes: one JSON object,
// authenticated by the headers X-Onceplan-Timestamp (Unix seconds, when it
// was signed) and X-Onceplan-Signature: v1=<hex HMAC-SHA256 of the
// timestamp, a dot and the raw body, with the endpoint's secret> (Sign).
// Unknown fields are ignored.
//
//	{"id": "evt-1", "type": "hard_bounce", "address": "ann@example.com",
//	 "message_id": "<…@onceplan>", "at": "2026-12-01T10:00:00Z"}
type GenericEvent struct {
	ID        string `json:"id"`      // the sender's event id; a re-delivery repeats it
	Type      Type   `json:"type"`    // hard_bounce, soft_bounce or complaint
	Address   string `json:"address"` // the recipient
	MessageID string `json:"message_id,omitempty"`
	At        string `json:"at,omitempty"` // RFC 3339
}

func parseGeneric(body []byte) ([]Event, error) {
	var g GenericEvent
	if err := unmarshal(body, &g, `a JSON object {"id", "type", "address", "message_id"?, "at"?}`); err != nil {
		return nil, err
	}
	if strings.TrimSpace(g.ID) == "" {
		return nil, malformed(`"id" is required`)
	}
	switch g.Type {
	case HardBounce, SoftBounce, Complaint:
	default:
		return nil, malformed(`"type" must be hard_bounce, soft_bounce or complaint`)
	}
	var at time.Time
	if g.At != "" {
		var err error
		if at, err = time.Parse(time.RFC3339Nano, g.At); err != nil {
			return nil, malformed(`"at" must be an RFC 3339 time`)
		}
	}
	e := Event{
		Kind: Generic, ProviderEventID: strings.TrimSpace(g.ID), Type: g.Type, Address: g.Address,
		MessageID: g.MessageID, Detail: string(g.Type), At: at.UTC(), Raw: body,
	}
	if at.IsZero() {
		e.At = time.Time{}
	}
	return finish([]Event{e})
}
