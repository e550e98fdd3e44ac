-- What the server never writes, PostgreSQL refuses to its role
-- (docs/ARCHITECTURE.md, "The guarantee against the server's own role"),
-- table by table as migrations/catalog_test.go (appWrites) declares it.

-- 1. Of a user, the server changes only the roles, the password and
-- whether the account is disabled: never who it is (email, name, id).
-- Of a token, when it was last used and its revocation: never whose it
-- is, whether it is an agent's, or its secret. Of a session, when it was
-- last seen: never whose it is or when it ends. Of a notification
-- preference, whether it is on. Of a worker's heartbeat row, when it was
-- seen and the providers it serves: never whose it is.
REVOKE UPDATE ON app_user FROM onceplan_app;
GRANT UPDATE (roles, password_hash, disabled_at) ON app_user TO onceplan_app;
REVOKE UPDATE ON api_token FROM onceplan_app;
GRANT UPDATE (last_used_at, revoked_at) ON api_token TO onceplan_app;
REVOKE UPDATE ON session FROM onceplan_app;
GRANT UPDATE (last_seen_at) ON session TO onceplan_app;
REVOKE UPDATE ON notification_preference FROM onceplan_app;
GRANT UPDATE (enabled, updated_at) ON notification_preference TO onceplan_app;
REVOKE UPDATE ON worker_process FROM onceplan_app;
GRANT UPDATE (seen_at, providers) ON worker_process TO onceplan_app;

-- 2. A campaign is created a draft at version 1 with no plan: its state,
-- version and plan move only through campaign_update's transitions.
REVOKE INSERT ON campaign FROM onceplan_app;
GRANT INSERT (id, name, provider, tool, scheduled_at, start_on_approval, required_approvals, created_by, created_by_agent, list_unsubscribe)
    ON campaign TO onceplan_app;

-- 3. A revoked token stays revoked: revoking again changes nothing, and
-- nothing brings it back.
CREATE FUNCTION api_token_revoked_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'API token %: it was revoked at %, and a revoked token stays revoked', OLD.id, OLD.revoked_at
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER api_token_revoked_final BEFORE UPDATE OF revoked_at ON api_token
    FOR EACH ROW EXECUTE FUNCTION api_token_revoked_final();
