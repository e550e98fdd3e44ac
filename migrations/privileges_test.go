package migrations_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// requireRefused runs sql as the pool's role in a transaction that is
// rolled back, and requires PostgreSQL to refuse it for lack of privilege
// (SQLSTATE 42501), not a trigger (OP00x) nor anything else: the privilege
// wall stands on its own, before any trigger could run.
func requireRefused(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, err = tx.Exec(ctx, sql)
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s: want a permission error, got %v", sql, err)
	require.Equalf(t, "42501", pgErr.Code, "%s: want insufficient_privilege, got %s", sql, pgErr.Message)
}

// TestAppRoleRefused connects as the application role and tries what it
// cannot do (docs/ARCHITECTURE.md, "Two roles"): change the schema, update a
// frozen table, delete a ledger row.
func TestAppRoleRefused(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	app := pgtest.NewPool(t, urls.App)
	admin := pgtest.NewPool(t, urls.Admin)
	// A frozen plan and a settled effect, so that each statement has rows
	// to hit (the privilege check does not need them, but a reader might
	// wonder).
	seed(t, admin)

	var role string
	require.NoError(t, app.QueryRow(t.Context(), `SELECT current_user`).Scan(&role))
	require.Equal(t, migrations.AppRole, role)

	for _, sql := range []string{
		// The schema.
		`ALTER TABLE effect ADD COLUMN sneaky text`,
		`ALTER TABLE effect DISABLE TRIGGER effect_no_delete`,
		`ALTER TABLE plan DISABLE TRIGGER USER`,
		`DROP TABLE effect`,
		`DROP TABLE campaign_event`,
		`DROP TRIGGER plan_write_once ON plan`,
		`DROP INDEX effect_one_blocking`,
		`DROP TABLE river_job`,
		`ALTER TABLE river_job ADD COLUMN sneaky text`,
		`CREATE TABLE sneaky (a int)`,
		`CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`CREATE SCHEMA sneaky`,
		`CREATE OR REPLACE FUNCTION onceplan_refuse_change() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'`,
		`SET ROLE ` + migrations.OwnerRole,
		// The ledger: no row is ever deleted, no attempt's identity changed.
		`DELETE FROM effect`,
		`DELETE FROM effect_response`,
		`DELETE FROM effect_bump`,
		`DELETE FROM bump_policy`,
		`TRUNCATE effect`,
		`TRUNCATE effect_response`,
		`TRUNCATE effect, effect_response, effect_bump, bump_policy CASCADE`,
		`UPDATE effect SET key = key, epoch = epoch`,
		`UPDATE effect SET owner = 'someone else'`,
		`UPDATE effect SET plan_id = NULL, ordinal = NULL`,
		`UPDATE effect_response SET body = 'forged'`,
		// Frozen: plan, targets, approvals, runs, the audit trail.
		`UPDATE plan SET subject = 'changed after approval'`,
		`UPDATE target SET vars = '{"name": "changed"}'`,
		`UPDATE target_list SET digest = repeat('0', 64)`,
		`DELETE FROM target`,
		`INSERT INTO target (list_id, list_xact, ordinal, target, key, line)
		 SELECT id, created_xact, 2, 'mallory@example.com', key, 3 FROM target_list, target`,
		`INSERT INTO target_list (created_xact, campaign_id, target_count, digest, created_by)
		 SELECT '1', campaign_id, 1, digest, created_by FROM target_list`,
		`UPDATE submission SET proposed_by = proposed_by`,
		`DELETE FROM submission`,
		`UPDATE draft SET proposed_by = proposed_by`,
		`UPDATE campaign SET required_approvals = 1`,
		`UPDATE campaign SET provider = 'other'`,
		`UPDATE campaign SET created_by = created_by`,
		`INSERT INTO bump_policy (name, description, registered_by) VALUES ('sneaky', 'the server registers its own', 'server')`,
		`UPDATE approval SET plan_hash = repeat('0', 64)`,
		`UPDATE run SET job_count = 0`,
		`UPDATE campaign_event SET reason = 'rewritten'`,
		`UPDATE notification SET body = 'rewritten'`,
		`DELETE FROM notification_attempt`,
		`DELETE FROM plan`,
		`DELETE FROM approval`,
		`DELETE FROM run`,
		`DELETE FROM campaign_event`,
		`DELETE FROM campaign`,
		`TRUNCATE plan`,
		`TRUNCATE target`,
		`TRUNCATE campaign_event`,
		// A webhook token's binding to its content never changes.
		`UPDATE inbound_token SET digest = repeat('0', 64)`,
		`TRUNCATE inbound_token`,
		// The schema version is the migrations' to write.
		`UPDATE onceplan_migration SET version = version`,
		`DELETE FROM onceplan_migration`,
		`INSERT INTO onceplan_migration (version, name) VALUES (999, 'sneaky')`,
	} {
		requireRefused(t, app, sql)
	}
}

// seed writes, as the superuser, a frozen plan with one target and one
// done effect for it.
func seed(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	key := newKey(t)
	err := pgx.BeginFunc(t.Context(), admin, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`INSERT INTO app_user (email, roles) VALUES ('seed@example.com', '{proposer}'), ('approver@example.com', '{approver}')`,
			`INSERT INTO campaign (name, provider, created_by) SELECT 'seed', 'outbox', id FROM app_user WHERE email = 'seed@example.com'`,
			`INSERT INTO target_list (campaign_id, target_count, digest, created_by)
			 SELECT c.id, 1, repeat('a', 64), c.created_by FROM campaign c`,
			`INSERT INTO target (list_id, ordinal, target, key, line) SELECT id, 1, 'ann@example.com', @key, 2 FROM target_list`,
			`INSERT INTO draft (campaign_id, version, list_id, proposed_by, last_edited_by)
			 SELECT campaign_id, 1, id, created_by, created_by FROM target_list`,
			// Submitted and approved by someone else, as a plan must be.
			`UPDATE campaign SET state = 'pending_approval'`,
			`INSERT INTO submission (campaign_id, version, plan_hash) SELECT id, 1, repeat('b', 64) FROM campaign`,
			`INSERT INTO approval (campaign_id, version, plan_hash, approver_id)
			 SELECT c.id, 1, repeat('b', 64), u.id FROM campaign c, app_user u WHERE u.email = 'approver@example.com'`,
			`INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
			                   list_id, target_count, plan_hash, proposed_by)
			 SELECT campaign_id, 1, 'outbox', 'email.send', 'a@example.com', 's', 't', '', id, 1, repeat('b', 64), created_by FROM target_list`,
			`UPDATE campaign SET plan_id = (SELECT id FROM plan), state = 'approved'`,
			`INSERT INTO campaign_event (campaign_id, action, reason) SELECT id, 'create', 'seed' FROM campaign`,
			// Started: an attempt at a plan's target starts only then.
			`INSERT INTO run (campaign_id, plan_id, job_count) SELECT campaign_id, id, 1 FROM plan`,
			`UPDATE campaign SET state = 'running'`,
			`INSERT INTO effect (key, owner, plan_id, ordinal) SELECT @key, 'seed', id, 1 FROM plan`,
			`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', 'ok' FROM effect`,
			`UPDATE effect SET state = 'done', receipt = 'r1'`,
		} {
			if _, err := tx.Exec(t.Context(), sql, pgx.NamedArgs{"key": string(key)}); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func newKey(t *testing.T) ledger.Key {
	t.Helper()
	k, err := ledger.NewKey(ledger.KeyInput{Event: "privileges-" + rand.Text(), Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "ann@example.com"}})
	require.NoError(t, err)
	return k
}

// TestAppRoleLedgerWork walks an effect through every ledger write the
// running system makes, as the application role. (The rest of the normal
// work is every test that hands pgtest.URL to a server or worker: the crash
// suite, the agent test; and the end-to-end tests of cmd/onceplan, which run
// on the embedded default, where the server connects as this role.)
func TestAppRoleLedgerWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)

	// Policies are registered by the owner (onceplan policy add), and used
	// by the application.
	require.NoError(t, ledger.NewStore(pgtest.NewPool(t, urls.Owner)).RegisterPolicy(ctx, "monthly", "a new invoice every month", "test"))
	// An attempt outside any plan is a tool call's, claimed in the
	// transaction that records its attempt, after its intent (migration
	// 0037), as package toolcall does.
	app := pgtest.NewPool(t, urls.App)
	user := pgtest.User(t, app, pgtest.UserOpts{Email: "ann@example.com", Roles: []string{"proposer"}})
	_, err := app.Exec(ctx, `INSERT INTO tool_policy (tool, registered_by) VALUES ('invoice.send', 'agent:ann@example.com')`)
	require.NoError(t, err)
	claim := func(event, owner string) (ledger.Key, ledger.Claim) {
		key, identity, err := toolcall.KeyOf(user, ledger.KeyInput{Event: event, Tool: "invoice.send",
			Target: ledger.Target{Kind: ledger.TargetSubject, Value: "acct-1"}})
		require.NoError(t, err)
		var c ledger.Claim
		require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user)
				VALUES ($1, $2, 'invoice.send', $3, '{}', 'agent:ann@example.com', $4)`, string(key), string(identity), event, user); err != nil {
				return err
			}
			if c, err = ledger.NewStore(tx).Claim(ctx, ledger.ClaimParams{Key: key, Owner: owner}); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
				VALUES ($1, $2, 0, $3, now() + interval '1 minute')`, c.Effect.ID, string(key), owner)
			return err
		}))
		return key, c
	}

	store := ledger.NewStore(app)
	done, c := claim("invoice-1", "w1")
	require.Equal(t, ledger.ClaimWon, c.Outcome)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte("250 ok"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r1"})
	require.NoError(t, err)
	_, err = store.Revoke(ctx, ledger.RevokeParams{Key: done, Actor: "user:ann@example.com", Reason: "sent in error"})
	require.NoError(t, err)
	epoch, err := store.Bump(ctx, ledger.BumpParams{Key: done, ActorKind: ledger.ActorPolicy, Actor: "scheduler", Policy: "monthly", Reason: "December"})
	require.NoError(t, err)
	require.Equal(t, 1, epoch)

	unknown, c := claim("invoice-2", "w2")
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateUnknown, Reason: "worker died"})
	require.NoError(t, err)
	e, err := store.Resolve(ctx, ledger.ResolveParams{Key: unknown, Outcome: ledger.NotDelivered, Actor: "user:ann@example.com", Reason: "not in the relay's log"})
	require.NoError(t, err)
	require.Equal(t, ledger.StateFailed, e.State)
}

// TestAppRolePrivileges pins what the application role may do to every
// table, view and sequence in the schema: a migration (ours or River's)
// that adds one fails here until someone decides what the running system
// needs on it. The role owns nothing, is no member of the owner, may not
// create anything, and is an ordinary role.
func TestAppRolePrivileges(t *testing.T) {
	t.Parallel()
	admin := pgtest.Pool(t)
	ctx := t.Context()

	const (
		read      = "SELECT"
		append_   = "INSERT, SELECT"
		edit      = "INSERT, SELECT, UPDATE"
		queue     = "DELETE, INSERT, SELECT, UPDATE"
		clearable = "DELETE, INSERT, SELECT"
	)
	want := map[string]string{
		// The ledger (UPDATE of effect: the outcome columns only, below).
		// Bump policies are the owner's to register (onceplan policy add).
		// A batch call and its attempts: some columns only, below.
		"effect": append_, "effect_response": append_, "effect_batch": read, "effect_batch_member": read, "effect_batch_response": append_, "effect_bump": append_, "bump_policy": read,
		// The archive: written only by archive_campaign(), as the owner.
		"effect_archive": read, "effect_response_archive": read, "effect_batch_archive": read, "effect_batch_member_archive": read,
		"effect_batch_response_archive": read, "effect_bump_archive": read, "campaign_archive": read,
		// Frozen.
		"plan": append_, "approval": append_, "run": append_, "campaign_event": append_, "plan_target": read,
		// A test send's messages, recorded before they are sent: write-once.
		"test_send_message": append_,
		"admin_event":       append_, "submission": append_,
		// The unsubscribe links' secret: made once, on first use.
		"unsubscribe_secret": append_,
		// Provider events (bounces, complaints): write-once. The one-time
		// tokens of their signatures: cleared once past their freshness.
		"inbound_event": append_, "inbound_token": clearable,
		// The suppression list and its removals, and the claim's record of
		// a suppressed target: write-once.
		"suppression": append_, "suppression_removal": append_, "target_suppressed": append_,
		// Notifications and each try to deliver them: write-once. A
		// user's choice of events is a setting they change.
		"notification": append_, "notification_attempt": append_, "notification_attention": append_,
		"notification_preference": append_,
		// Single effects (migration 0021): write-once, but a tool's policy
		// (some columns only, below: the first-use default) and an
		// attempt's lease (UPDATE of some columns, below).
		"tool_policy": read, "tool_call": append_, "tool_approval_request": append_, "tool_approval": append_,
		"tool_attempt": append_, "tool_call_event": append_,
		// The keys of the calls begun before single effects had a key
		// space of their own (migration 0026): a closed set.
		"tool_call_legacy_key": read,
		// The providers' shared pacing: written only by
		// provider_pace_take(), as the owner.
		"provider_pace": read,
		// A list is inserted (some columns only, below) and deleted whole;
		// its targets are inserted (some columns only) and never deleted.
		"target_list": "DELETE, SELECT", "target": read,
		// Editable, some columns only (below); a campaign is inserted
		// with some columns only.
		"app_user": append_, "campaign": read, "draft": append_, "api_token": append_, "api_idempotency": append_,
		"session": clearable, "worker_process": clearable, "login_attempt": clearable,
		"onceplan_migration": read,
		// River's queue.
		"river_job": queue, "river_leader": queue, "river_queue": queue,
		"river_notification": queue, "river_migration": read,
	}
	rows, err := admin.Query(ctx, `
		SELECT c.relname,
		       coalesce((SELECT string_agg(p, ', ' ORDER BY p) FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
		                 WHERE has_table_privilege($1, c.oid, p)), '')
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		ORDER BY 1`, migrations.AppRole)
	require.NoError(t, err)
	got := map[string]string{}
	for rows.Next() {
		var name, privs string
		require.NoError(t, rows.Scan(&name, &privs))
		got[name] = privs
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got, "the application role's privileges per table")

	// Column by column where the table's privilege is not whole.
	columns := func(table, privilege string) []string {
		var cols []string
		require.NoError(t, admin.QueryRow(ctx, `
			SELECT coalesce(array_agg(attname::text ORDER BY attname), '{}') FROM pg_attribute
			WHERE attrelid = $2::regclass AND attnum > 0 AND NOT attisdropped
			  AND has_column_privilege($1, $2::regclass, attnum, $3)`, migrations.AppRole, table, privilege).Scan(&cols))
		return cols
	}
	// Of an attempt, only the outcome may be written.
	require.Equal(t, []string{"failure", "reason", "receipt", "resolution", "resolved_by", "revoke_reason", "revoked_by", "state"}, columns("effect", "UPDATE"))
	// Of a campaign, its state, version and plan; of a draft, its content,
	// list and last editor — never who proposed it.
	require.Equal(t, []string{"plan_id", "state", "version"}, columns("campaign", "UPDATE"))
	require.Equal(t, []string{"created_by", "created_by_agent", "id", "list_unsubscribe", "name", "provider", "required_approvals", "scheduled_at",
		"start_on_approval", "tool"}, columns("campaign", "INSERT"), "a campaign starts a draft at version 1 with no plan")
	// Of a user, their roles, password and whether they are disabled; of
	// a token, its last use and revocation; of a session, its last use; of
	// a preference, whether it is on; of a worker, its heartbeat.
	require.Equal(t, []string{"disabled_at", "password_hash", "roles"}, columns("app_user", "UPDATE"))
	require.Equal(t, []string{"last_used_at", "revoked_at"}, columns("api_token", "UPDATE"))
	require.Equal(t, []string{"last_seen_at"}, columns("session", "UPDATE"))
	require.Equal(t, []string{"enabled", "updated_at"}, columns("notification_preference", "UPDATE"))
	require.Equal(t, []string{"providers", "seen_at"}, columns("worker_process", "UPDATE"))
	require.Equal(t, []string{"from_addr", "html_body", "last_edited_by", "list_id", "subject", "text_body", "updated_at"}, columns("draft", "UPDATE"))
	// A list's rows and its own row take their transaction's id: the
	// application cannot name another's (migration 0014).
	require.Equal(t, []string{"key", "line", "list_id", "ordinal", "target", "vars"}, columns("target", "INSERT"))
	require.Equal(t, []string{"campaign_id", "created_by", "digest", "id", "target_count"}, columns("target_list", "INSERT"))
	// So do a batch call's and its attempts' rows (migration 0036).
	require.Equal(t, []string{"call_key", "plan_id", "provider", "request", "size"}, columns("effect_batch", "INSERT"))
	require.Equal(t, []string{"batch_id", "effect_id", "position"}, columns("effect_batch_member", "INSERT"))
	// A tool's policy: only its first use, whose every other column is the
	// default (no recovery, no approval); an attempt: only its lease.
	require.Equal(t, []string{"registered_by", "tool"}, columns("tool_policy", "INSERT"))
	require.Equal(t, []string{"holder", "lease_id", "lease_until", "takeovers"}, columns("tool_attempt", "UPDATE"))

	// Sequences: USAGE (nextval) only; setval needs UPDATE.
	rows, err = admin.Query(ctx, `
		SELECT c.relname, has_sequence_privilege($1, c.oid, 'USAGE'), has_sequence_privilege($1, c.oid, 'UPDATE')
		FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'S'`, migrations.AppRole)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var usage, update bool
		require.NoError(t, rows.Scan(&name, &usage, &update))
		require.Truef(t, usage, "USAGE on sequence %s", name)
		require.Falsef(t, update, "UPDATE on sequence %s", name)
	}
	require.NoError(t, rows.Err())

	var owns int
	var super, createRole, createDB, bypassRLS, memberOfOwner, createInSchema bool
	require.NoError(t, admin.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid) + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid)
		       + (SELECT count(*) FROM pg_type WHERE typowner = r.oid) + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid),
		       r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolbypassrls,
		       pg_has_role(r.oid, $2, 'USAGE'), has_schema_privilege(r.oid, current_schema(), 'CREATE')
		FROM pg_roles r WHERE r.rolname = $1`, migrations.AppRole, migrations.OwnerRole).
		Scan(&owns, &super, &createRole, &createDB, &bypassRLS, &memberOfOwner, &createInSchema))
	require.Zero(t, owns, "the application role owns nothing")
	require.False(t, super || createRole || createDB || bypassRLS, "the application role is an ordinary role")
	require.False(t, memberOfOwner, "the application role is not the owner")
	require.False(t, createInSchema, "the application role cannot create in the schema")

	// Everything in the schema belongs to the owner.
	var strays []string
	require.NoError(t, admin.QueryRow(ctx, `
		SELECT coalesce(array_agg(relname::text ORDER BY relname), '{}') FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relowner <> $1::regrole`, migrations.OwnerRole).Scan(&strays))
	require.Empty(t, strays, "objects not owned by %s", migrations.OwnerRole)
}

// TestMigrateAsAppRoleRefused: `onceplan migrate` given the application
// role's URL says which role it needs instead of failing half-way.
func TestMigrateAsAppRoleRefused(t *testing.T) {
	t.Parallel()
	_, err := migrations.Up(t.Context(), pgtest.AppPool(t))
	require.ErrorContains(t, err, "database role "+migrations.AppRole+" may not create tables")
}

// TestPrivilegesDownUp: 0008's down file takes the grants back, and the up
// file, run again by the owner, restores them; River's tables are granted
// again whenever migrations run.
func TestPrivilegesDownUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)
	owner := pgtest.NewPool(t, urls.Owner)
	app := pgtest.NewPool(t, urls.App)
	canInsert := func(table string) bool {
		var ok bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT has_table_privilege($1, $2, 'INSERT')`, migrations.AppRole, table).Scan(&ok))
		return ok
	}

	reverted, err := migrations.DownTo(ctx, owner, 7)
	require.NoError(t, err)
	since8 := versionsFrom(8)
	down := slices.Clone(since8)
	slices.Reverse(down)
	require.Equal(t, down, reverted)
	require.False(t, canInsert("effect"))
	require.False(t, canInsert("river_job"))
	requireRefused(t, app, `SELECT count(*) FROM effect`)

	res, err := migrations.Up(ctx, owner)
	require.NoError(t, err)
	require.Equal(t, since8, res.Applied)
	require.True(t, canInsert("effect"))

	_, err = owner.Exec(ctx, `REVOKE INSERT ON river_job FROM `+migrations.AppRole)
	require.NoError(t, err)
	res, err = migrations.Up(ctx, owner)
	require.NoError(t, err)
	require.Empty(t, res.Applied)
	require.True(t, canInsert("river_job"), "migrations.Up grants River's tables on every run")

	var n int
	require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM effect`).Scan(&n))
	require.Zero(t, n)
}

// versionsFrom lists the migration versions from v to the latest, in order.
func versionsFrom(v int) []int {
	var out []int
	for ; v <= migrations.Latest(); v++ {
		out = append(out, v)
	}
	return out
}
