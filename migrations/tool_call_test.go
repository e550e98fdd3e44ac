package migrations_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// toolSQL is a plain-SQL session as the application role, in one
// transaction per statement list (rolled back unless commit).
type toolSQL struct {
	t   *testing.T
	app *pgxpool.Pool
}

// refused runs stmts in one transaction and requires the last to fail
// with SQLSTATE code (the others must succeed); nothing is kept.
func (s toolSQL) refused(code string, stmts ...string) {
	s.t.Helper()
	ctx := s.t.Context()
	tx, err := s.app.Begin(ctx)
	require.NoError(s.t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	for i, sql := range stmts {
		_, err = tx.Exec(ctx, sql)
		if i < len(stmts)-1 {
			require.NoError(s.t, err, sql)
		}
	}
	if err == nil {
		err = tx.Commit(ctx) // deferred constraints
	}
	var pgErr *pgconn.PgError
	require.Truef(s.t, errors.As(err, &pgErr), "%s: want SQLSTATE %s, got %v", stmts[len(stmts)-1], code, err)
	require.Equalf(s.t, code, pgErr.Code, "%s: %s", stmts[len(stmts)-1], pgErr.Message)
}

// ok runs stmts in one committed transaction.
func (s toolSQL) ok(stmts ...string) {
	s.t.Helper()
	err := pgx.BeginFunc(s.t.Context(), s.app, func(tx pgx.Tx) error {
		for _, sql := range stmts {
			if _, err := tx.Exec(s.t.Context(), sql); err != nil {
				return errors.New(sql + ": " + err.Error())
			}
		}
		return nil
	})
	require.NoError(s.t, err)
}

// TestToolCallRulesAsAppRole: what the server never legitimately does
// with single effects, PostgreSQL refuses to the application role, in
// plain SQL (migration 0021).
func TestToolCallRulesAsAppRole(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	owner := pgtest.NewPool(t, urls.Owner)
	s := toolSQL{t: t, app: pgtest.NewPool(t, urls.App)}
	ctx := t.Context()

	// Users: the requester, an approver, a viewer.
	var req int64
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO app_user (email, roles) VALUES ('req@example.com', '{proposer,approver}') RETURNING id`).Scan(&req))
	_, err := owner.Exec(ctx, `INSERT INTO app_user (email, roles) VALUES ('appr@example.com', '{approver}'), ('view@example.com', '{viewer}')`)
	require.NoError(t, err)
	reqID := strconv.FormatInt(req, 10)

	// A key and its identity, as toolcall writes them for the requester.
	identity := func(event, tool string) (string, string) {
		key, canonical, err := toolcall.KeyOf(req, ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}})
		require.NoError(t, err)
		return string(key), string(canonical)
	}
	q := func(s string) string { return "'" + s + "'" }

	// 1. The server registers a tool only as its first use: the default
	// of every other column (no recovery, no approval). A recovery, an
	// approval setting or a first_use of false is the owner's.
	s.ok(`INSERT INTO tool_policy (tool, registered_by) VALUES ('crm.set', 'agent:req@example.com')`)
	for _, sql := range []string{
		`INSERT INTO tool_policy (tool, recovery, registered_by) VALUES ('crm.set', 'dedupe', 'server')`,
		`INSERT INTO tool_policy (tool, approval_required, registered_by) VALUES ('pay.send', false, 'server')`,
		`INSERT INTO tool_policy (tool, first_use, registered_by) VALUES ('pay.send', false, 'server')`,
		`UPDATE tool_policy SET approval_required = false`,
		`DELETE FROM tool_policy`,
		`UPDATE tool_call SET args = '{}'`,
		`DELETE FROM tool_call`,
		`DELETE FROM tool_attempt`,
		`UPDATE tool_attempt SET policy_id = policy_id`,
		`UPDATE tool_attempt SET approval_id = NULL`,
		`DELETE FROM tool_approval`,
		`UPDATE tool_call_event SET reason = 'rewritten'`,
		`TRUNCATE tool_call_event`,
	} {
		requireRefused(t, s.app, sql)
	}
	var firstUse, approval bool
	var recovery string
	require.NoError(t, s.app.QueryRow(ctx, `SELECT first_use, recovery, approval_required FROM tool_policy WHERE tool = 'crm.set'`).
		Scan(&firstUse, &recovery, &approval))
	require.True(t, firstUse)
	require.Equal(t, "none", recovery)
	require.False(t, approval)

	// The owner registers: a recovery, and approval for pay.send.
	_, err = owner.Exec(ctx, `INSERT INTO tool_policy (tool, recovery, approval_required, first_use, registered_by) VALUES
		('dedupe.set', 'dedupe', false, false, 'admin'), ('pay.send', 'none', true, false, 'admin')`)
	require.NoError(t, err)

	// 2. A key is the v1 key of the identity beside it; the args are not
	// part of it; bound args never change.
	key, id := identity("run-1", "crm.set")
	other, _ := identity("run-2", "crm.set")
	s.refused("23514", `INSERT INTO tool_call (key, identity, tool, event, args, created_by) VALUES (`+q(other)+`, `+q(id)+`, 'crm.set', 'run-1', '{}', 'x')`)
	s.refused("23514", `INSERT INTO tool_call (key, identity, tool, event, args, created_by) VALUES (`+q(key)+`, `+q(id)+`, 'other.tool', 'run-1', '{}', 'x')`)
	bind := `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (` + q(key) + `, ` + q(id) + `, 'crm.set', 'run-1', '{"v": "A"}', 'agent:req@example.com', ` + reqID + `)`
	claim := func(k string) string {
		return `INSERT INTO effect (key, owner) VALUES (` + q(k) + `, 'agent:req@example.com')`
	}
	attempt := func(k string) string {
		return `INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:req@example.com', now() + interval '1 minute' FROM effect WHERE key = ` + q(k) + ` AND state = 'pending'`
	}
	// 3. An effect on a tool call's key has its attempt record by commit.
	s.refused("OP007", bind, claim(key))
	s.refused("23505", bind, bind)
	s.ok(bind, claim(key), attempt(key))
	// The attempt's policy is the tool's in force, whatever was written.
	var policyID, current int64
	require.NoError(t, s.app.QueryRow(ctx, `SELECT a.policy_id, tool_policy_current('crm.set') FROM tool_attempt a WHERE a.key = $1`, key).
		Scan(&policyID, &current))
	require.Equal(t, current, policyID)

	// 4. Its lease passes to another performer only when the tool
	// deduplicates and the attempt is in doubt: never for crm.set (no
	// recovery), and never while the lease runs.
	takeover := func(k string) string {
		return `UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = 'agent:mallory', lease_until = now() + interval '1 minute',
			takeovers = takeovers + 1 WHERE key = ` + q(k)
	}
	s.refused("OP007", takeover(key))
	// A lease is never moved back (TestHostileLeaseMovedBackwards).
	s.refused("OP007", `UPDATE tool_attempt SET lease_until = now() - interval '1 second' WHERE key = `+q(key))
	dkey, did := identity("run-1", "dedupe.set")
	s.ok(`INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (`+q(dkey)+`, `+q(did)+`, 'dedupe.set', 'run-1', '{}', 'agent:req@example.com', `+reqID+`)`,
		claim(dkey), strings.Replace(attempt(dkey), "interval '1 minute'", "interval '300 milliseconds'", 1))
	s.refused("OP007", takeover(dkey))
	s.refused("OP007", `UPDATE tool_attempt SET lease_id = gen_random_uuid() WHERE key = `+q(dkey)) // a lease without counting it
	await.Until(t, 10*time.Second, "the dedupe attempt's lease to end by the database's clock", func() bool {
		var ended bool
		return s.app.QueryRow(ctx, `SELECT lease_until < now() FROM tool_attempt WHERE key = $1`, dkey).Scan(&ended) == nil && ended
	})
	s.ok(takeover(dkey))
	// Once settled, the lease is over.
	s.ok(`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'ok' FROM effect WHERE key = `+q(key),
		`UPDATE effect SET state = 'done', receipt = 'r1' WHERE key = `+q(key))
	s.refused("OP007", `UPDATE tool_attempt SET lease_until = now() + interval '1 hour' WHERE key = `+q(key))

	// 5. A tool that requires approval: no attempt without a person's
	// approval of exactly the bound args, by someone who holds the role
	// and did not begin the call.
	pkey, pid := identity("run-1", "pay.send")
	payCall := `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (` + q(pkey) + `, ` + q(pid) + `, 'pay.send', 'run-1', '{"cents": 500}', 'agent:req@example.com', ` + reqID + `)`
	s.refused("OP007", payCall, claim(pkey), attempt(pkey))
	s.ok(`INSERT INTO tool_approval_request (key, identity, tool, event, args, policy_id, requested_by, requested_by_user)
		SELECT ` + q(pkey) + `, ` + q(pid) + `, 'pay.send', 'run-1', '{"cents": 500}', tool_policy_current('pay.send'), 'agent:req@example.com', id
		FROM app_user WHERE email = 'req@example.com'`)
	decide := func(email, digest string) string {
		return `INSERT INTO tool_approval (request_id, decision, args_digest, decided_by)
			SELECT r.id, 'approved', ` + digest + `, u.id FROM tool_approval_request r, app_user u WHERE r.key = ` + q(pkey) + ` AND u.email = ` + q(email)
	}
	s.refused("OP006", decide("req@example.com", "r.args_digest"))
	s.refused("OP007", decide("view@example.com", "r.args_digest"))
	s.refused("OP007", decide("appr@example.com", "repeat('0', 64)"))
	// Approved for other args: still no attempt for these.
	s.ok(`INSERT INTO tool_approval_request (key, identity, tool, event, args, policy_id, requested_by, requested_by_user)
		SELECT `+q(pkey)+`, `+q(pid)+`, 'pay.send', 'run-1', '{"cents": 50000}', tool_policy_current('pay.send'), 'agent:req@example.com', id
		FROM app_user WHERE email = 'req@example.com'`,
		`INSERT INTO tool_approval (request_id, decision, args_digest, decided_by)
		SELECT r.id, 'approved', r.args_digest, u.id FROM tool_approval_request r, app_user u
		WHERE r.key = `+q(pkey)+` AND r.args = '{"cents": 50000}' AND u.email = 'appr@example.com'`)
	s.refused("OP007", payCall, claim(pkey), attempt(pkey))
	s.ok(decide("appr@example.com", "tool_args_digest('{\"cents\": 500}')") + ` AND r.args = '{"cents": 500}'`)
	s.ok(payCall, claim(pkey), attempt(pkey))
	var approvalID *int64
	require.NoError(t, s.app.QueryRow(ctx, `SELECT approval_id FROM tool_attempt WHERE key = $1`, pkey).Scan(&approvalID))
	require.NotNil(t, approvalID, "the attempt names the approval it performs")

	// 6. Nothing of it is ever deleted or rewritten.
	requireRefused(t, s.app, `DELETE FROM tool_approval_request`)
	requireRefused(t, s.app, `UPDATE tool_approval SET decision = 'rejected'`)
}
