package audit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// TestFailuresAreNamedByHowTheyEnded: the audit, the counts and the
// per-target rows tell apart a target the provider refused for good (its
// answer), one given up after its tries (the last error) and one that
// never reached the provider in any try; the headline and the reasons say
// which, and only the refused one lets the audit hold.
func TestFailuresAreNamedByHowTheyEnded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("endings", audittest.Addresses(4))
	b.f.Attempt(c.Targets[0], ledger.StateDone)
	b.f.Reject(c.Targets[1], "the server answered 550 5.1.1 no such user")
	fail := func(tg audittest.Target, failure ledger.Failure, reason string) {
		e := b.f.Claim(tg)
		_, err := b.f.Ledger.RecordResponse(b.ctx, e.ID, ledger.ResponseSend, []byte("transport-error"))
		require.NoError(t, err)
		_, err = b.f.Ledger.Settle(b.ctx, ledger.SettleParams{EffectID: e.ID, State: ledger.StateFailed, Reason: reason, Failure: failure})
		require.NoError(t, err)
	}
	// Reached once (a 408), then never again: given up.
	fail(c.Targets[2], ledger.FailureRetry, "the webhook answered HTTP 408")
	fail(c.Targets[2], ledger.FailureExhausted, "not sent: connection refused (no retries left after 2 attempts)")
	// Never reached in either try.
	fail(c.Targets[3], ledger.FailureUnsent, "not sent: lookup hooks.invalid: no such host")
	fail(c.Targets[3], ledger.FailureUnreached, "not sent: lookup hooks.invalid: no such host (never reached the provider; no retries left after 2 attempts)")

	m, err := audit.ForCampaign(b.ctx, b.f.Pool, c.ID)
	require.NoError(t, err)
	require.False(t, m.Holds)
	require.Equal(t, []int{3, 1, 1, 1}, []int{m.Failed, m.Rejected, m.Exhausted, m.Unreached})
	require.Equal(t, "1/4 exactly once; does not hold: 1 never reached the provider, 1 given up after their tries", m.Headline())
	require.ElementsMatch(t, []string{
		`1 target was refused by the provider for good, with this answer (a definitive rejection: the audit holds with it): "the server answered 550 5.1.1 no such user" (person2@example.com).`,
		`1 target was given up after its tries ran out, the last with this error (resume to try once more): "not sent: connection refused (no retries left after 2 attempts)" (person3@example.com).`,
		`1 target never reached the provider: every try failed before the request left (a DNS, connection or TLS failure), the last with this error ` +
			`(check the provider's address and the network, then resume to try once more): "not sent: lookup hooks.invalid: no such host (never reached the provider; no retries left after 2 attempts)" (person4@example.com).`,
	}, m.Reasons)

	// The counts (every page's read model) agree, and so do the rows.
	p, err := plan.GetPlan(b.ctx, b.f.Pool, c.PlanID)
	require.NoError(t, err)
	k, err := audit.ListCounts(b.ctx, b.f.Pool, p.ListID, p.TargetCount)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1, 1, 1, 0}, []int{k.Failed, k.Refused, k.GivenUp, k.Unreached, k.FailedToRetry()})
	page, err := audit.QueryTargets(b.ctx, b.f.Pool, audit.TargetQuery{ListID: p.ListID, Count: p.TargetCount})
	require.NoError(t, err)
	var failures []string
	for _, r := range page.Rows {
		failures = append(failures, r.Failure)
	}
	require.Equal(t, []string{"", "rejected", "exhausted", "unreached"}, failures)
}
