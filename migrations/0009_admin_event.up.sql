-- The audit trail of administration (every state-changing action is
-- audited): who added a user, changed roles, disabled or enabled someone,
-- created or revoked a token, and when. Append-only, like campaign_event.
CREATE TABLE admin_event (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor_id   bigint NOT NULL REFERENCES app_user (id),
    action     text NOT NULL CHECK (action IN ('user_add', 'user_roles', 'user_disable', 'user_enable',
                                               'token_create', 'token_revoke')),
    subject    text NOT NULL CHECK (btrim(subject) <> ''),
    detail     jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX admin_event_recent ON admin_event (id DESC);

CREATE TRIGGER admin_event_created_at BEFORE INSERT ON admin_event
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER admin_event_write_once BEFORE UPDATE OR DELETE ON admin_event
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER admin_event_no_truncate BEFORE TRUNCATE ON admin_event
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

GRANT SELECT, INSERT ON admin_event TO onceplan_app;
