package migrations_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestToolCallCreatorAndEvidenceAsAppRole: migration 0028's rules, in
// plain SQL as the application role. A call is filed only under the user
// its created_by names, and never moved; a person's evidence is written
// only with their resolution of a tool call, in its transaction, once;
// neither it nor the receipt they gave ever changes.
func TestToolCallCreatorAndEvidenceAsAppRole(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	owner := pgtest.NewPool(t, urls.Owner)
	s := toolSQL{t: t, app: pgtest.NewPool(t, urls.App)}
	ctx := t.Context()
	q := func(s string) string { return "'" + s + "'" }
	var ann, bob int64
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO app_user (email, roles) VALUES ('ann@example.com', '{proposer}') RETURNING id`).Scan(&ann))
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO app_user (email, roles) VALUES ('bob@example.com', '{operator}') RETURNING id`).Scan(&bob))
	annID, bobID := strconv.FormatInt(ann, 10), strconv.FormatInt(bob, 10)
	s.ok(`INSERT INTO tool_policy (tool, registered_by) VALUES ('crm.set', 'agent:ann@example.com')`)

	call := func(event, createdBy string, principal int64, user string) (string, string) {
		key, canonical, err := toolcall.KeyOf(principal, ledger.KeyInput{Event: event, Tool: "crm.set", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}})
		require.NoError(t, err)
		return string(key), `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (` +
			q(string(key)) + `, ` + q(string(canonical)) + `, 'crm.set', ` + q(event) + `, '{}', ` + q(createdBy) + `, ` + user + `)`
	}

	// 1. Filed under the user created_by names; never under someone
	// else, never under nobody (migration 0037: a call's identity names
	// its user), and never moved.
	_, asBob := call("run-0", "agent:ann@example.com", bob, bobID)
	s.refused("OP007", asBob)
	_, unknownUser := call("run-0", "agent:ann@example.com", 424242, "424242")
	s.refused("OP007", unknownUser)
	key, asAnn := call("run-1", "agent:ann@example.com", ann, annID)
	s.ok(asAnn)
	_, personal := call("run-2", "user:ann@example.com", ann, annID)
	s.ok(personal)
	_, nobody := call("run-3", "agent:ann@example.com", ann, "NULL")
	s.refused("23514", nobody)
	requireRefused(t, s.app, `UPDATE tool_call SET created_by_user = `+bobID+` WHERE key = `+q(key))

	// An attempt that became unknown (the lease ended, recovery decided).
	s.ok(`INSERT INTO effect (key, owner) VALUES (`+q(key)+`, 'agent:ann@example.com')`,
		`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:ann@example.com', now() + interval '1 minute' FROM effect WHERE key = `+q(key),
		`UPDATE effect SET state = 'unknown', reason = 'the lease ended' WHERE key = `+q(key))
	evidence := `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'person', 'found it in the CRM' FROM effect WHERE key = ` + q(key)
	resolve := func(actor string) string {
		return `UPDATE effect SET state = 'done', receipt = 'crm-77', resolved_by = ` + q(actor) + `, resolution = 'the CRM shows it' WHERE key = ` + q(key)
	}

	// 2. No person's evidence without a person's resolution in the same
	// transaction: not before it, not for recovery's or a re-send's.
	s.refused("OP001", evidence)
	s.refused("OP001", resolve("probe:crm.set"), evidence)
	s.refused("OP001", resolve("dedupe:agent:ann@example.com"), evidence)
	// With it: once.
	s.refused("23505", resolve("user:bob@example.com"), evidence, evidence)
	s.ok(resolve("user:bob@example.com"), evidence)
	// 3. Not added after the fact, never changed, never withdrawn; the
	// receipt they gave neither.
	s.refused("OP001", evidence)
	requireRefused(t, s.app, `UPDATE effect_response SET body = 'something else' WHERE kind = 'person'`)
	requireRefused(t, s.app, `DELETE FROM effect_response WHERE kind = 'person'`)
	s.refused("OP001", `UPDATE effect SET receipt = 'crm-78' WHERE key = `+q(key))
	var body, receipt string
	require.NoError(t, s.app.QueryRow(ctx, `SELECT convert_from(r.body, 'UTF8'), e.receipt FROM effect_response r JOIN effect e ON e.id = r.effect_id
		WHERE r.kind = 'person' AND e.key = $1`, key).Scan(&body, &receipt))
	require.Equal(t, "found it in the CRM", body)
	require.Equal(t, "crm-77", receipt)
}
