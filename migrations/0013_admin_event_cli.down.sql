-- Refused (by the NOT NULL or the action check) once the command line has
-- recorded an action: the trail is write-once, and going down would have
-- to drop those entries.
ALTER TABLE admin_event
    DROP CONSTRAINT admin_event_action_check,
    ADD CONSTRAINT admin_event_action_check CHECK (action IN ('user_add', 'user_roles', 'user_disable', 'user_enable',
                                                              'token_create', 'token_revoke')),
    DROP CONSTRAINT admin_event_one_actor,
    DROP COLUMN actor_cli,
    ALTER COLUMN actor_id SET NOT NULL;
