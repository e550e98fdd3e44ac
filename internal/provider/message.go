package provider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// effectHeader carries the effect id in every message, so a mailbox or a
// relay's log can be matched against the ledger.
const effectHeader gomail.Header = "X-Onceplan-Effect"

// newMsg builds the RFC 5322 message of r: From, To, Subject, a Date, the
// deterministic Message-ID, the one-click unsubscribe headers when the
// message has a link, and a text/plain body, a text/html one, or both
// as multipart/alternative.
func newMsg(r Request, now time.Time) (*gomail.Msg, error) {
	m := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := m.From(r.Message.From); err != nil {
		return nil, fmt.Errorf("from address %q: %w", r.Message.From, err)
	}
	to := r.Message.To
	if to == "" {
		to = r.Target
	}
	if err := m.To(to); err != nil {
		return nil, fmt.Errorf("to address %q: %w", to, err)
	}
	if strings.ContainsAny(r.Message.Subject, "\r\n") {
		return nil, errors.New("the subject contains a line break")
	}
	m.Subject(r.Message.Subject)
	m.SetMessageIDWithValue(messageIDValue(r.Key, r.Epoch))
	m.SetDateWithValue(now)
	m.SetUserAgent("onceplan")
	m.SetGenHeader(effectHeader, EffectID(r.Key, r.Epoch))
	if link := r.Message.ListUnsubscribe; link != "" {
		// RFC 8058 one-click: the link (absolute, made by package
		// unsubscribe) takes a POST with "List-Unsubscribe=One-Click".
		// Written as is: a header break or an angle bracket in it would
		// end the header or the URI early.
		if strings.ContainsAny(link, "\r\n<> ") {
			return nil, errors.New("the unsubscribe link contains a line break, a space or an angle bracket")
		}
		m.SetListUnsubscribe(link)
		m.SetListUnsubscribePost()
	}
	switch {
	case r.Message.HTML == "":
		m.SetBodyString(gomail.TypeTextPlain, r.Message.Text)
	case r.Message.Text == "":
		m.SetBodyString(gomail.TypeTextHTML, r.Message.HTML)
	default:
		m.SetBodyString(gomail.TypeTextPlain, r.Message.Text)
		m.AddAlternativeString(gomail.TypeTextHTML, r.Message.HTML)
	}
	return m, nil
}

// errText is err without the file paths the os package puts in it, for raw
// answers that name the file themselves.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Op + ": " + le.Err.Error()
	}
	return err.Error()
}
