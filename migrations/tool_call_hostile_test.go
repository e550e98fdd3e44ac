package migrations_test

// An adversarial review connected as onceplan_app, the role serve runs as,
// and found ways around the single effects' rules (docs/ARCHITECTURE.md,
// "Single agent effects"). Each test here performs that attack in plain
// SQL as that role, in every isolation level — and, where a snapshot
// could decide, from a real second connection holding an old snapshot —
// and requires PostgreSQL to refuse it with nothing changed.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
	"github.com/onceplan/onceplan/plan"
)

// toolHostile is a database with campaigns made the way the server makes
// them, the application role's pool (the attacker) and the superuser's
// (only to look, and to act as the schema's owner registering tools).
type toolHostile struct {
	ctx      context.Context
	app      *pgxpool.Pool
	admin    *pgxpool.Pool
	owner    *pgxpool.Pool
	svc      *approval.Service
	proposer auth.Actor
	approver auth.Actor
	operator auth.Actor
	// mallory is the user the attacks' calls are filed under (holdKey).
	mallory auth.Actor
}

func newToolHostile(t *testing.T) *toolHostile {
	t.Helper()
	urls := pgtest.Database(t)
	h := &toolHostile{ctx: t.Context(), app: pgtest.NewPool(t, urls.App), admin: pgtest.NewPool(t, urls.Admin), owner: pgtest.NewPool(t, urls.Owner)}
	client, err := river.NewClient(riverpgxv5.New(h.app), &river.Config{})
	require.NoError(t, err)
	h.svc = approval.NewService(h.app, jobs.NewEnqueuer(client))
	user := func(email string, roles ...auth.Role) auth.Actor {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		return auth.Actor{UserID: pgtest.User(t, h.admin, pgtest.UserOpts{Email: email, Roles: names}), Email: email, Roles: roles}
	}
	h.proposer = user("pat@example.com", auth.RoleProposer)
	h.approver = user("amy@example.com", auth.RoleApprover)
	h.operator = user("oli@example.com", auth.RoleOperator)
	h.mallory = user("mallory@example.com", auth.RoleProposer)
	return h
}

// campaignTarget is one target of a campaign: its address, its key, and
// the identity its key is the v1 key of.
type campaignTarget struct {
	address, key, identity string
}

// campaign makes a campaign of addrs (approved: its plan is frozen) and
// returns its id and targets.
func (h *toolHostile) campaign(t *testing.T, approved bool, addrs ...string) (string, []campaignTarget) {
	t.Helper()
	created, err := h.svc.Create(h.ctx, h.proposer, approval.CreateParams{
		Name: "Newsletter", Provider: "outbox",
		Payload: plan.Payload{From: "news@example.com", Subject: "Hello", Text: "Hi"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email\n" + strings.Join(addrs, "\n") + "\n")},
	})
	require.NoError(t, err)
	id := created.Campaign.ID
	if approved {
		_, err = h.svc.Submit(h.ctx, h.proposer, id)
		require.NoError(t, err)
		res, err := h.svc.Approve(h.ctx, h.approver, id, created.PlanHash)
		require.NoError(t, err)
		require.Equal(t, approval.StateApproved, res.Campaign.State)
	}
	var out []campaignTarget
	for _, a := range addrs {
		in := ledger.KeyInput{Event: id, Tool: "email.send", Target: ledger.Target{Kind: ledger.TargetEmail, Value: a}}
		canonical, err := ledger.CanonicalJSON(in)
		require.NoError(t, err)
		var key string
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT t.key FROM draft d JOIN target t ON t.list_id = d.list_id
			WHERE d.campaign_id = $1 AND t.target = $2`, id, a).Scan(&key))
		want, err := ledger.NewKey(in)
		require.NoError(t, err)
		require.Equal(t, string(want), key, "a plan target's key is the v1 key of {event: campaign, tool, target}")
		out = append(out, campaignTarget{address: a, key: key, identity: string(canonical)})
	}
	return id, out
}

// toolTables are the tables the attacks aim at.
var toolTables = []string{"tool_policy", "tool_call", "tool_approval_request", "tool_approval", "tool_attempt", "tool_call_event",
	"effect", "effect_response", "plan", "target"}

// contents is every row of toolTables, as text.
func (h *toolHostile) contents(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range toolTables {
		var s string
		require.NoError(t, h.admin.QueryRow(h.ctx, fmt.Sprintf(
			`SELECT coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '') FROM %s x`, table)).Scan(&s), table)
		out[table] = s
	}
	return out
}

var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

// attack runs stmts as the application role in one transaction at iso
// and returns PostgreSQL's error (a statement's, or the commit's).
func (h *toolHostile) attack(t *testing.T, iso pgx.TxIsoLevel, stmts ...string) *pgconn.PgError {
	t.Helper()
	err := pgx.BeginTxFunc(h.ctx, h.app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(h.ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s at %s: want PostgreSQL to refuse, got %v", strings.Join(stmts, "; "), iso, err)
	return pgErr
}

// refused requires PostgreSQL to refuse the attack with one of codes, at
// every isolation level, with nothing changed.
func (h *toolHostile) refused(t *testing.T, codes []string, stmts ...string) {
	t.Helper()
	before := h.contents(t)
	for _, iso := range isolationLevels {
		pgErr := h.attack(t, iso, stmts...)
		require.Containsf(t, codes, pgErr.Code, "%s at %s: refused with %s (%s), want one of %v",
			strings.Join(stmts, "; "), iso, pgErr.Code, pgErr.Message, codes)
	}
	require.Equal(t, before, h.contents(t), "a refused attack changes nothing")
}

// commit runs stmts as the application role in one committed transaction.
func (h *toolHostile) commit(t *testing.T, stmts ...string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(h.ctx, h.app, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(h.ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}))
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// holdKey is the server's begin in plain SQL: the call's intent on key
// (with identity), filed under mallory (newToolHostile), its pending
// ledger row and its attempt with a lease.
func holdKey(tool, event, key, identity string) []string {
	stmts := holdKeyThen(tool, event, key, identity)
	stmts[1] = `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user) VALUES (` + quote(key) + `, ` + quote(identity) + `, ` +
		quote(tool) + `, ` + quote(event) + `, '{}', 'agent:mallory@example.com', (SELECT id FROM app_user WHERE email = 'mallory@example.com'))`
	return stmts
}

// holdKeyThen is holdKey as the server wrote it before migration 0028,
// which recorded the call's user.
func holdKeyThen(tool, event, key, identity string) []string {
	return []string{
		`INSERT INTO tool_policy (tool, registered_by) VALUES (` + quote(tool) + `, 'agent:mallory@example.com') ON CONFLICT DO NOTHING`,
		`INSERT INTO tool_call (key, identity, tool, event, args, created_by) VALUES (` + quote(key) + `, ` + quote(identity) + `, ` +
			quote(tool) + `, ` + quote(event) + `, '{}', 'agent:mallory@example.com')`,
		`INSERT INTO effect (key, owner) VALUES (` + quote(key) + `, 'agent:mallory@example.com')`,
		`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:mallory@example.com', now() + interval '1 minute' FROM effect WHERE key = ` + quote(key) + ` AND state = 'pending'`,
	}
}

// TestHostileToolCallOnACampaignTargetsKey: the application role writes
// a single effect whose identity is a campaign target's — {event: the
// campaign's id, tool email.send, target: the address}, whose v1 key is
// the target's key — for a plan frozen before, and for a draft frozen
// after. PostgreSQL refuses the intent: a single effect's identity
// carries "space":"single", which no campaign target's does, so its key
// is never one (migration 0026). The campaigns then claim every target.
func TestHostileToolCallOnACampaignTargetsKey(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	frozen, before := h.campaign(t, true, "ann@example.com", "bob@example.com")
	draft, after := h.campaign(t, false, "cy@example.com")
	for _, c := range []struct {
		campaign string
		target   campaignTarget
	}{{frozen, before[0]}, {draft, after[0]}} {
		h.refused(t, []string{"23514"}, holdKey("email.send", c.campaign, c.target.key, c.target.identity)...)
		// The identity's member order does not matter to jsonb, and a
		// "space" of another value is no single effect's either.
		for _, identity := range []string{
			strings.Replace(c.target.identity, `"target"`, `"space":"campaign","target"`, 1),
			`{"tool":"email.send","event":` + fmt.Sprintf("%q", c.campaign) + `,"target":{"kind":"email","value":` + fmt.Sprintf("%q", c.target.address) + `},"amount_minor":0,"scope":""}`,
		} {
			var key string
			require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT tool_key_of($1)`, identity).Scan(&key))
			h.refused(t, []string{"23514"}, holdKey("email.send", c.campaign, key, identity)...)
		}
	}

	// The draft is frozen after the attempts; both plans claim every
	// target, as a campaign's worker does.
	created, err := h.svc.Submit(h.ctx, h.proposer, draft)
	require.NoError(t, err)
	_, err = h.svc.Approve(h.ctx, h.approver, draft, created.PlanHash)
	require.NoError(t, err)
	store := ledger.NewStore(h.app)
	for _, c := range []struct {
		campaign string
		targets  []campaignTarget
	}{{frozen, before}, {draft, after}} {
		var planID int64
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT plan_id FROM campaign WHERE id = $1`, c.campaign).Scan(&planID))
		// Started: an attempt at a plan's target is made only then.
		_, err := h.svc.Start(h.ctx, h.operator, c.campaign)
		require.NoError(t, err)
		for i, tg := range c.targets {
			claim, err := store.ClaimOne(h.ctx, ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: ledger.Key(tg.key), Owner: "worker", PlanID: planID, Ordinal: i + 1}}, ledger.Gate{})
			require.NoError(t, err)
			require.Equal(t, ledger.ClaimWon, claim.Outcome, "%s: the campaign's own claim of its target", tg.address)
		}
	}
	var held int
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT count(*) FROM tool_call c JOIN target t ON t.key = c.key`).Scan(&held))
	require.Zero(t, held, "no single effect holds a target's key")
}

// TestSingleEffectKeysAreNeverCampaignKeys: the key a single effect gets
// for a campaign target's identity is not the target's; PostgreSQL agrees
// it is the v1 key of the identity the call stores.
func TestSingleEffectKeysAreNeverCampaignKeys(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	id, targets := h.campaign(t, true, "ann@example.com")
	key, identity, err := toolcall.KeyOf(h.mallory.UserID, ledger.KeyInput{Event: id, Tool: "email.send", Target: ledger.Target{Kind: ledger.TargetEmail, Value: " Ann@Example.com "}})
	require.NoError(t, err)
	require.NotEqual(t, targets[0].key, string(key))
	want := strings.Replace(targets[0].identity, `,"target"`, `,"space":"single","target"`, 1)
	want = strings.Replace(want, `,"scope"`, `,"principal":`+strconv.FormatInt(h.mallory.UserID, 10)+`,"scope"`, 1)
	require.Equal(t, want, string(identity))
	var inDB string
	require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT tool_key_of($1)`, string(identity)).Scan(&inDB))
	require.Equal(t, string(key), inDB)
}

// TestHostileLegacyToolCallOnACampaignTarget: calls begun before single
// effects had a key space of their own keep their keys; one whose key is
// a campaign target's (the attack, made before the upgrade) never starts
// or takes over an attempt on a plan's target again, and no plan is
// frozen with a target whose key one of them holds — in plain SQL at
// every isolation level, and through the service's begin.
func TestHostileLegacyToolCallOnACampaignTarget(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	frozen, before := h.campaign(t, true, "ann@example.com", "bob@example.com")
	draft, after := h.campaign(t, false, "cy@example.com")

	_, err := migrations.DownTo(h.ctx, h.owner, 25)
	require.NoError(t, err)
	_, err = h.owner.Exec(h.ctx, `INSERT INTO tool_policy (tool, recovery, first_use, registered_by) VALUES ('email.send', 'dedupe', false, 'admin')`)
	require.NoError(t, err)
	// As the server wrote them then: ann's failed, bob's in doubt (its
	// lease ended), cy's done.
	then := func(c string, tg campaignTarget, state string) {
		stmts := holdKeyThen("email.send", c, tg.key, tg.identity)[1:]
		stmts[2] = strings.Replace(stmts[2], "now() + interval '1 minute'", "now() - interval '1 second'", 1)
		switch state {
		case "failed":
			stmts = append(stmts, `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'no' FROM effect WHERE key = `+quote(tg.key),
				`UPDATE effect SET state = 'failed', reason = 'refused', failure = 'retry' WHERE key = `+quote(tg.key))
		case "done":
			stmts = append(stmts, `INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'ok' FROM effect WHERE key = `+quote(tg.key),
				`UPDATE effect SET state = 'done', receipt = 'agent-1' WHERE key = `+quote(tg.key))
		}
		h.commit(t, stmts...)
	}
	then(frozen, before[0], "failed")
	then(frozen, before[1], "pending")
	then(draft, after[0], "done")
	_, err = migrations.Up(h.ctx, h.owner)
	require.NoError(t, err)

	// No new attempt on ann's key, no takeover of bob's.
	h.refused(t, []string{"OP008"},
		`INSERT INTO effect (key, owner) VALUES (`+quote(before[0].key)+`, 'agent:mallory@example.com')`,
		`INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			SELECT id, key, 0, 'agent:mallory@example.com', now() + interval '1 minute' FROM effect WHERE key = `+quote(before[0].key)+` AND state = 'pending'`)
	h.refused(t, []string{"OP008"}, `UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = 'agent:mallory@example.com',
		lease_until = now() + interval '1 minute', takeovers = takeovers + 1 WHERE key = `+quote(before[1].key))

	// Nor through the service: a runtime of the user who began ann's call
	// retrying it is refused.
	agent := auth.Actor{UserID: h.mallory.UserID, Email: h.mallory.Email, Roles: h.mallory.Roles, Agent: true}
	svc := toolcall.NewService(h.app, toolcall.Options{})
	res, err := svc.Begin(h.ctx, agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: frozen, Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "ann@example.com"}}, Args: []byte(`{}`)})
	require.ErrorIs(t, err, onceplan.ErrForbidden, "%+v", res)
	require.Contains(t, err.Error(), "campaign target's key")
	res, err = svc.Begin(h.ctx, agent, toolcall.BeginParams{Identity: ledger.KeyInput{Event: frozen, Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "bob@example.com"}}, Args: []byte(`{}`)})
	require.ErrorIs(t, err, onceplan.ErrForbidden, "%+v", res)
	// Another user's identical operation is never handed the old call
	// (migration 0037): it is their own, under a key of their own.
	other := auth.Actor{UserID: h.proposer.UserID, Email: h.proposer.Email, Roles: h.proposer.Roles, Agent: true}
	contents := h.contents(t)
	res, err = svc.Begin(h.ctx, other, toolcall.BeginParams{Identity: ledger.KeyInput{Event: frozen, Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "bob@example.com"}}, Args: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, res.Outcome)
	require.NotEqual(t, before[1].key, string(res.Status.Key))
	require.Equal(t, contents["plan"], h.contents(t)["plan"])

	// The draft holding cy's key is not frozen.
	contents = h.contents(t)
	sub, err := h.svc.Submit(h.ctx, h.proposer, draft)
	require.NoError(t, err)
	_, err = h.svc.Approve(h.ctx, h.approver, draft, sub.PlanHash)
	require.ErrorIs(t, err, onceplan.ErrConflict)
	require.Contains(t, err.Error(), after[0].key)
	for _, table := range []string{"plan", "effect", "tool_call", "tool_attempt"} {
		require.Equal(t, contents[table], h.contents(t)[table], "%s: a refused approval changes nothing", table)
	}
}
