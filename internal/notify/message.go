package notify

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
)

// message is what every recipient of one event is told, before it is
// addressed: the subject, the paragraphs of the text, the webhook's
// structured fields, and the users the event is for.
type message struct {
	event    Event
	campaign approval.Campaign
	subject  string
	paras    []string
	// fields are the webhook body's structured fields (besides "text"
	// and "event").
	fields map[string]any
	// users are the users the event is for, enabled, before their
	// preferences; why says why they get it ("you are an approver").
	users []auth.User
	why   string
	at    time.Time
}

// oneLine makes s fit a subject or a sentence: control characters (a line
// break in a campaign's name) become spaces.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == ' ' }), " ")
}

// quoted is a campaign's name as the messages quote it.
func quoted(name string) string { return "“" + oneLine(name) + "”" }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// summary is the webhook's "text": the subject, then the first paragraph's
// link line when the message has one, escaped for Slack (slackEscape).
func (m message) summary() string {
	s := m.subject
	if link, ok := m.fields["url"].(string); ok && link != "" {
		s += " " + link
	}
	return slackEscape(s)
}

// slackEscaper turns the three characters Slack parses as markup in a
// message's text into the HTML entities Slack documents for them (its
// "Formatting text for app surfaces": escape &, < and >, and only those).
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// slackEscape makes s show in Slack as it is written: a campaign's name
// such as "<https://evil|Review and approve here> <!channel>" would
// otherwise be a disguised link and an @channel to the whole channel.
// Slack decodes the entities for display, so "&" shows as "&". Only the
// "text" that Slack renders is escaped: the email text is plain text, and
// the webhook's structured fields (campaign_name, reason, …) are JSON data
// for programs, which Slack does not render.
func slackEscape(s string) string { return slackEscaper.Replace(s) }

// text is the email text for one recipient: the paragraphs and a footer
// saying why they get it.
func (m message) text(footer string) string {
	return strings.Join(append(append([]string{}, m.paras...), footer), "\n\n") + "\n"
}

// webhookBody is the JSON a webhook receives: Slack's "text" (Slack shows
// it and ignores the rest), escaped as Slack needs, and the structured
// fields as they are.
func (m message) webhookBody() (string, error) {
	body := map[string]any{"text": m.summary(), "event": string(m.event), "occurred_at": m.at.UTC().Format(time.RFC3339)}
	maps.Copy(body, m.fields)
	b, err := json.Marshal(body)
	return string(b), err
}

// emails lists the users' addresses.
func emails(us []auth.User) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.Email)
	}
	return out
}

// who names a user for a message: the email, or "the system" for 0.
func who(users map[int64]auth.User, id int64) string {
	if id == 0 {
		return "the system"
	}
	if u, ok := users[id]; ok {
		return u.Email
	}
	return fmt.Sprintf("user %d", id)
}

// joinAnd lists names as a sentence does: "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
