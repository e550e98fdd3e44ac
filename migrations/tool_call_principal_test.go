package migrations_test

// Migration 0037, attacked in plain SQL as onceplan_app at every
// isolation level (docs/ARCHITECTURE.md, "Single agent effects"): a call
// is its user's own, and an effect outside any plan is a tool call's,
// written after its intent.

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

// agentOf is a's agent token, as the API's actor.
func agentOf(a auth.Actor) auth.Actor {
	a.Agent = true
	return a
}

// callOf is the server's intent of the call of user (email, id) on key
// with identity, in plain SQL.
func callOf(tool, event, key, identity, email string, user int64) string {
	return `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (` + quote(key) + `, ` +
		quote(identity) + `, ` + quote(tool) + `, ` + quote(event) + `, '{}', ` + quote("agent:"+email) + `, ` + strconv.FormatInt(user, 10) + `)`
}

// TestHostileEffectBeforeItsToolCall: the application role writes an
// effect outside any plan on the key of a call a user's agent has not
// begun yet (keys are hashes of what the call names: anyone can compute
// the next one): pending, so that the agent is told "in flight" for
// ever, or done with a forged receipt for the agent to replay. The intent
// written after it in the same transaction, or beside it by another
// transaction not yet committed, does not make it a call's. PostgreSQL
// refuses each at every isolation level (migration 0037), and the agent's
// begin then performs its call.
func TestHostileEffectBeforeItsToolCall(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	_, err := h.app.Exec(h.ctx, `INSERT INTO tool_policy (tool, registered_by) VALUES ('crm.set', 'agent:pat@example.com')`)
	require.NoError(t, err)
	in := ledger.KeyInput{Event: "run-7/step-1", Tool: "crm.set", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-9"}}
	k, identity, err := toolcall.KeyOf(h.proposer.UserID, in)
	require.NoError(t, err)
	key := quote(string(k))
	pending := `INSERT INTO effect (key, owner) VALUES (` + key + `, 'agent:mallory@example.com')`
	forged := []string{pending,
		`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', '{"id":"forged"}' FROM effect WHERE key = ` + key,
		`UPDATE effect SET state = 'done', receipt = 'forged' WHERE key = ` + key}
	intent := callOf("crm.set", in.Event, string(k), string(identity), h.proposer.Email, h.proposer.UserID)
	attempt := `INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
		SELECT id, key, 0, 'agent:mallory@example.com', now() + interval '1 minute' FROM effect WHERE key = ` + key

	h.refused(t, []string{"OP007"}, pending)
	h.refused(t, []string{"OP007"}, forged...)
	// The intent comes first, whatever the order of the statements.
	h.refused(t, []string{"OP007"}, pending, intent, attempt)
	// With the intent first, an effect without its attempt record is
	// refused at commit (migration 0021).
	h.refused(t, []string{"OP007"}, intent, pending)

	// Another transaction holding the intent, not committed: the effect's
	// transaction cannot see it, and is refused.
	holder, err := h.app.Begin(h.ctx)
	require.NoError(t, err)
	defer holder.Rollback(h.ctx)
	_, err = holder.Exec(h.ctx, intent)
	require.NoError(t, err)
	h.refused(t, []string{"OP007"}, pending)
	require.NoError(t, holder.Rollback(h.ctx))

	// The agent is neither stuck nor replayed a forgery: its begin
	// performs the call, under the key the attacks aimed at.
	svc := toolcall.NewService(h.app, toolcall.Options{})
	res, err := svc.Begin(h.ctx, agentOf(h.proposer), toolcall.BeginParams{Identity: in, Args: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, res.Outcome, "%+v", res.Status)
	require.Equal(t, k, res.Status.Key)
}

// TestHostileToolCallOfAnotherUser: the application role files a call
// under one user whose identity names another (or nobody), asks for an
// approval of one user's call in another's name, and has a call begun
// before calls were their users' own perform an approval another user
// asked for. PostgreSQL refuses each at every isolation level (migration
// 0037), and the service says why to the call's user.
func TestHostileToolCallOfAnotherUser(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	_, err := h.owner.Exec(h.ctx, `INSERT INTO tool_policy (tool, approval_required, first_use, registered_by) VALUES ('pay.send', true, false, 'admin')`)
	require.NoError(t, err)
	in := ledger.KeyInput{Event: "invoice-42", Tool: "pay.send", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "vendor-7"}}
	pat, patIdentity, err := toolcall.KeyOf(h.proposer.UserID, in)
	require.NoError(t, err)
	mallory, _, err := toolcall.KeyOf(h.mallory.UserID, in)
	require.NoError(t, err)
	require.NotEqual(t, pat, mallory, "two users' identical operations are two calls")

	// The identity as it was before (no principal), and with the
	// principal written as a string: each with the key of its identity.
	principal := `,"principal":` + strconv.FormatInt(h.proposer.UserID, 10)
	require.Contains(t, string(patIdentity), principal)
	keyOf := func(identity string) string {
		var k string
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT tool_key_of($1)`, identity).Scan(&k))
		return k
	}
	spaced := strings.Replace(string(patIdentity), principal, "", 1)
	asText := strings.Replace(string(patIdentity), principal, `,"principal":"`+strconv.FormatInt(h.proposer.UserID, 10)+`"`, 1)

	// 1. A call is filed under the user its identity names.
	h.refused(t, []string{"23514"}, callOf("pay.send", in.Event, string(pat), string(patIdentity), h.mallory.Email, h.mallory.UserID))
	h.refused(t, []string{"23514"}, callOf("pay.send", in.Event, keyOf(spaced), spaced, h.proposer.Email, h.proposer.UserID))
	h.refused(t, []string{"23514"}, callOf("pay.send", in.Event, keyOf(asText), asText, h.proposer.Email, h.proposer.UserID))

	// 2. An approval request is asked for by the call's own user.
	request := func(key, identity, email string, user int64) string {
		return `INSERT INTO tool_approval_request (key, identity, tool, event, args, policy_id, requested_by, requested_by_user)
			VALUES (` + quote(key) + `, ` + quote(identity) + `, 'pay.send', 'invoice-42', '{"cents": 500}', tool_policy_current('pay.send'), ` +
			quote("agent:"+email) + `, ` + strconv.FormatInt(user, 10) + `)`
	}
	h.refused(t, []string{"OP007"}, request(string(pat), string(patIdentity), h.mallory.Email, h.mallory.UserID))
	h.refused(t, []string{"OP007"}, request(keyOf(spaced), spaced, h.mallory.Email, h.mallory.UserID))

	// 3. A call begun before this migration by pat, on the approval that
	// mallory asked for then (the two shared a key), failed; its next
	// attempt needs an approval pat asked for.
	_, err = migrations.DownTo(h.ctx, h.owner, 36)
	require.NoError(t, err)
	legacy := keyOf(spaced)
	h.commit(t, request(legacy, spaced, h.mallory.Email, h.mallory.UserID))
	h.commit(t, `INSERT INTO tool_approval (request_id, decision, args_digest, decided_by)
		SELECT id, 'approved', args_digest, `+strconv.FormatInt(h.approver.UserID, 10)+` FROM tool_approval_request WHERE key = `+quote(legacy))
	then := strings.Replace(callOf("pay.send", in.Event, legacy, spaced, h.proposer.Email, h.proposer.UserID), `'{}'`, `'{"cents": 500}'`, 1)
	h.commit(t, then,
		`INSERT INTO effect (key, owner) VALUES (`+quote(legacy)+`, 'agent:pat@example.com')`,
		`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:pat@example.com', now() + interval '1 minute' FROM effect WHERE key = `+quote(legacy),
		`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'declined' FROM effect WHERE key = `+quote(legacy),
		`UPDATE effect SET state = 'failed', reason = 'declined', failure = 'retry' WHERE key = `+quote(legacy))
	_, err = migrations.Up(h.ctx, h.owner)
	require.NoError(t, err)
	again := []string{`INSERT INTO effect (key, owner) VALUES (` + quote(legacy) + `, 'agent:pat@example.com')`,
		`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:pat@example.com', now() + interval '1 minute' FROM effect WHERE key = ` + quote(legacy) + ` AND state = 'pending'`}
	h.refused(t, []string{"OP007"}, again...)
	pgErr := h.attack(t, pgx.ReadCommitted, again...)
	require.Contains(t, pgErr.Message, "asked for by the call's own user")

	// Through the service: pat's begin finds the old call (its own), and
	// is told the approval is not its own; mallory's is a call of its own.
	svc := toolcall.NewService(h.app, toolcall.Options{})
	args := []byte(`{"cents": 500}`)
	_, err = svc.Begin(h.ctx, agentOf(h.proposer), toolcall.BeginParams{Identity: in, Args: args})
	require.ErrorIs(t, err, onceplan.ErrForbidden)
	require.Contains(t, err.Error(), "asked for by another user")
	res, err := svc.Begin(h.ctx, agentOf(h.mallory), toolcall.BeginParams{Identity: in, Args: args})
	require.NoError(t, err)
	require.Equal(t, toolcall.AwaitingApproval, res.Outcome, "mallory's own call waits for an approval of its own")
	require.Equal(t, mallory, res.Status.Key)
	var n int
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT count(*) FROM effect WHERE key = $1`, legacy).Scan(&n))
	require.Equal(t, 1, n, "nothing more was attempted on the old call")
}
