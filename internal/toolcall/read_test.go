package toolcall_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestListsAreTheReadRule: the lists (List, Counts, Requests, Events)
// filter by the same rule as the single reads (GetFor, GetRequestFor),
// for every kind of reader: a call or a request is listed to exactly
// those who may open it.
func TestListsAreTheReadRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	actor := func(email string, agent bool, roles ...auth.Role) auth.Actor {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		return auth.Actor{UserID: pgtest.User(t, b.pool, pgtest.UserOpts{Email: email, Roles: names}), Email: email, Roles: roles, Agent: agent}
	}
	pat := actor("pat@example.com", true, auth.RoleProposer)
	sam := actor("sam@example.com", true, auth.RoleProposer, auth.RoleOperator) // an operator's agent token
	_, err := toolcall.Register(b.ctx, b.owner, toolcall.RegisterParams{Tool: "pay.send", ApprovalRequired: true, RegisteredBy: "admin"})
	require.NoError(t, err)
	var keys []ledger.Key
	var requests []int64
	for _, a := range []auth.Actor{b.agent, pat, sam} {
		for _, tool := range []string{"crm.set", "pay.send"} {
			res, err := b.svc.Begin(b.ctx, a, toolcall.BeginParams{Identity: ledger.KeyInput{Event: "run-1", Tool: tool,
				Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}}, Args: []byte(`{}`), Lease: time.Minute})
			require.NoError(t, err)
			keys = append(keys, res.Status.Key)
			if res.Outcome == toolcall.AwaitingApproval {
				requests = append(requests, res.Status.ApprovalID)
			}
		}
	}
	require.Len(t, requests, 3)

	person := func(a auth.Actor) auth.Actor { a.Agent = false; return a }
	readers := map[string]auth.Actor{
		"pat's agent": pat, "pat": person(pat), "sam's agent": sam, "sam, an operator": person(sam),
		"an operator": b.oper, "an approver": actor("amy@example.com", false, auth.RoleApprover),
		"a viewer": actor("vic@example.com", false, auth.RoleViewer), "an admin": actor("ada@example.com", false, auth.RoleAdmin),
	}
	for name, a := range readers {
		var mayRead []ledger.Key
		for _, k := range keys {
			_, err := b.svc.GetFor(b.ctx, a, k)
			if err == nil {
				mayRead = append(mayRead, k)
			} else {
				require.ErrorIs(t, err, onceplan.ErrNotFound, name)
			}
		}
		var listed []ledger.Key
		rows, err := b.svc.List(b.ctx, a, toolcall.ListFilter{})
		require.NoError(t, err)
		for _, r := range rows {
			listed = append(listed, r.Key)
		}
		events, err := b.svc.Events(b.ctx, a, toolcall.EventFilter{})
		require.NoError(t, err)
		var inTrail []ledger.Key
		for _, e := range events {
			if !slices.Contains(inTrail, e.Key) {
				inTrail = append(inTrail, e.Key)
			}
		}
		counts, err := b.svc.Counts(b.ctx, a, "", "", false)
		require.NoError(t, err)
		counted := 0
		for _, c := range counts {
			if c.State != toolcall.StateAwaitingApproval {
				counted += c.N
			}
		}
		var mayOpen, requested []int64
		for _, id := range requests {
			_, err := b.svc.GetRequestFor(b.ctx, a, id)
			if err == nil {
				mayOpen = append(mayOpen, id)
			} else {
				require.True(t, errors.Is(err, onceplan.ErrNotFound), "%s: %v", name, err)
			}
		}
		reqs, err := b.svc.Requests(b.ctx, a, toolcall.RequestFilter{})
		require.NoError(t, err)
		for _, r := range reqs {
			requested = append(requested, r.ID)
		}
		waiting := 0
		for _, c := range counts {
			if c.State == toolcall.StateAwaitingApproval {
				waiting += c.N
			}
		}

		// Calls that have an intent are listed and counted; every call
		// (awaiting approval too) is in the trail.
		var begun []ledger.Key
		for _, k := range mayRead {
			st, err := b.svc.GetFor(b.ctx, a, k)
			require.NoError(t, err)
			if st.State != toolcall.StateAwaitingApproval {
				begun = append(begun, k)
			}
		}
		require.ElementsMatch(t, begun, listed, "%s: the calls listed are those they may open", name)
		require.Equal(t, len(begun), counted, "%s: the calls counted", name)
		require.ElementsMatch(t, mayRead, inTrail, "%s: the trail is of the calls they may open", name)
		require.ElementsMatch(t, mayOpen, requested, "%s: the requests listed are those they may open", name)
		require.Equal(t, len(mayOpen), waiting, "%s: the requests counted", name)
	}

	// The rule itself, for the record: own calls, and everything for an
	// operator or admin in person; requests for approvers too.
	for name, want := range map[string][2]int{
		"pat's agent": {2, 1}, "pat": {2, 1}, "sam's agent": {2, 1}, "sam, an operator": {6, 3}, "an operator": {6, 3},
		"an approver": {0, 3}, "a viewer": {0, 0}, "an admin": {6, 3},
	} {
		r := toolcall.ReaderOf(readers[name])
		calls, reqs := 0, 0
		for i, owner := range []int64{b.agent.UserID, b.agent.UserID, pat.UserID, pat.UserID, sam.UserID, sam.UserID} {
			if r.Call(owner) {
				calls++
			}
			if i%2 == 1 && r.Request(owner) {
				reqs++
			}
		}
		require.Equal(t, want, [2]int{calls, reqs}, name)
	}
}
