-- The command line administers too: `onceplan user …` and `onceplan token
-- …`, run by whoever can reach the database, add users, change roles,
-- disable, set passwords and make tokens. Those actions belong in the same
-- append-only trail as the web's. An entry made there has no signed-in
-- user: it names the operating-system account and host instead
-- (actor_cli), and exactly one of the two says who acted. Setting a
-- password (only the command line can) is recorded too.
ALTER TABLE admin_event
    ALTER COLUMN actor_id DROP NOT NULL,
    ADD COLUMN actor_cli text CHECK (btrim(actor_cli) <> ''),
    ADD CONSTRAINT admin_event_one_actor CHECK ((actor_id IS NULL) <> (actor_cli IS NULL)),
    DROP CONSTRAINT admin_event_action_check,
    ADD CONSTRAINT admin_event_action_check CHECK (action IN ('user_add', 'user_roles', 'user_disable', 'user_enable',
                                                              'user_password', 'token_create', 'token_revoke'));
