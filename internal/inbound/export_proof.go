package inbound

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/onceplan/onceplan/ledger"
)

// Verdicts of each provider's event names (see the table at the top of
// export.go).
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
