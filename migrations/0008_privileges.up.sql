-- Least privilege (docs/ARCHITECTURE.md, "Two roles"). The running system
-- (serve, worker, user, token, audit, mcp) connects as onceplan_app, a role
-- that owns nothing: PostgreSQL itself refuses it ALTER, DROP, CREATE and
-- TRUNCATE, any UPDATE of a frozen table, any DELETE of a ledger row, and
-- any change to an attempt's identity (key, epoch, owner, job, plan target).
-- The triggers of 0001 and 0002 stay in force behind this wall, against the
-- owner too; the two walls are independent.
--
-- Migrations run as the role that owns the schema (onceplan_owner on the
-- embedded default; docs/guide/secure.md, "Database roles"), and
-- everything here is granted by it. New tables made by later migrations
-- get SELECT and INSERT (the default privileges below); a migration whose
-- table the application must update or delete from grants that itself.
-- Every table's privileges are checked by migrations/privileges_test.go.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'onceplan_app') THEN
        IF NOT (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            RAISE EXCEPTION 'the application role onceplan_app does not exist, and % may not create it', current_user
                USING HINT = 'create it first, e.g. CREATE ROLE onceplan_app LOGIN PASSWORD ''...'' (see docs/guide/secure.md, "Database roles")';
        END IF;
        -- Without LOGIN: nobody can connect as it until an operator says how
        -- (ALTER ROLE onceplan_app LOGIN PASSWORD '...').
        BEGIN
            CREATE ROLE onceplan_app NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- made meanwhile by a migration of another database on this server
        END;
    END IF;
    IF (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'onceplan_app') THEN
        RAISE EXCEPTION 'onceplan_app is a superuser (or bypasses row security): the application role must be an ordinary role'
            USING HINT = 'ALTER ROLE onceplan_app NOSUPERUSER NOBYPASSRLS';
    END IF;
    IF pg_has_role('onceplan_app', current_user, 'USAGE') THEN
        RAISE EXCEPTION 'onceplan_app is % or a member of it, so it would own the schema: run the migrations as the owner role, and do not grant the owner role to onceplan_app', current_user
            USING HINT = 'see docs/guide/secure.md, "Database roles"';
    END IF;
END
$$;

-- PostgreSQL 15 already denies it; older servers let every role create
-- tables in public. (Refused with a warning when the migrating role does
-- not own the schema; the privileges test checks the outcome.)
DO $$
BEGIN
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
END
$$;

-- The ledger. Attempts are inserted and settled, never deleted; of an
-- attempt only the outcome columns may be written (the trigger also stamps
-- settled_at and updated_at, which needs no privilege). Raw responses,
-- bumps and bump policies are write-once.
GRANT SELECT, INSERT ON effect, effect_response, effect_bump, bump_policy TO onceplan_app;
GRANT UPDATE (state, receipt, reason, resolved_by, resolution, revoked_by, revoke_reason) ON effect TO onceplan_app;

-- Frozen: plans, approvals, runs and the audit trail are written once.
GRANT SELECT, INSERT ON plan, approval, run, campaign_event TO onceplan_app;
-- A target list is written once by an import; a draft's list that a newer
-- import replaced is deleted (the trigger refuses it for a plan's list).
GRANT SELECT, INSERT, DELETE ON target_list, target TO onceplan_app;
GRANT SELECT ON plan_target TO onceplan_app;

-- Editable state: users (roles, password, disabled), campaigns (state,
-- version, plan), drafts, API tokens (last use, revocation), and the
-- idempotency keys of the API.
GRANT SELECT, INSERT, UPDATE ON app_user, campaign, draft, api_token TO onceplan_app;
GRANT SELECT, INSERT ON api_idempotency TO onceplan_app;
-- Housekeeping: sessions end, worker processes sign off, old sign-in
-- attempts are cleared.
GRANT SELECT, INSERT, UPDATE, DELETE ON session, worker_process TO onceplan_app;
GRANT SELECT, INSERT, DELETE ON login_attempt TO onceplan_app;
-- serve checks the schema version; only migrations write it.
GRANT SELECT ON onceplan_migration TO onceplan_app;

-- River's tables are the job queue, not a record: its client inserts,
-- fetches, completes, rescues and cleans jobs, elects a leader and pauses
-- queues, so it needs all of SELECT, INSERT, UPDATE and DELETE on them (no
-- TRUNCATE, no DDL). Its migration table is read only. From PostgreSQL 17
-- on, MAINTAIN lets River's leader reindex its own tables' indexes (before,
-- REINDEX needs the owner, and River's nightly reindex logs a refusal). The
-- function runs again after every migration run (migrations.Up), so tables
-- a later River version adds are covered.
CREATE FUNCTION onceplan_grant_river() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    maintain text := CASE WHEN current_setting('server_version_num')::int >= 170000 THEN ', MAINTAIN' ELSE '' END;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, c.relname, c.relkind FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace
               AND c.relname LIKE 'river\_%' AND c.relkind IN ('r', 'p', 'S')
    LOOP
        IF r.relkind = 'S' THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE %s TO onceplan_app', r.rel);
        ELSIF r.relname = 'river_migration' THEN
            EXECUTE format('GRANT SELECT ON %s TO onceplan_app', r.rel);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE%s ON %s TO onceplan_app', maintain, r.rel);
        END IF;
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION onceplan_grant_river() FROM PUBLIC;
SELECT onceplan_grant_river();

-- Sequences: identity columns need no privilege, but River's serial ids
-- and the import's explicit nextval('target_list' id) do.
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO onceplan_app', current_schema());
    -- What later migrations (of this owner) create: read and append only.
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT ON TABLES TO onceplan_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE ON SEQUENCES TO onceplan_app', current_schema());
END
$$;

-- A grant by a role that does not own the table is a warning, not an
-- error: make it one, so a migration run as the wrong role stops here.
DO $$
BEGIN
    IF NOT has_table_privilege('onceplan_app', 'effect', 'INSERT') THEN
        RAISE EXCEPTION '% could not grant onceplan_app its privileges: run the migrations as the role that owns the schema', current_user
            USING HINT = 'see docs/guide/secure.md, "Database roles"';
    END IF;
END
$$;
