package view

import (
	"strconv"
	"strings"

	"github.com/onceplan/onceplan/internal/notify"
)

// NotifierRow is a configured notifier on the admin page, with its
// notifications by state.
type NotifierRow struct {
	Name   string
	Kind   string
	URL    string
	Events []string
	Signed bool
	// Counts by state: pending, retrying, failed, delivered.
	Pending, Retrying, Failed, Delivered int
}

// DeliveryRow is a notification not delivered (pending, retrying or
// failed) on the admin page, with its latest try.
type DeliveryRow = notify.Delivery

// NotificationsSection is the admin page's part about notifications.
type NotificationsSection struct {
	Notifiers []NotifierRow
	// Undelivered are the latest notifications not delivered, newest
	// first.
	Undelivered []DeliveryRow
	// Window is the attention window ("5m0s").
	Window string
}

// PreferenceRow is one event on a user's notifications page.
type PreferenceRow struct {
	Event    string
	Audience string
	Enabled  bool
}

// AccountNotificationsPage lets the signed-in user choose which events
// reach them.
type AccountNotificationsPage struct {
	Page
	Email string
	// Events are those the user's roles make them an audience of.
	Events []PreferenceRow
	// Notifiers say what is configured: without a mailto: notifier that
	// mails users, no email reaches anyone.
	MailsUsers bool
}

// AccountPasswordPage is the form that changes the signed-in user's own
// password.
type AccountPasswordPage struct {
	Page
	Email       string
	FieldErrors map[string]string
	// MinLength is the password policy's least length, in characters.
	MinLength int
}

// answerOf words a delivery's last answer for a table cell.
func answerOf(d DeliveryRow) string {
	var parts []string
	if d.HTTPStatus != 0 {
		parts = append(parts, "HTTP "+strconv.Itoa(d.HTTPStatus))
	}
	if d.Error != "" {
		parts = append(parts, d.Error)
	}
	if a := strings.TrimSpace(d.Answer); a != "" {
		if len(a) > 300 {
			a = strings.ToValidUTF8(a[:300], "") + "…"
		}
		parts = append(parts, "answer: "+a)
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

// notifyBadge is the badge class of a notification's state, in the
// colours of the ledger's states: waiting, in doubt, failed, done.
func notifyBadge(state string) string {
	switch state {
	case notify.StateRetrying:
		return "state-unknown"
	case notify.StateFailed:
		return "state-failed"
	case notify.StateDelivered:
		return "state-done"
	}
	return "state-pending"
}
