package notify

import (
	"slices"
	"strings"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
)

// Event is what a notification is about.
type Event string

// The events (the names of the preferences, the `events=` option, the
// webhook body's "event" and the X-Onceplan-Event header).
const (
	// EventSubmitted: a draft was submitted and waits for approval.
	EventSubmitted Event = "submitted"
	// EventApproved: a version reached its quorum of approvals and was
	// frozen as a plan.
	EventApproved Event = "approved"
	// EventRejected: an approver sent a draft back.
	EventRejected Event = "rejected"
	// EventAttention: targets of a campaign are unknown, stranded or
	// failed, and need a person (batched per campaign); or recovery
	// refused to send something and left it to a person (an alert in the
	// campaign's trail, with its reason, at once).
	EventAttention Event = "attention"
	// EventCompleted: a campaign has nothing left to run.
	EventCompleted Event = "completed"
)

// Events lists every event, in the order the preferences page shows them.
var Events = []Event{EventSubmitted, EventApproved, EventRejected, EventAttention, EventCompleted}

// eventOfAction maps the trail actions that are announced to their event
// (auth.ActionFreeze is the quorum reached).
var eventOfAction = map[auth.Action]Event{
	auth.ActionSubmit:       EventSubmitted,
	auth.ActionFreeze:       EventApproved,
	auth.ActionReject:       EventRejected,
	approval.ActionComplete: EventCompleted,
	// Recovery refused to send something and left it to a person: the
	// operators are told at once, with the reason (not batched).
	approval.ActionAlert: EventAttention,
}

// EventOf is the event a campaign trail action announces, if any.
func EventOf(action string) (Event, bool) {
	e, ok := eventOfAction[auth.Action(action)]
	return e, ok
}

// Announced reports whether a trail entry with action is announced: the
// approval service's Announcer enqueues nothing for the others.
func Announced(action string) bool {
	_, ok := EventOf(action)
	return ok
}

// ParseEvent checks an event name.
func ParseEvent(s string) (Event, error) {
	if e := Event(strings.TrimSpace(s)); slices.Contains(Events, e) {
		return e, nil
	}
	return "", &parseError{msg: "\"" + s + "\" is not an event (" + joinEvents(Events, ", ") + ")"}
}

// joinEvents joins the events' names with sep.
func joinEvents(events []Event, sep string) string {
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = string(e)
	}
	return strings.Join(names, sep)
}

// Audience says, in a few words, who an event reaches (the preferences
// page and docs/guide/notifications.md say it alike).
func (e Event) Audience() string {
	switch e {
	case EventSubmitted:
		return "a draft waits for approval (approvers who did not propose or last edit it)"
	case EventApproved:
		return "a version you proposed reached its quorum of approvals"
	case EventRejected:
		return "a draft you proposed was rejected"
	case EventAttention:
		return "targets of a running or recently completed campaign are unknown, stranded or failed (operators; at most one message per campaign per window)"
	case EventCompleted:
		return "a campaign you proposed or started completed, with its exactly-once headline"
	}
	return ""
}

// For reports whether a's roles make them an audience of e (the
// preferences page offers these; a user receives the others never). An
// admin holds every role.
func (e Event) For(a auth.Actor) bool {
	switch e {
	case EventSubmitted:
		return a.Has(auth.RoleApprover)
	case EventApproved, EventRejected:
		return a.Has(auth.RoleProposer)
	case EventAttention:
		return a.Has(auth.RoleOperator)
	case EventCompleted:
		return a.Has(auth.RoleProposer) || a.Has(auth.RoleOperator)
	}
	return false
}
