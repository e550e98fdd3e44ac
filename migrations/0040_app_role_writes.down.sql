DROP TRIGGER api_token_revoked_final ON api_token;
DROP FUNCTION api_token_revoked_final();

REVOKE INSERT (id, name, provider, tool, scheduled_at, start_on_approval, required_approvals, created_by, created_by_agent, list_unsubscribe)
    ON campaign FROM onceplan_app;
GRANT INSERT ON campaign TO onceplan_app;

REVOKE UPDATE (seen_at, providers) ON worker_process FROM onceplan_app;
GRANT UPDATE ON worker_process TO onceplan_app;
REVOKE UPDATE (enabled, updated_at) ON notification_preference FROM onceplan_app;
GRANT UPDATE ON notification_preference TO onceplan_app;
REVOKE UPDATE (last_seen_at) ON session FROM onceplan_app;
GRANT UPDATE ON session TO onceplan_app;
REVOKE UPDATE (last_used_at, revoked_at) ON api_token FROM onceplan_app;
GRANT UPDATE ON api_token TO onceplan_app;
REVOKE UPDATE (roles, password_hash, disabled_at) ON app_user FROM onceplan_app;
GRANT UPDATE ON app_user TO onceplan_app;
