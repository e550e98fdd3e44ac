package web

import (
	"context"
	"slices"
	"time"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// whySample is how many failed targets the run page groups: the first
// ones by ordinal, read through the per-target read model's index-backed
// shape for a state (audit.QueryTargets), so a page polled every few
// seconds costs the same at a million targets as at ten.
const whySample = 500

// runWhy is the run page's account of what did not go through: the
// campaign's outcome once it ended (approval.OutcomeOf, from the counts
// the page shows), and its failed targets grouped by what happened (their
// deciding attempt's failure) and the provider's answer or the error,
// each with one example and whether and when they are tried again (the
// live jobs that carry them: approval.Service.NextTries).
func (s *Server) runWhy(ctx context.Context, camp approval.Campaign, pl plan.Plan, counts view.Counts) (view.RunWhy, error) {
	w := view.RunWhy{Outcome: approval.OutcomeOf(camp, counts)}
	if w.Outcome != nil && w.Outcome.Ending == approval.EndingIncomplete {
		w.ResumeHint = endingHint(camp, counts)
	}
	if counts.Failed == 0 {
		return w, nil
	}
	page, err := audit.QueryTargets(ctx, s.cfg.Pool, audit.TargetQuery{
		ListID: pl.ListID, Count: pl.TargetCount, State: "failed", StateCount: counts.Failed, Limit: whySample,
	})
	if err != nil {
		return w, err
	}
	type groupKey struct{ kind, reason string }
	byKey := map[groupKey]*view.WhyGroup{}
	members := map[groupKey][]int{}
	var order []groupKey
	var retrying []int
	for _, r := range page.Rows {
		k := groupKey{failureKind(r.Failure), r.Reason}
		g := byKey[k]
		if g == nil {
			g = &view.WhyGroup{Kind: k.kind, What: failureWhat(k.kind), Reason: r.Reason, Example: r.Target, ExampleOrdinal: r.Ordinal}
			byKey[k] = g
			order = append(order, k)
		}
		g.Count++
		members[k] = append(members[k], r.Ordinal)
		if !ledger.Failure(r.Failure).Final() {
			retrying = append(retrying, r.Ordinal)
		}
	}
	next, err := s.cfg.Approval.NextTries(ctx, camp, retrying)
	if err != nil {
		return w, err
	}
	now := s.cfg.Now()
	for _, k := range order {
		g := byKey[k]
		g.Next, g.Retrying = nextWords(camp, k.kind, members[k], next, now)
		w.Groups = append(w.Groups, *g)
	}
	slices.SortStableFunc(w.Groups, func(a, b view.WhyGroup) int { return b.Count - a.Count })
	if shown := len(page.Rows); shown < counts.Failed {
		w.Note = "Grouped from the first " + itoa(shown) + " of the " + view.Targets(counts.Failed) + " that failed; the target list, filtered to failed, has them all."
	}
	return w, nil
}

// failureKind names what happened to a failed target by its deciding
// attempt's failure (ledger.Failure).
func failureKind(f string) string {
	switch ledger.Failure(f) {
	case ledger.FailureUnreached:
		return "unreached"
	case ledger.FailureRejected:
		return "refused"
	case ledger.FailureExhausted:
		return "given_up"
	case ledger.FailureUnsent:
		return "unsent"
	case ledger.FailureQuota:
		return "quota"
	}
	return "retry"
}

// failureWhat words a failureKind.
func failureWhat(kind string) string {
	switch kind {
	case "unreached":
		return "never reached the provider: every try failed before the request left"
	case "refused":
		return "refused by the provider for good"
	case "given_up":
		return "given up after their tries"
	case "unsent":
		return "did not reach the provider (the request never left)"
	case "quota":
		return "over the provider's quota (its queue pauses)"
	}
	return "failed for now"
}

// nextWords says whether and when a group's targets are tried again: a
// final kind never is by itself; the others when the live job carrying
// them is due (next, by ordinal), or not at all when none does.
func nextWords(camp approval.Campaign, kind string, ordinals []int, next map[int]time.Time, now time.Time) (string, bool) {
	switch kind {
	case "unreached", "refused", "given_up":
		if camp.State == approval.StateCancelled {
			return "no: the campaign was cancelled", false
		}
		return "no, not by itself: a resume sends them once more", false
	}
	var first time.Time
	scheduled := 0
	for _, o := range ordinals {
		if at, ok := next[o]; ok {
			scheduled++
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
	}
	if scheduled == 0 {
		switch camp.State {
		case approval.StatePaused:
			return "once the campaign is resumed", false
		case approval.StateCancelled:
			return "no: the campaign was cancelled", false
		}
		return "no try is scheduled: a resume sends them once more", false
	}
	when := "will try again at " + view.When(first)
	if !first.After(now) {
		when = "will try again now (its job waits for a worker)"
	}
	if camp.State == approval.StatePaused {
		when += ", once the campaign is resumed"
	}
	if scheduled < len(ordinals) {
		when += " (" + itoa(scheduled) + " of these " + itoa(len(ordinals)) + " have a try scheduled)"
	}
	return when, true
}

// endingHint says what a person can do about an incomplete ending.
func endingHint(camp approval.Campaign, k view.Counts) string {
	if camp.State == approval.StateCancelled {
		return "The campaign was cancelled and never runs again: a clone of it sends anew."
	}
	var do []string
	if n := k.Failed + k.NotStarted; n > 0 {
		do = append(do, "resume the campaign to send the "+view.Targets(n)+" that failed or were not sent once more, once the cause below is fixed")
	}
	if k.Unreached > 0 {
		do = append(do, "for those that never reached the provider, check its address (--provider) and the network from the workers' machines")
	}
	if k.Refused > 0 {
		do = append(do, "for those the provider refused, read its answer below")
	}
	if n := k.Unknown + k.Pending; n > 0 {
		do = append(do, "resolve the "+view.Targets(n)+" in doubt as delivered or not delivered")
	}
	if k.Stranded > 0 {
		do = append(do, "check the provider for the stranded ones and revoke each once withdrawn")
	}
	if len(do) == 0 {
		return ""
	}
	out := "What you can do: "
	for i, d := range do {
		if i > 0 {
			out += "; "
		}
		out += d
	}
	return out + "."
}
