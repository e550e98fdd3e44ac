package migrations_test

// The application role's writes, table by table (docs/ARCHITECTURE.md,
// "The guarantee against the server's own role"): appWrites declares, for
// every table onceplan_app may write, the writes the server does, and the
// rules PostgreSQL enforces on them. TestAppRoleWriteCatalog reads the
// catalog and fails when a table the role may write has no entry, when a
// grant is declared by nobody, or when an entry names a table, a column or
// a function that no longer exists; TestAppRoleUndeclaredWritesRefused
// tries, as onceplan_app on rows the server wrote, every write no entry
// declares and every illegal variant of the declared ones, at READ
// COMMITTED, REPEATABLE READ and SERIALIZABLE, and requires PostgreSQL to
// refuse each, with nothing changed.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/migrations"
)

// appWrite is what the server writes to one table as onceplan_app. Which
// package owns the table is internal/doccheck/owners_test.go's tableOwner
// (where it names one); Owner names it for the tables that map leaves out.
type appWrite struct {
	// Owner is the package whose SQL writes the table, for tables
	// tableOwner does not list ("": see tableOwner).
	Owner string
	// Insert says which rows the server inserts, and when ("": never).
	Insert string
	// Update lists the columns the server updates.
	Update []string
	// Delete says which rows the server deletes, and when ("": never).
	Delete string
	// Guarded lists columns the role may update although the server
	// never does, each with the trigger that refuses the change; each is
	// tried among Refused.
	Guarded map[string]string
	// Refused are the illegal variants of the declared writes that
	// PostgreSQL refuses: each is tried.
	Refused []refusal
}

// refusal is a write the server never makes, and PostgreSQL's refusal of
// it: one of codes, at every isolation level.
type refusal struct {
	what  string
	sql   []string
	codes []string
}

func refuse(what string, codes []string, sql ...string) refusal {
	return refusal{what: what, sql: sql, codes: codes}
}

// SQLSTATEs of the refusals.
var (
	privilege   = []string{"42501"}
	writeOnce   = []string{"OP001"}
	illegal     = []string{"OP002"}
	fixed       = []string{"OP003"}
	evidence    = []string{"OP004"}
	sequence    = []string{"OP005"}
	authorship  = []string{"OP006"}
	frozen      = []string{"OP007"}
	gate        = []string{"OP008"}
	foreignKey  = []string{"23503"}
	gateOrStale = []string{"OP007", "OP008"}
)

// Rows of the catalog world (catalogWorld), named in the attacks.
const (
	completedCampaign = `(SELECT id FROM campaign WHERE name = 'maildir')`
	pendingCampaign   = `(SELECT id FROM campaign WHERE name = 'pending')`
	draftCampaign     = `(SELECT id FROM campaign WHERE name = 'draft')`
	archivedCampaign  = `(SELECT id FROM campaign WHERE name = 'archived')`
	aDoneEffect       = `(SELECT e.id FROM effect e JOIN plan p ON p.id = e.plan_id JOIN campaign c ON c.id = p.campaign_id
		WHERE c.name = 'maildir' AND e.state = 'done' ORDER BY e.id LIMIT 1)`
	anUnknownEffect = `(SELECT id FROM effect WHERE state = 'unknown' ORDER BY id LIMIT 1)`
	aFailedEffect   = `(SELECT id FROM effect WHERE state = 'failed' ORDER BY id LIMIT 1)`
	aPendingEffect  = `(SELECT id FROM effect WHERE state = 'pending' ORDER BY id LIMIT 1)`
)

// appWrites is every table onceplan_app may write, with the writes the
// server does.
var appWrites = map[string]appWrite{
	"admin_event": {
		Insert: "an admin's change to a user or a token (the admin pages, onceplan user and token): the trail, write-once",
	},
	"api_idempotency": {
		Owner:  "approval",
		Insert: "an API create with an Idempotency-Key: the key, the request's hash and the campaign it made",
		Refused: []refusal{
			refuse("the same key twice for a user", []string{"23505"},
				`INSERT INTO api_idempotency (user_id, key, request_hash, campaign_id) SELECT user_id, key, request_hash, `+draftCampaign+` FROM api_idempotency LIMIT 1`),
		},
	},
	"api_token": {
		Insert: "a token a user or an admin creates (shown once, stored hashed)",
		Update: []string{"last_used_at", "revoked_at"},
		Refused: []refusal{
			refuse("a revoked token brought back", writeOnce, `UPDATE api_token SET revoked_at = NULL WHERE revoked_at IS NOT NULL`),
			refuse("a revoked token's revocation moved", writeOnce, `UPDATE api_token SET revoked_at = now() + interval '1 year' WHERE revoked_at IS NOT NULL`),
		},
	},
	"app_user": {
		Insert: "a user an admin adds (the admin pages, onceplan user add, the first admin at start)",
		Update: []string{"roles", "password_hash", "disabled_at"},
	},
	"approval": {
		Insert: "a person's approval of the campaign's latest submission (approval_not_self, plan_approved)",
		Refused: []refusal{
			refuse("an approval of a campaign that is not pending approval", frozen,
				`INSERT INTO approval (campaign_id, version, plan_hash, approver_id)
				 SELECT campaign_id, version, plan_hash, (SELECT id FROM app_user WHERE email = 'amy@example.com') FROM submission WHERE campaign_id = `+completedCampaign+` ORDER BY id DESC LIMIT 1`),
			refuse("an approval by the draft's proposer", authorship,
				`INSERT INTO approval (campaign_id, version, plan_hash, approver_id)
				 SELECT campaign_id, version, plan_hash, proposed_by FROM submission WHERE campaign_id = `+pendingCampaign),
			refuse("an approval of a hash that was not submitted", frozen,
				`INSERT INTO approval (campaign_id, version, plan_hash, approver_id)
				 SELECT campaign_id, version, repeat('0', 64), (SELECT id FROM app_user WHERE email = 'amy@example.com') FROM submission WHERE campaign_id = `+pendingCampaign),
		},
	},
	"campaign": {
		Insert: "a new campaign, a draft at version 1 (approval.Service.Create)",
		Update: []string{"state", "version", "plan_id"},
		Refused: []refusal{
			refuse("completed -> approved, an edge the lifecycle does not have", illegal,
				`UPDATE campaign SET state = 'approved' WHERE id = `+completedCampaign),
			refuse("a version going down", fixed, `UPDATE campaign SET version = version - 1 WHERE id = `+completedCampaign),
			refuse("a campaign's plan moved to another campaign's", frozen,
				`UPDATE campaign SET plan_id = (SELECT plan_id FROM campaign WHERE name = 'batched') WHERE id = `+completedCampaign),
			refuse("running again without a recorded start of its plan", frozen,
				`UPDATE campaign SET state = 'pending_approval' WHERE id = `+draftCampaign,
				`UPDATE campaign SET state = 'approved' WHERE id = `+draftCampaign),
			refuse("an archived campaign run again", illegal,
				`UPDATE campaign SET state = 'running' WHERE id = `+archivedCampaign),
			refuse("a campaign created running, on another campaign's plan", privilege,
				`INSERT INTO campaign (name, provider, created_by, state, plan_id, version)
				 SELECT 'forged', provider, created_by, 'running', plan_id, version FROM campaign WHERE id = `+completedCampaign),
			refuse("a campaign created completed", privilege,
				`INSERT INTO campaign (name, provider, created_by, state) SELECT 'forged', provider, created_by, 'completed' FROM campaign WHERE id = `+completedCampaign),
		},
	},
	"campaign_event": {
		Insert: "the campaign's trail: every action on it, write-once",
	},
	"draft": {
		Insert: "a campaign's first draft, and each new version an edit after submitting starts (approval.Service.Edit, approval.Service.ImportTargets)",
		Update: []string{"from_addr", "subject", "text_body", "html_body", "list_id", "last_edited_by", "updated_at"},
		Refused: []refusal{
			refuse("a submitted draft edited", frozen,
				`UPDATE draft SET subject = 'changed after approval' WHERE campaign_id = `+completedCampaign),
			refuse("a submitted draft pending approval edited", frozen,
				`UPDATE draft SET list_id = NULL WHERE campaign_id = `+pendingCampaign),
		},
	},
	"effect": {
		Insert: "an attempt: a worker's claim of a plan's target while its campaign runs that plan, or a tool call's attempt (ledger.Store.ClaimMany)",
		Update: []string{"state", "receipt", "reason", "resolved_by", "resolution", "revoked_by", "revoke_reason", "failure"},
		Refused: []refusal{
			refuse("an attempt that starts done", illegal,
				`INSERT INTO effect (key, owner, state) SELECT key, 'mallory', 'done' FROM effect WHERE id = `+aDoneEffect),
			refuse("an attempt at a completed campaign's target", gate,
				`INSERT INTO effect (key, owner, plan_id, ordinal, epoch) SELECT key, 'mallory', plan_id, ordinal, epoch FROM effect WHERE id = `+aFailedEffect),
			refuse("an attempt under a plan at another campaign's target's key", frozen,
				`INSERT INTO effect (key, owner, plan_id, ordinal) SELECT (SELECT key FROM target WHERE target = 'ivy@example.com'), 'mallory', plan_id, ordinal
				 FROM effect WHERE id = `+aDoneEffect),
			refuse("done back to pending", illegal, `UPDATE effect SET state = 'pending' WHERE id = `+aDoneEffect),
			refuse("a done attempt's receipt rewritten", writeOnce, `UPDATE effect SET receipt = 'forged' WHERE id = `+aDoneEffect),
			refuse("failed turned done", illegal, `UPDATE effect SET state = 'done', receipt = 'forged' WHERE id = `+aFailedEffect),
			refuse("an unknown settled without a named resolver", evidence,
				`UPDATE effect SET state = 'done', receipt = 'forged' WHERE id = `+anUnknownEffect),
			refuse("a pending attempt settled done with no raw answer recorded", evidence,
				`UPDATE effect SET state = 'done', receipt = 'forged' WHERE id = `+aPendingEffect),
			refuse("an attempt outside any plan on a key no tool call holds (a campaign target's)", frozen,
				`INSERT INTO effect (key, owner) SELECT key, 'mallory' FROM target WHERE target = 'jay@example.com'`),
			refuse("an attempt outside any plan on a tool call's key before its call", frozen,
				`INSERT INTO effect (key, owner) SELECT tool_key_of('{"space":"single","x":1}'), 'mallory'`),
		},
	},
	"effect_batch": {
		Insert: "a batch call's exact request, for one plan through its provider, committed with its members' claims (ledger.Store.ClaimCall)",
		Refused: []refusal{
			refuse("a call that names no plan", evidence,
				`INSERT INTO effect_batch (provider, call_key, request, size) VALUES ('mail', '', 'x', 1)`),
			refuse("a call through another provider than its plan's", evidence,
				`INSERT INTO effect_batch (provider, plan_id, call_key, request, size) SELECT 'outbox', plan_id, '', 'x', 1 FROM effect_batch LIMIT 1`),
			refuse("a call committed without its attempts", evidence,
				`INSERT INTO effect_batch (provider, plan_id, call_key, request, size) SELECT provider, plan_id, '', 'x', 1 FROM effect_batch LIMIT 1`),
		},
	},
	"effect_batch_member": {
		Insert: "the attempts a batch call carries, in order, each claimed in the call's own transaction",
		Refused: []refusal{
			refuse("an attempt added to a call an earlier transaction committed", privilege,
				`INSERT INTO effect_batch_member (batch_id, position, effect_id, batch_xact) SELECT batch_id, position + 100, `+aDoneEffect+`, batch_xact FROM effect_batch_member LIMIT 1`),
			refuse("an attempt claimed by an earlier transaction added to a call", evidence,
				`INSERT INTO effect_batch_member (batch_id, position, effect_id) SELECT batch_id, position + 100, `+aDoneEffect+` FROM effect_batch_member LIMIT 1`),
		},
	},
	"effect_batch_response": {
		Insert: "a batch call's raw answer, once for all its attempts (ledger.Store.AnswerCall)",
	},
	"effect_bump": {
		Insert: "a new epoch of a key: a person supersedes a done target, or a registered policy bumps it",
		Refused: []refusal{
			refuse("an epoch skipped", sequence,
				`INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) SELECT key, epoch + 2, 'human', 'user:mallory', 'skip' FROM effect_bump LIMIT 1`),
			refuse("a bump of an archived campaign's key", gate,
				`INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) SELECT key, 1, 'human', 'user:mallory', 'again' FROM effect_archive LIMIT 1`),
		},
	},
	"effect_response": {
		Insert: "an attempt's raw answer, before it is settled from it (ledger.Store.RecordResponses)",
		Refused: []refusal{
			refuse("a person's evidence with no resolution of a tool call in its transaction", writeOnce,
				`INSERT INTO effect_response (effect_id, kind, body) SELECT `+aDoneEffect+`, 'person', 'forged'`),
			refuse("a call's attempt answered on its own, with no bytes", evidence,
				`INSERT INTO effect_response (effect_id, kind, body) SELECT effect_id, 'resend', '' FROM effect_batch_member LIMIT 1`),
			refuse("a batch answer recorded with bytes of its own", evidence,
				`INSERT INTO effect_response (effect_id, kind, body, batch_response_id)
				 SELECT m.effect_id, r.kind, 'forged', r.id FROM effect_batch_response r JOIN effect_batch_member m ON m.batch_id = r.batch_id LIMIT 1`),
		},
	},
	"inbound_event": {
		Owner:  "internal/inbound",
		Insert: "a provider's bounce or complaint, raw, tied to its attempt where it can be",
		Refused: []refusal{
			refuse("an event tied to an attempt the ledger never had", foreignKey,
				`INSERT INTO inbound_event (kind, provider_event_id, type, address, raw, effect_id, key, epoch)
				 SELECT kind, 'forged', type, address, raw, -1, (SELECT key FROM effect LIMIT 1), 0 FROM inbound_event LIMIT 1`),
		},
	},
	"inbound_token": {
		Owner:  "internal/inbound",
		Insert: "a Mailgun signature's one-time token, bound to its content's digest",
		Delete: "tokens taken longer ago than inbound.TokenRetention, a few with each new one",
	},
	"login_attempt": {
		Owner:  "internal/auth",
		Insert: "every sign-in and password check, for throttling",
		Delete: "attempts too old to count towards throttling (auth.Prune)",
	},
	"notification": {
		Owner:  "internal/notify",
		Insert: "what each notifier is to say about a trail entry or an attention batch, once each",
	},
	"notification_attempt": {
		Owner:  "internal/notify",
		Insert: "each try to deliver a notification, write-once",
	},
	"notification_attention": {
		Owner:  "internal/notify",
		Insert: "a campaign's counts of targets needing attention, when they grew",
	},
	"notification_preference": {
		Owner:  "internal/notify",
		Insert: "a user's choice of the events they are told about",
		Update: []string{"enabled", "updated_at"},
	},
	"plan": {
		Insert: "the frozen plan, when the campaign's quorum approved its latest submission (plan_approved, at commit)",
		Refused: []refusal{
			refuse("a plan without its approvals", frozen,
				`INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body, list_id, target_count, plan_hash, proposed_by, list_unsubscribe)
				 SELECT s.campaign_id, s.version, 'outbox', 'email.send', s.from_addr, s.subject, s.text_body, s.html_body, s.list_id, s.target_count, s.plan_hash, s.proposed_by, true
				 FROM submission s WHERE s.campaign_id = `+pendingCampaign),
		},
	},
	"river_job": {
		Insert: "River's client: every write of its queue (jobs/ only, docs/ARCHITECTURE.md: River's tables)",
		Update: riverColumns["river_job"],
		Delete: "River's cleaner: finished jobs past their retention",
	},
	"river_leader": {
		Insert: "River's leader election",
		Update: riverColumns["river_leader"],
		Delete: "River's leader resigning",
	},
	"river_notification": {
		Insert: "River's client (its notification table)",
		Update: riverColumns["river_notification"],
		Delete: "River's client",
	},
	"river_queue": {
		Insert: "River's client: a queue, when a worker first works it",
		Update: riverColumns["river_queue"],
		Delete: "River's queue cleaner",
	},
	"run": {
		Insert: "the recorded start of a plan (approval.Service.Start)",
	},
	"session": {
		Owner:  "internal/auth",
		Insert: "a sign-in",
		Update: []string{"last_seen_at"},
		Delete: "a sign-out, a password change or a disable (every session of the user), and ended sessions (auth.Prune)",
	},
	"submission": {
		Insert: "a submit: what the draft was, copied by PostgreSQL (submission_insert)",
		Refused: []refusal{
			refuse("a submission of a campaign that is not pending approval", frozen,
				`INSERT INTO submission (campaign_id, version, plan_hash) SELECT id, version, repeat('0', 64) FROM campaign WHERE id = `+draftCampaign),
		},
	},
	"suppression": {
		Insert: "an address suppressed: an unsubscribe, a bounce or complaint, an admin, an import",
	},
	"suppression_removal": {
		Insert: "an admin takes an address off the list",
		Refused: []refusal{
			refuse("a removal in the name of someone who is not an enabled admin", authorship,
				`INSERT INTO suppression_removal (suppression_id, actor, reason) SELECT id, 'pat@example.com', 'nobody asked' FROM suppression WHERE address = 'cy@example.com'`),
		},
	},
	"target": {
		Insert: "a list's targets, in the list's own transaction (plan.Import)",
		Refused: []refusal{
			refuse("a target added to a list committed earlier", foreignKey,
				`INSERT INTO target (list_id, ordinal, target, key, vars, line)
				 SELECT list_id, ordinal + 100, 'ivy@example.com', (SELECT key FROM target WHERE target = 'ivy@example.com'), vars, line + 100
				 FROM target WHERE target = 'ann@example.com'`),
			refuse("a target naming the list's transaction", privilege,
				`INSERT INTO target (list_id, list_xact, ordinal, target, key, line) SELECT list_id, list_xact, ordinal + 100, target, key, line FROM target LIMIT 1`),
		},
	},
	"target_list": {
		Insert: "an import's list",
		Delete: "a draft's list replaced by a new import, when no plan froze it and no submission or draft points at it",
		Refused: []refusal{
			refuse("a frozen plan's list deleted", writeOnce, `DELETE FROM target_list WHERE id = (SELECT list_id FROM plan LIMIT 1)`),
			refuse("a list naming another transaction", privilege,
				`INSERT INTO target_list (campaign_id, target_count, digest, created_by, created_xact) SELECT campaign_id, target_count, digest, created_by, created_xact FROM target_list LIMIT 1`),
		},
	},
	"target_suppressed": {
		Insert: "a claim's record that a target's address is suppressed: left out of that plan for good",
		Refused: []refusal{
			refuse("a suppressed outcome citing an entry taken off", gateOrStale,
				`INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner)
				 SELECT t.plan_id, t.ordinal, t.key, (SELECT suppression_id FROM suppression_removal LIMIT 1), 'mallory' FROM target_suppressed t LIMIT 1`),
		},
	},
	"tool_approval": {
		Owner:  "internal/toolcall",
		Insert: "a person's decision on a tool call's exact args",
		Refused: []refusal{
			refuse("a decision by the user who began the call", authorship,
				`INSERT INTO tool_approval (request_id, decision, args_digest, decided_by) SELECT id, 'approved', args_digest, requested_by_user FROM tool_approval_request LIMIT 1`),
		},
	},
	"tool_approval_request": {
		Owner:  "internal/toolcall",
		Insert: "a tool call's request for a person's approval of its args",
	},
	"tool_attempt": {
		Owner:  "internal/toolcall",
		Insert: "a tool call's attempt and its lease (the begin)",
		Update: []string{"holder", "lease_id", "lease_until", "takeovers"},
		Refused: []refusal{
			refuse("a lease moved back", frozen, `UPDATE tool_attempt SET lease_until = lease_until - interval '1 second' WHERE lease_until > now()`),
			refuse("a lease beyond an hour", frozen, `UPDATE tool_attempt SET lease_until = now() + interval '2 hours' WHERE lease_until > now()`),
			refuse("a live lease taken over", frozen,
				`UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = 'mallory', takeovers = takeovers + 1 WHERE lease_until > now()`),
			refuse("a settled attempt's lease renewed", frozen,
				`UPDATE tool_attempt SET lease_until = now() + interval '1 minute' FROM effect e WHERE e.id = tool_attempt.effect_id AND e.state = 'done'`),
		},
	},
	"test_send_message": {
		Insert: "one row per test message, committed before it is sent (approval.TestSender.Send)",
		Refused: []refusal{
			refuse("a test message to a suppressed address", gate,
				`INSERT INTO test_send_message (key, campaign_id, address, actor_id) SELECT tool_key_of('{"test":2}'), campaign_id, 'cy@example.com', actor_id FROM test_send_message LIMIT 1`),
		},
	},
	"tool_call": {
		Owner:  "internal/toolcall",
		Insert: "a tool call's intent: its identity, args and who began it",
		Refused: []refusal{
			refuse("a call whose user is not the one its creator names", frozen,
				`INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user)
				 SELECT tool_key_of('{"tool":"x","event":"e","space":"single"}'), '{"tool":"x","event":"e","space":"single"}', 'x', 'e', '{}', 'agent:pat@example.com',
				        (SELECT id FROM app_user WHERE email = 'amy@example.com')`),
			refuse("a call filed under one user whose identity names another (its key another user's)", []string{"OP007", "23514"},
				`INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user)
				 SELECT tool_key_of(i), i, 'x', 'e', '{}', 'agent:pat@example.com', (SELECT id FROM app_user WHERE email = 'pat@example.com')
				 FROM (SELECT '{"event":"e","principal":' || (SELECT id FROM app_user WHERE email = 'amy@example.com') || ',"space":"single","tool":"x"}' AS i) s`),
		},
	},
	"tool_call_event": {
		Owner:  "internal/toolcall",
		Insert: "a tool call's trail, write-once",
	},
	"tool_policy": {
		Owner:  "internal/toolcall",
		Insert: "a tool's first use: its name and who used it, every other column the default (no recovery, no approval)",
		Refused: []refusal{
			refuse("a policy the server registers for itself", privilege,
				`INSERT INTO tool_policy (tool, registered_by, first_use, approval_required) VALUES ('mallory.tool', 'agent:mallory', false, false)`),
		},
	},
	"unsubscribe_secret": {
		Owner:  "internal/suppression",
		Insert: "the unsubscribe links' secret, made once on first use",
		Refused: []refusal{
			refuse("a second secret", []string{"23505"}, `INSERT INTO unsubscribe_secret (id, secret) VALUES (1, decode(repeat('00', 32), 'hex'))`),
		},
	},
	"worker_process": {
		Insert: "a worker process's heartbeat (executor.Executor.Heartbeat)",
		Update: []string{"seen_at", "providers"},
		Delete: "a worker's own row at a clean stop (executor.Executor.Retire)",
	},
}

// riverColumns are River's tables' columns: River's client writes them
// all, and its migrations (granted by onceplan_grant_river on every
// migrate) decide what they are.
var riverColumns = map[string][]string{
	"river_job": {"id", "state", "attempt", "max_attempts", "attempted_at", "created_at", "finalized_at", "scheduled_at", "priority",
		"args", "attempted_by", "errors", "kind", "metadata", "queue", "tags", "unique_key", "unique_states"},
	"river_leader":       {"elected_at", "expires_at", "leader_id", "name"},
	"river_notification": {"id", "created_at", "payload", "topic"},
	"river_queue":        {"name", "created_at", "metadata", "paused_at", "updated_at"},
}

// appFunction is a function onceplan_app may execute that runs with its
// owner's rights (SECURITY DEFINER): what it writes, and its refusals.
type appFunction struct {
	Writes  string
	Refused []refusal
}

// appFunctions is every SECURITY DEFINER function onceplan_app may
// execute.
var appFunctions = map[string]appFunction{
	"archive_campaign": {
		Writes: "moves a completed or cancelled campaign's attempts, answers, calls and bumps into the archive (onceplan archive, the UI)",
		Refused: []refusal{
			refuse("a campaign pending approval archived", illegal, `SELECT archive_campaign(`+pendingCampaign+`, 'user:mallory')`),
			refuse("a campaign archived twice", illegal, `SELECT archive_campaign(`+archivedCampaign+`, 'user:mallory')`),
		},
	},
	"provider_pace_take": {
		Writes: "a provider's next turn (provider_pace): at most provider_pace_horizon() ahead; a latest turn beyond it, which no take gives, is replaced",
		Refused: []refusal{
			refuse("a turn interval past the horizon (the schedule pushed hours ahead)", []string{"22023"},
				`SELECT provider_pace_take('mail', 7200000000, 0)`),
			refuse("a wait past the horizon", []string{"22023"},
				`SELECT provider_pace_take('mail', 1000, 7200000000)`),
		},
	},
	"onceplan_close_gate": {
		Writes: "nothing: SHARE on effect, the lock a campaign leaving running takes (docs/ARCHITECTURE.md, \"The gate\")",
	},
}

// emptyTables are the tables the role may write that the catalog world
// leaves empty, each with why.
var emptyTables = map[string]string{
	"river_leader":       "River's leader resigns when the workers stop",
	"river_notification": "River's client of this version notifies through LISTEN/NOTIFY, not this table",
}

// granted is what onceplan_app may write to one relation.
type granted struct {
	kind                      string // pg_class.relkind
	insert, delete, truncate  bool
	insertCols, updateCols    []string
	columns                   []string
	generated, identityAlways map[string]bool
}

// appGrants reads, from the catalog, what onceplan_app may write to each
// relation of the schema (tables, views, foreign tables), column by
// column for INSERT and UPDATE.
func appGrants(ctx context.Context, db onceplan.DB) (map[string]*granted, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname, c.relkind::text, a.attname,
		       has_column_privilege($1, c.oid, a.attnum, 'INSERT'), has_column_privilege($1, c.oid, a.attnum, 'UPDATE'),
		       has_table_privilege($1, c.oid, 'DELETE'), has_table_privilege($1, c.oid, 'TRUNCATE'),
		       a.attgenerated <> '', a.attidentity = 'a'
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		ORDER BY c.relname, a.attnum`, migrations.AppRole)
	if err != nil {
		return nil, err
	}
	out := map[string]*granted{}
	for rows.Next() {
		var rel, kind, col string
		var ins, upd, del, trunc, gen, ident bool
		if err := rows.Scan(&rel, &kind, &col, &ins, &upd, &del, &trunc, &gen, &ident); err != nil {
			return nil, err
		}
		g := out[rel]
		if g == nil {
			g = &granted{kind: kind, delete: del, truncate: trunc, generated: map[string]bool{}, identityAlways: map[string]bool{}}
			out[rel] = g
		}
		g.columns = append(g.columns, col)
		g.generated[col], g.identityAlways[col] = gen, ident
		if ins {
			g.insert = true
			g.insertCols = append(g.insertCols, col)
		}
		if upd {
			g.updateCols = append(g.updateCols, col)
		}
	}
	return out, rows.Err()
}

func (g *granted) writable() bool {
	return g.insert || g.delete || g.truncate || len(g.updateCols) > 0
}

func (g *granted) says() string {
	var w []string
	if g.insert {
		w = append(w, "INSERT")
	}
	if len(g.updateCols) > 0 {
		w = append(w, "UPDATE ("+strings.Join(g.updateCols, ", ")+")")
	}
	if g.delete {
		w = append(w, "DELETE")
	}
	if g.truncate {
		w = append(w, "TRUNCATE")
	}
	return strings.Join(w, ", ")
}

// catalogProblems compares what the catalog lets onceplan_app write with
// what writes and funcs declare, and returns one sentence per difference:
// a table or a SECURITY DEFINER function the role may write through with
// no entry, a grant no entry declares, an entry that declares what the
// role may not do, and an entry naming a table, a column or a function
// that no longer exists.
func catalogProblems(ctx context.Context, db onceplan.DB, writes map[string]appWrite, funcs map[string]appFunction) ([]string, error) {
	grants, err := appGrants(ctx, db)
	if err != nil {
		return nil, err
	}
	const where = "migrations/catalog_test.go (appWrites)"
	var out []string
	for rel, g := range grants {
		w, ok := writes[rel]
		if !ok {
			if g.writable() {
				out = append(out, fmt.Sprintf("table %s: onceplan_app may %s, and %s has no entry for it: declare the writes the server does (and try the illegal ones in Refused), or revoke the rest in a migration",
					rel, g.says(), where))
			}
			continue
		}
		if g.insert && w.Insert == "" {
			out = append(out, fmt.Sprintf("table %s: onceplan_app may INSERT, which its entry in %s does not declare: declare it (Insert) or revoke it", rel, where))
		}
		if !g.insert && w.Insert != "" {
			out = append(out, fmt.Sprintf("table %s: its entry in %s declares INSERT, which onceplan_app may not do: remove it", rel, where))
		}
		if g.delete && w.Delete == "" {
			out = append(out, fmt.Sprintf("table %s: onceplan_app may DELETE, which its entry in %s does not declare: declare it (Delete) or revoke it", rel, where))
		}
		if !g.delete && w.Delete != "" {
			out = append(out, fmt.Sprintf("table %s: its entry in %s declares DELETE, which onceplan_app may not do: remove it", rel, where))
		}
		if g.truncate {
			out = append(out, fmt.Sprintf("table %s: onceplan_app may TRUNCATE it, which the server never does: revoke it", rel))
		}
		for _, c := range g.updateCols {
			if !slices.Contains(w.Update, c) && w.Guarded[c] == "" {
				out = append(out, fmt.Sprintf("table %s: onceplan_app may UPDATE column %s, which its entry in %s does not declare: declare it (Update) or revoke it (a column-level grant of the rest)", rel, c, where))
			}
		}
		for _, c := range append(slices.Clone(w.Update), keys(w.Guarded)...) {
			if !slices.Contains(g.columns, c) {
				out = append(out, fmt.Sprintf("table %s has no column %s, which its entry in %s names: remove it", rel, c, where))
			} else if !slices.Contains(g.updateCols, c) {
				out = append(out, fmt.Sprintf("table %s: its entry in %s declares UPDATE of %s, which onceplan_app may not do: remove it", rel, where, c))
			}
		}
	}
	for rel := range writes {
		if _, ok := grants[rel]; !ok {
			out = append(out, fmt.Sprintf("%s names table %s, which no longer exists: remove its entry", where, rel))
		}
	}

	rows, err := db.Query(ctx, `
		SELECT p.proname FROM pg_proc p
		WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef AND has_function_privilege($1, p.oid, 'EXECUTE')`, migrations.AppRole)
	if err != nil {
		return nil, err
	}
	definers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, f := range definers {
		if _, ok := funcs[f]; !ok {
			out = append(out, fmt.Sprintf("function %s runs with its owner's rights and onceplan_app may execute it, and migrations/catalog_test.go (appFunctions) has no entry for it: declare what it writes (and try what it refuses), or revoke EXECUTE", f))
		}
	}
	for f := range funcs {
		if !slices.Contains(definers, f) {
			out = append(out, fmt.Sprintf("migrations/catalog_test.go (appFunctions) names function %s, which onceplan_app may no longer execute with its owner's rights: remove its entry", f))
		}
	}
	slices.Sort(out)
	return out, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAppRoleWriteCatalog: every table onceplan_app may write has its
// entry in appWrites, every grant is declared and every entry is current;
// and a table added without an entry is named, as are an entry for a
// table that went and a SECURITY DEFINER function without an entry.
func TestAppRoleWriteCatalog(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	admin := pgtest.NewPool(t, urls.Admin)
	problems, err := catalogProblems(t.Context(), admin, appWrites, appFunctions)
	require.NoError(t, err)
	require.Empty(t, problems, "the application role's writes against their catalog:\n%s", strings.Join(problems, "\n"))

	t.Run("a new table without its entry", func(t *testing.T) {
		t.Parallel()
		urls := pgtest.Database(t)
		owner, admin := pgtest.NewPool(t, urls.Owner), pgtest.NewPool(t, urls.Admin)
		// As the next feature's migration would: the owner's default
		// privileges give onceplan_app SELECT and INSERT on it.
		_, err := owner.Exec(t.Context(), `CREATE TABLE next_feature (id bigint PRIMARY KEY, note text NOT NULL);
			GRANT UPDATE (note) ON next_feature TO `+migrations.AppRole+`;
			CREATE FUNCTION next_feature_reset() RETURNS void LANGUAGE sql SECURITY DEFINER AS 'DELETE FROM next_feature'`)
		require.NoError(t, err)
		writes := maps(appWrites)
		writes["gone_feature"] = appWrite{Insert: "a table a later migration dropped"}
		cp := writes["campaign"]
		cp.Update = append(slices.Clone(cp.Update), "name", "colour")
		writes["campaign"] = cp
		problems, err := catalogProblems(t.Context(), admin, writes, appFunctions)
		require.NoError(t, err)
		t.Logf("the catalog's problems:\n%s", strings.Join(problems, "\n"))
		require.Equal(t, []string{
			"function next_feature_reset runs with its owner's rights and onceplan_app may execute it, and migrations/catalog_test.go (appFunctions) has no entry for it: declare what it writes (and try what it refuses), or revoke EXECUTE",
			"migrations/catalog_test.go (appWrites) names table gone_feature, which no longer exists: remove its entry",
			"table campaign has no column colour, which its entry in migrations/catalog_test.go (appWrites) names: remove it",
			"table campaign: its entry in migrations/catalog_test.go (appWrites) declares UPDATE of name, which onceplan_app may not do: remove it",
			"table next_feature: onceplan_app may INSERT, UPDATE (note), and migrations/catalog_test.go (appWrites) has no entry for it: declare the writes the server does (and try the illegal ones in Refused), or revoke the rest in a migration",
		}, problems)
	})
}

func maps(m map[string]appWrite) map[string]appWrite {
	out := make(map[string]appWrite, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// attempt is one write tried as onceplan_app, and the refusals accepted.
type attempt struct {
	table, what string
	sql         []string
	codes       []string
}

// undeclaredWrites lists, for every table of the schema, each write no
// entry of appWrites declares — an INSERT copying a real row, an UPDATE of
// each column not declared, a DELETE and a TRUNCATE of real rows — which
// the privileges refuse (42501) before any trigger runs.
func undeclaredWrites(grants map[string]*granted) []attempt {
	var out []attempt
	for _, rel := range keys(grants) {
		g := grants[rel]
		if g.kind != "r" && g.kind != "p" {
			continue // plan_target, a view: no grant but SELECT (TestAppRolePrivileges)
		}
		w := appWrites[rel]
		one := `WHERE ctid = (SELECT ctid FROM ` + rel + ` LIMIT 1)`
		if w.Insert == "" {
			var cols []string
			for _, c := range g.columns {
				if !g.generated[c] && !g.identityAlways[c] {
					cols = append(cols, pgx.Identifier{c}.Sanitize())
				}
			}
			list := strings.Join(cols, ", ")
			out = append(out, attempt{rel, "INSERT", []string{`INSERT INTO ` + rel + ` (` + list + `) SELECT ` + list + ` FROM ` + rel + ` LIMIT 1`}, privilege})
		}
		for _, c := range g.columns {
			if slices.Contains(w.Update, c) || w.Guarded[c] != "" {
				continue
			}
			value := pgx.Identifier{c}.Sanitize()
			if g.generated[c] || g.identityAlways[c] {
				value = "DEFAULT"
			}
			out = append(out, attempt{rel, "UPDATE of " + c, []string{`UPDATE ` + rel + ` SET ` + pgx.Identifier{c}.Sanitize() + ` = ` + value + ` ` + one}, privilege})
		}
		if w.Delete == "" {
			out = append(out, attempt{rel, "DELETE", []string{`DELETE FROM ` + rel + ` ` + one}, privilege})
		}
		out = append(out, attempt{rel, "TRUNCATE", []string{`TRUNCATE ` + rel + ` CASCADE`}, privilege})
	}
	return out
}

// TestAppRoleUndeclaredWritesRefused: on a database the server's own code
// wrote (catalogWorld), onceplan_app tries every write appWrites does not
// declare and every illegal variant of those it does, and the archive's
// refusals, at every isolation level: PostgreSQL refuses each with the
// code its rule raises, and every table is as it was.
func TestAppRoleUndeclaredWritesRefused(t *testing.T) {
	t.Parallel()
	w := newCatalogWorld(t)
	ctx := w.ctx
	grants, err := appGrants(ctx, w.admin)
	require.NoError(t, err)

	// Every table the role may write holds rows the server wrote.
	for _, rel := range keys(grants) {
		if !grants[rel].writable() || emptyTables[rel] != "" {
			continue
		}
		var n int
		require.NoError(t, w.admin.QueryRow(ctx, `SELECT count(*) FROM `+rel).Scan(&n))
		require.NotZerof(t, n, "table %s: the catalog world (migrations/catalog_world_test.go) writes no row of it; make it write some the way the server does, so its rules are tried on real rows", rel)
	}

	attempts := undeclaredWrites(grants)
	for _, rel := range keys(appWrites) {
		for _, r := range appWrites[rel].Refused {
			attempts = append(attempts, attempt{rel, r.what, r.sql, r.codes})
		}
	}
	for _, f := range keys(appFunctions) {
		for _, r := range appFunctions[f].Refused {
			attempts = append(attempts, attempt{f + "()", r.what, r.sql, r.codes})
		}
	}

	before := everyRow(t, w)
	for _, a := range attempts {
		for _, iso := range isolationLevels {
			err := pgx.BeginTxFunc(ctx, w.app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				for _, s := range a.sql {
					if _, err := tx.Exec(ctx, s); err != nil {
						return err
					}
				}
				return nil
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Errorf("%s, %s, at %s: accepted (%v): %s", a.table, a.what, iso, err, strings.Join(a.sql, "; "))
				continue
			}
			if !slices.Contains(a.codes, pgErr.Code) {
				t.Errorf("%s, %s, at %s: refused with %s (%s), want %s: %s", a.table, a.what, iso, pgErr.Code, pgErr.Message,
					strings.Join(a.codes, " or "), strings.Join(a.sql, "; "))
			}
		}
	}
	t.Logf("%d writes tried at each of %d isolation levels", len(attempts), len(isolationLevels))
	after := everyRow(t, w)
	for _, rel := range keys(before) {
		if before[rel] != after[rel] {
			t.Errorf("table %s changed: a write above was accepted and committed", rel)
		}
	}
}

// everyRow is every row of every table of the schema, as text.
func everyRow(t *testing.T, w *catalogWorld) map[string]string {
	t.Helper()
	rows, err := w.admin.Query(w.ctx, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p') ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]string{}
	for _, rel := range tables {
		var s string
		require.NoError(t, w.admin.QueryRow(w.ctx, fmt.Sprintf(`SELECT coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '') FROM %s x`,
			pgx.Identifier{rel}.Sanitize())).Scan(&s), rel)
		out[rel] = s
	}
	return out
}
