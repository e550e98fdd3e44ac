package approval_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
)

// TestOutcomeAndStepsNameHowTargetsEnded: a campaign that ended is "sent"
// only when every target got its effect or was suppressed; otherwise its
// outcome counts each way a target ended, and the next steps name each
// with what to do — never "refused" for a target the provider never saw,
// and no resume for a cancelled campaign. One still running has no
// outcome.
func TestOutcomeAndStepsNameHowTargetsEnded(t *testing.T) {
	t.Parallel()
	done := approval.Campaign{ID: "c", State: approval.StateCompleted, PlanID: 1}
	require.Nil(t, approval.OutcomeOf(approval.Campaign{State: approval.StateRunning, PlanID: 1}, approval.Counts{Planned: 1, Done: 1}))
	require.Nil(t, approval.OutcomeOf(approval.Campaign{State: approval.StateCancelled}, approval.Counts{Planned: 1, NotStarted: 1}), "never approved")

	o := approval.OutcomeOf(done, approval.Counts{Planned: 3, Done: 2, Suppressed: 1})
	require.Equal(t, approval.EndingSent, o.Ending)
	require.Equal(t, "The campaign completed: every target got its effect (2 of 3 sent; 1 left out because the address was suppressed).", o.Summary)

	k := approval.Counts{Planned: 10, Done: 2, Failed: 6, Refused: 1, GivenUp: 2, Unreached: 3, Unknown: 1, NotStarted: 1}
	o = approval.OutcomeOf(done, k)
	require.Equal(t, approval.Outcome{Ending: approval.EndingIncomplete, Sent: 2, Refused: 1, GivenUp: 2, NeverReached: 3, InDoubt: 1, NotSent: 1,
		Summary: "The campaign completed without every target getting its effect: 2 of 10 sent; 3 never reached the provider, " +
			"1 was refused by the provider, 2 were given up after their tries, 1 is in doubt, 1 was not sent."}, *o)

	steps := approval.NextSteps(done, approval.Decision{}, k, approval.Serving{Live: 1}, time.Now())
	var kinds []approval.StepKind
	var counts []int
	for _, s := range steps {
		kinds, counts = append(kinds, s.Kind), append(counts, s.Count)
	}
	require.Equal(t, []approval.StepKind{approval.StepResolveUnknowns, approval.StepUnreached, approval.StepRefused, approval.StepFailed, approval.StepResume}, kinds)
	require.Equal(t, []int{1, 3, 1, 2, 1}, counts)
	require.Equal(t, "3 targets never reached the provider: every try failed before the request left (a DNS, connection or TLS failure; the run page names it). "+
		"An operator checks the provider's address (--provider) and the network from the workers' machines. "+
		"An operator resumes the campaign once the cause is fixed, to send each once more.", steps[1].What)
	require.Equal(t, "2 targets failed and were given up after the tries ran out, or not sent again because the campaign stopped (the run page shows the last error). "+
		"An operator resumes the campaign once the cause is fixed, to send each once more.", steps[3].What)

	// Cancelled: what happened, and a clone, never a resume.
	steps = approval.NextSteps(approval.Campaign{State: approval.StateCancelled, PlanID: 1}, approval.Decision{}, approval.Counts{Planned: 3, Failed: 3, Unreached: 3}, approval.Serving{}, time.Now())
	require.Len(t, steps, 1)
	require.Equal(t, approval.StepUnreached, steps[0].Kind)
	require.Contains(t, steps[0].What, "The campaign was cancelled: a clone of it sends them anew.")
	require.NotContains(t, steps[0].What, "resumes")
}
