package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

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
