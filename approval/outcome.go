package approval

import (
	"fmt"
	"strings"
)

// Ending says how a campaign that stopped running ended for its targets.
type Ending string

// The endings.
const (
	// EndingSent: every approved target got its effect, or was left out
	// because its address was suppressed (consent overrides the plan).
	EndingSent Ending = "sent"
	// EndingIncomplete: some targets did not get their effect — refused by
	// the provider, given up after their tries, never reached the
	// provider, in doubt, stranded, revoked, or never sent.
	EndingIncomplete Ending = "incomplete"
)

// Outcome is what became of the targets of a campaign that ended
// (completed or cancelled): its ending and how many targets ended each
// way. The campaign's state stays what the lifecycle says (completed is
// still completed: the API's state names are its contract); the outcome
// is derived from the counts, the read model every page, the API and the
// command line ask (audit.ListCounts), so that they all say the same
// (docs/ARCHITECTURE.md, "How a campaign ended").
type Outcome struct {
	Ending Ending `json:"ending"`
	// Summary says it in a sentence, for a person or an agent to pass on.
	Summary string `json:"summary"`
	// Sent: done exactly once. Suppressed: left out by consent.
	Sent       int `json:"sent"`
	Suppressed int `json:"suppressed"`
	// Refused: refused by the provider for good (a definitive rejection).
	Refused int `json:"refused"`
	// GivenUp: given up after their tries ran out, the provider having
	// been reached at least once.
	GivenUp int `json:"given_up"`
	// NeverReached: their tries ran out and not one reached the provider
	// (the request never left: a DNS failure, a refused connection, a TLS
	// failure).
	NeverReached int `json:"never_reached"`
	// InDoubt: pending or unknown — the call may or may not have landed.
	InDoubt  int `json:"in_doubt"`
	Stranded int `json:"stranded"`
	Revoked  int `json:"revoked"`
	// NotSent: never sent, and not for any of the reasons above: not
	// started, held by a row outside the plan, or failed to be sent again
	// when the campaign stopped.
	NotSent int `json:"not_sent"`
}

// OutcomeOf is campaign c's outcome from its counts k: nil while the
// campaign has not ended (it has no plan, or it is approved, running or
// paused).
func OutcomeOf(c Campaign, k Counts) *Outcome {
	if c.PlanID == 0 || (c.State != StateCompleted && c.State != StateCancelled) {
		return nil
	}
	o := &Outcome{
		Sent: k.Done, Suppressed: k.Suppressed, Refused: k.Refused, GivenUp: k.GivenUp, NeverReached: k.Unreached,
		InDoubt: k.Pending + k.Unknown, Stranded: k.Stranded, Revoked: k.Revoked,
		NotSent: k.NotStarted + k.Outside + k.FailedToRetry(),
	}
	o.Ending = EndingSent
	if o.Sent+o.Suppressed < k.Planned {
		o.Ending = EndingIncomplete
	}
	o.Summary = o.summary(c, k.Planned)
	return o
}

// Parts words the ways targets did not get their effect, each with its
// count, most telling first ("3 never reached the provider"); empty when
// every target got its effect or was suppressed.
func (o Outcome) Parts() []string {
	var parts []string
	for _, p := range []struct {
		n         int
		one, many string
	}{
		{o.NeverReached, "never reached the provider", "never reached the provider"},
		{o.Refused, "was refused by the provider", "were refused by the provider"},
		{o.GivenUp, "was given up after its tries", "were given up after their tries"},
		{o.InDoubt, "is in doubt", "are in doubt"},
		{o.Stranded, "is stranded", "are stranded"},
		{o.Revoked, "was revoked", "were revoked"},
		{o.NotSent, "was not sent", "were not sent"},
	} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, plural(p.n, p.one, p.many)))
		}
	}
	return parts
}

func (o Outcome) summary(c Campaign, planned int) string {
	how := "completed"
	if c.State == StateCancelled {
		how = "was cancelled"
	}
	suppressed := ""
	if o.Suppressed > 0 {
		suppressed = fmt.Sprintf("; %d left out because the address was suppressed", o.Suppressed)
	}
	if o.Ending == EndingSent {
		return fmt.Sprintf("The campaign %s: every target got its effect (%d of %d sent%s).", how, o.Sent, planned, suppressed)
	}
	return fmt.Sprintf("The campaign %s without every target getting its effect: %d of %d sent%s; %s.",
		how, o.Sent, planned, suppressed, strings.Join(o.Parts(), ", "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
