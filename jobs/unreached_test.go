package jobs_test

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
)

// failures lists each of the campaign's keys' attempts' failures, in order.
func (w *world) failures(t *testing.T) [][]string {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT array_agg(coalesce(failure, state::text) ORDER BY id) FROM effect GROUP BY key ORDER BY key`)
	require.NoError(t, err)
	var out [][]string
	for rows.Next() {
		var fs []string
		require.NoError(t, rows.Scan(&fs))
		out = append(out, fs)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestProviderNeverReachedEndsSayingSo: a provider the workers cannot
// reach (nothing listens: every request fails before it is written). Each
// try is recorded as unsent and the last as unreached, with its reason;
// while the targets wait, a try is scheduled for them (NextTries); once
// their tries ran out, the campaign completes with an incomplete outcome
// counting them as never reached, the next steps say what to check, and
// the audit names them — never "refused by the provider".
func TestProviderNeverReachedEndsSayingSo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	w := newWorld(t, jobs.Config{MaxAttempts: 4}, "down="+dead)
	w.start(t)
	id := w.running(t, "down", 2)
	camp, err := approval.GetCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)

	// Between tries (2 s, 4 s, 8 s apart) the targets wait for a
	// scheduled one.
	await.Until(t, 60*time.Second, "a retry scheduled for a target that did not reach the provider", func() bool {
		next, err := w.svc.NextTries(w.ctx, camp, []int{1, 2})
		require.NoError(t, err)
		for _, at := range next {
			if at.After(time.Now()) {
				return true
			}
		}
		return false
	})

	await.Until(t, 90*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Equal(t, [][]string{{"unsent", "unsent", "unsent", "unreached"}, {"unsent", "unsent", "unsent", "unreached"}}, w.failures(t))
	var reason string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM effect WHERE failure = 'unreached' LIMIT 1`).Scan(&reason))
	require.Contains(t, reason, "could not be sent")
	require.Contains(t, reason, "(never reached the provider; no retries left after 4 attempts)")
	next, err := w.svc.NextTries(w.ctx, camp, []int{1, 2})
	require.NoError(t, err)
	require.Empty(t, next, "nothing tries them again by itself")

	// The campaign's answer: state completed, outcome incomplete, both
	// never reached; the steps name the provider's address, not a refusal.
	res, err := w.svc.Get(w.ctx, id)
	require.NoError(t, err)
	res, err = w.svc.Answer(w.ctx, res, nil)
	require.NoError(t, err)
	k := res.Answer.Counts
	require.Equal(t, []int{2, 2, 0, 0}, []int{k.Failed, k.Unreached, k.Refused, k.GivenUp})
	o := approval.OutcomeOf(res.Campaign, k)
	require.NotNil(t, o)
	require.Equal(t, approval.EndingIncomplete, o.Ending)
	require.Equal(t, 2, o.NeverReached)
	require.Equal(t, "The campaign completed without every target getting its effect: 0 of 2 sent; 2 never reached the provider.", o.Summary)
	steps := approval.NextSteps(res.Campaign, res.Answer.Decision, k, res.Answer.Serving, time.Now())
	i := slices.IndexFunc(steps, func(s approval.NextStep) bool { return s.Kind == approval.StepUnreached })
	require.GreaterOrEqual(t, i, 0, "%+v", steps)
	require.Equal(t, 2, steps[i].Count)
	require.Contains(t, steps[i].What, "2 targets never reached the provider")
	for _, s := range steps {
		require.NotContains(t, s.What, "refused", "the provider refused nothing: %+v", s)
	}

	m, err := audit.ForCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)
	require.Equal(t, 2, m.Unreached)
	require.Equal(t, "0/2 exactly once; does not hold: 2 never reached the provider", m.Headline())
	require.Len(t, m.Reasons, 1)
	require.Contains(t, m.Reasons[0], "2 targets never reached the provider")
	require.NotContains(t, m.Reasons[0], "refused by the provider")
}

// TestProviderReachedOnceIsGivenUpNotUnreached: a target whose first try
// reached the provider (it answered 408, a temporary failure) and whose
// last did not is given up after its tries — "never reached the provider"
// would not be true.
func TestProviderReachedOnceIsGivenUpNotUnreached(t *testing.T) {
	t.Parallel()
	hook := sink.NewWebhook(sink.WebhookOpts{})
	hook.FailNext(1, 408, nil, "")
	w := newWorld(t, jobs.Config{MaxAttempts: 2}, "hook="+hook.URL())
	w.start(t)
	id := w.running(t, "hook", 1)
	await.Until(t, 30*time.Second, "the first try's 408 recorded", func() bool {
		fs := w.failures(t)
		return len(fs) == 1 && len(fs[0]) >= 1 && fs[0][0] == "retry"
	})
	hook.Close() // the second try finds nobody listening
	await.Until(t, 60*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, id) == approval.StateCompleted })
	require.Equal(t, [][]string{{"retry", "exhausted"}}, w.failures(t))
	m, err := audit.ForCampaign(w.ctx, w.pool, id)
	require.NoError(t, err)
	require.Equal(t, []int{1, 0}, []int{m.Exhausted, m.Unreached})
}
