package toolcall_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// bundle is one test database, as the application role, with an agent.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool // the application role's
	owner *pgxpool.Pool // the schema owner's
	svc   *toolcall.Service
	agent auth.Actor
	oper  auth.Actor
}

func setup(t *testing.T) *bundle {
	t.Helper()
	urls := pgtest.Database(t)
	b := &bundle{ctx: t.Context(), pool: pgtest.NewPool(t, urls.App), owner: pgtest.NewPool(t, urls.Owner)}
	b.svc = toolcall.NewService(b.pool, toolcall.Options{})
	id := pgtest.User(t, b.pool, pgtest.UserOpts{Email: "owner@example.com", Roles: []string{"proposer", "operator"}})
	b.agent = auth.Actor{UserID: id, Email: "owner@example.com", Roles: []auth.Role{auth.RoleProposer, auth.RoleOperator}, Agent: true}
	id = pgtest.User(t, b.pool, pgtest.UserOpts{Email: "oli@example.com", Roles: []string{"operator"}})
	b.oper = auth.Actor{UserID: id, Email: "oli@example.com", Roles: []auth.Role{auth.RoleOperator}}
	return b
}

func (b *bundle) register(t *testing.T, tool string, rec toolcall.Recovery) {
	t.Helper()
	_, err := toolcall.Register(b.ctx, b.owner, toolcall.RegisterParams{Tool: tool, Recovery: rec, RegisteredBy: "admin"})
	require.NoError(t, err)
}

func (b *bundle) begin(t *testing.T, tool, event string, args string, lease time.Duration) toolcall.BeginResult {
	t.Helper()
	res, err := b.svc.Begin(b.ctx, b.agent, toolcall.BeginParams{
		Identity: ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}},
		Args:     []byte(args), Lease: lease})
	require.NoError(t, err)
	return res
}

// TestBeginRefusesBadInput: each refusal names its field in one sentence,
// and a refused first use registers nothing.
func TestBeginRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}
	for _, tc := range []struct {
		p     toolcall.BeginParams
		field string
		msg   string
	}{
		{toolcall.BeginParams{Identity: ledger.KeyInput{Tool: "crm.set", Target: target}, Args: []byte(`{}`)}, "event", "event is required"},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "CRM", Target: target}, Args: []byte(`{}`)}, "tool", `"CRM" is not a tool name`},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.set"}, Args: []byte(`{}`)}, "target", "target kind is empty"},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.set", Target: target}}, "args", "is required"},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.set", Target: target}, Args: []byte(`{"a":`)}, "args", "not valid JSON"},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.set", Target: target}, Args: []byte(`{}`), Lease: time.Millisecond}, "lease_seconds", "from 1 to 3600"},
		{toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.set", Target: target}, Args: []byte(`{}`), Recovery: toolcall.RecoveryDedupe}, "recovery",
			"tool crm.set is not registered, and a tool's first use registers it with no recovery and no approval"},
	} {
		_, err := b.svc.Begin(b.ctx, b.agent, tc.p)
		var fe *onceplan.FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc.p)
		require.Equal(t, tc.field, fe.Field)
		require.Contains(t, err.Error(), tc.msg)
		require.NotContains(t, err.Error(), "\n")
	}
	policies, err := toolcall.Policies(b.ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, policies, "a refused begin registers nothing")

	// A declaration that differs from the registration is refused.
	b.register(t, "crm.dedupe", toolcall.RecoveryDedupe)
	_, err = b.svc.Begin(b.ctx, b.agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.dedupe", Target: target},
		Args: []byte(`{}`), Recovery: toolcall.RecoveryNone})
	require.ErrorContains(t, err, "tool crm.dedupe is registered with recovery: dedupe by key, no approval (by admin), not what this call declares (recovery none)")
	res, err := b.svc.Begin(b.ctx, b.agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: "e", Tool: "crm.dedupe", Target: target},
		Args: []byte(`{}`), Recovery: toolcall.RecoveryDedupe})
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, res.Outcome)
}

// TestLeaseFencing: a heartbeat extends the lease; once a deduplicating
// tool's lease ended, the next begin takes the call over with a new
// lease, and the old lease can neither heartbeat nor settle. The
// takeover's settle is the one recorded, as a re-send.
func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "crm.dedupe", toolcall.RecoveryDedupe)
	first := b.begin(t, "crm.dedupe", "run-1", `{"v":1}`, time.Second)
	require.Equal(t, toolcall.Perform, first.Outcome)
	st, err := b.svc.Heartbeat(b.ctx, b.agent, first.Status.Key, first.Status.LeaseID, 2*time.Second)
	require.NoError(t, err)
	require.True(t, st.LeaseUntil.After(first.Status.LeaseUntil))
	require.Equal(t, toolcall.InDoubt, b.begin(t, "crm.dedupe", "run-1", `{"v":1}`, time.Second).Outcome, "the lease runs")

	await.Until(t, time.Minute, "a begin after the lease ran out taking the attempt over", func() bool {
		return b.begin(t, "crm.dedupe", "run-1", `{"v":1}`, time.Minute).Outcome != toolcall.InDoubt
	})
	now, err := b.svc.GetFor(b.ctx, b.oper, first.Status.Key)
	require.NoError(t, err)
	require.Equal(t, 1, now.Takeovers)
	require.NotEqual(t, first.Status.LeaseID, now.LeaseID)

	_, err = b.svc.Heartbeat(b.ctx, b.agent, first.Status.Key, first.Status.LeaseID, time.Minute)
	require.ErrorIs(t, err, toolcall.ErrLease)
	_, err = b.svc.Settle(b.ctx, b.agent, toolcall.SettleParams{Key: first.Status.Key, Lease: first.Status.LeaseID, Outcome: toolcall.Done, Receipt: "r", Raw: []byte("old")})
	require.ErrorIs(t, err, toolcall.ErrLease)
	require.Contains(t, err.Error(), "do not settle")

	done, err := b.svc.Settle(b.ctx, b.agent, toolcall.SettleParams{Key: first.Status.Key, Lease: now.LeaseID, Outcome: toolcall.Done, Receipt: "r2", Raw: []byte("new")})
	require.NoError(t, err)
	require.Equal(t, toolcall.State(ledger.StateDone), done.State)
	require.Equal(t, "new", string(done.Raw))
	require.Equal(t, ledger.ResponseResend, done.RawKind)
	_, err = b.svc.Heartbeat(b.ctx, b.agent, first.Status.Key, now.LeaseID, time.Minute)
	require.ErrorIs(t, err, onceplan.ErrConflict, "no call in hand once settled")
}

// TestSettledUnknownByDedupeIsPerformedAgain: the agent itself reports
// unknown (a timeout); with a deduplicating tool the next begin performs
// it again with the same key, and its answer resolves the doubt.
func TestSettledUnknownByDedupeIsPerformedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register(t, "crm.dedupe", toolcall.RecoveryDedupe)
	first := b.begin(t, "crm.dedupe", "run-1", `{}`, time.Minute)
	_, err := b.svc.Settle(b.ctx, b.agent, toolcall.SettleParams{Key: first.Status.Key, Lease: first.Status.LeaseID, Outcome: toolcall.Unknown, Reason: "timed out"})
	require.NoError(t, err)
	again := b.begin(t, "crm.dedupe", "run-1", `{}`, time.Minute)
	require.Equal(t, toolcall.Perform, again.Outcome)
	require.True(t, again.Takeover)
	st, err := b.svc.Settle(b.ctx, b.agent, toolcall.SettleParams{Key: first.Status.Key, Lease: again.Status.LeaseID, Outcome: toolcall.Done, Receipt: "r1", Raw: []byte(`{"dup":true}`)})
	require.NoError(t, err)
	require.Equal(t, toolcall.State(ledger.StateDone), st.State)
	require.Equal(t, "dedupe:agent:owner@example.com", st.ResolvedBy)
	require.Equal(t, toolcall.AlreadyDone, b.begin(t, "crm.dedupe", "run-1", `{}`, time.Minute).Outcome)
}

// TestLateSettleOfAnUnknown: a tool without recovery whose lease ended is
// unknown; the agent's late answer does not settle it (only a person
// does), but is recorded beside it for that person, and answered with
// the state it is in.
func TestLateSettleOfAnUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.begin(t, "crm.none", "run-1", `{}`, time.Second)
	require.True(t, first.Registered)
	await.Until(t, time.Minute, "the expired attempt recovered", func() bool {
		n, err := b.svc.RecoverDue(b.ctx, 10)
		require.NoError(t, err)
		return n == 1
	})
	st, err := b.svc.GetFor(b.ctx, b.oper, first.Status.Key)
	require.NoError(t, err)
	require.Equal(t, toolcall.State(ledger.StateUnknown), st.State)
	require.Contains(t, st.Reason, "a person resolves it")

	st, err = b.svc.Settle(b.ctx, b.agent, toolcall.SettleParams{Key: first.Status.Key, Lease: first.Status.LeaseID, Outcome: toolcall.Done, Receipt: "r", Raw: []byte("it worked")})
	require.NoError(t, err)
	require.Equal(t, toolcall.State(ledger.StateUnknown), st.State)
	require.Equal(t, "it worked", string(st.Raw))

	// A person resolves it; the agent may not.
	_, err = b.svc.Resolve(b.ctx, b.agent, toolcall.ResolveParams{Key: first.Status.Key, Outcome: ledger.Delivered, Reason: "the agent says so"})
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	_, err = b.svc.Resolve(b.ctx, b.oper, toolcall.ResolveParams{Key: first.Status.Key, Outcome: ledger.Delivered, Reason: "the CRM shows it"})
	require.NoError(t, err)
	require.Equal(t, toolcall.AlreadyDone, b.begin(t, "crm.none", "run-1", `{}`, time.Minute).Outcome)

	events, err := b.svc.Events(b.ctx, b.oper, toolcall.EventFilter{Tool: "crm.none", Event: "run-1"})
	require.NoError(t, err)
	var actions []string
	for _, e := range events {
		actions = append(actions, fmt.Sprintf("%s:%s", e.Action, e.State))
	}
	require.Equal(t, []string{"begin:pending", "recover:unknown", "settle:unknown", "resolve:done"}, actions)
}

// TestHeartbeatOnlyExtends: a heartbeat asking for less than the lease
// has left keeps its end, and one after the lease ended is refused: the
// call is in doubt, and its recovery decides (a lease only runs forward).
func TestHeartbeatOnlyExtends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.begin(t, "crm.none", "run-1", `{}`, time.Minute)
	st, err := b.svc.Heartbeat(b.ctx, b.agent, first.Status.Key, first.Status.LeaseID, time.Second)
	require.NoError(t, err)
	require.Equal(t, first.Status.LeaseUntil, st.LeaseUntil, "a shorter heartbeat does not shorten the lease")

	short := b.begin(t, "crm.none", "run-2", `{}`, time.Second)
	await.Until(t, 10*time.Second, "the short lease to end", func() bool {
		st, err := b.svc.GetFor(b.ctx, b.oper, short.Status.Key)
		return err == nil && st.LeaseExpired
	})
	_, err = b.svc.Heartbeat(b.ctx, b.agent, short.Status.Key, short.Status.LeaseID, time.Minute)
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Contains(t, err.Error(), "no heartbeat revives it")
	st, err = b.svc.GetFor(b.ctx, b.oper, short.Status.Key)
	require.NoError(t, err)
	require.True(t, st.LeaseExpired, "still ended")
}

// TestRecoverDuePastTheWindow: maintenance's recovery of a dedupe call
// whose outside system's window for the key has closed, and of a probe
// call past its outside system's retention, leaves each unknown for a
// person with a reason naming the window: never a takeover, never a
// probe's "not found" believed (the probe is not even asked).
func TestRecoverDuePastTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var probes atomic.Int32
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(probe.Close)
	_, err := toolcall.Register(b.ctx, b.owner, toolcall.RegisterParams{Tool: "pay.dedupe", Recovery: toolcall.RecoveryDedupe,
		DedupeWindow: 2 * time.Second, RegisteredBy: "admin"})
	require.NoError(t, err)
	_, err = toolcall.Register(b.ctx, b.owner, toolcall.RegisterParams{Tool: "mail.probe", Recovery: toolcall.RecoveryProbe,
		ProbeURL: probe.URL + "/{key}", ProbeRetention: time.Second, RegisteredBy: "admin"})
	require.NoError(t, err)

	for _, tc := range []struct{ tool, reason string }{
		{"pay.dedupe", "honours a key for 2s from the first call"},
		{"mail.probe", "keeps its records for 1s from the first call"},
	} {
		first := b.begin(t, tc.tool, "run-1", `{}`, time.Second)
		require.Equal(t, toolcall.Perform, first.Outcome)
		await.Until(t, 20*time.Second, tc.tool+": maintenance's recovery to act on the ended lease", func() bool {
			_, err := b.svc.RecoverDue(b.ctx, 10)
			require.NoError(t, err)
			st, err := b.svc.GetFor(b.ctx, b.oper, first.Status.Key)
			require.NoError(t, err)
			return st.State != toolcall.State(ledger.StatePending)
		})
		st, err := b.svc.GetFor(b.ctx, b.oper, first.Status.Key)
		require.NoError(t, err)
		require.Equal(t, toolcall.State(ledger.StateUnknown), st.State, tc.tool)
		require.Contains(t, st.Reason, tc.reason)
		require.Contains(t, st.Reason, "a person resolves it")
		require.Zero(t, st.Takeovers)
		n, err := b.svc.RecoverDue(b.ctx, 10)
		require.NoError(t, err)
		require.Zero(t, n, "%s: nothing more for recovery to do", tc.tool)
		again := b.begin(t, tc.tool, "run-1", `{}`, time.Second)
		require.Equal(t, toolcall.InDoubt, again.Outcome, tc.tool)
	}
	require.Zero(t, probes.Load(), "past its retention the probe is not asked")
}
