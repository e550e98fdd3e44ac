-- Single effects (package toolcall; docs/ARCHITECTURE.md, "Single agent
-- effects"): who began a call, and a person's evidence when they resolve
-- one.
--
-- Who may read a call. tool_call.created_by names the actor as text
-- ("agent:ann@example.com"); created_by_user is that user's id, so that
-- the API can show a call (its args among the rest) to the user it was
-- begun for, operators and admins, and nobody else, whatever becomes of
-- an email address. When set it names exactly the user created_by names
-- (a call cannot be filed under someone else), and like the whole row it
-- never changes. The calls begun before get it from created_by, where
-- that user exists; the others (NULL) are read by operators and admins.
--
-- A person's evidence. Resolving a call whose outcome is unknown, a
-- person may give the raw evidence they found (an exported log line, a
-- screenshot's text): it is an effect_response of kind 'person', beside
-- the outside system's answers ('send', 'resend') and the probe's
-- ('probe'), and is what a replay then returns as raw. The application
-- role may write one only in the transaction in which a person (a
-- "user:" resolver, never recovery or a dedupe re-send) resolved a tool
-- call's attempt, at most one per attempt, and, like every response,
-- never change it. The receipt a person gives with "delivered" is the
-- effect's receipt, which never changes once written (effect_update).
--
-- SQLSTATE: OP001 an outcome's record written after the fact or changed.

ALTER TABLE tool_call ADD COLUMN created_by_user bigint REFERENCES app_user (id);

-- The backfill rewrites rows the write-once rule and migration 0026's
-- key-space check (NOT VALID: it spares the calls begun before it) would
-- refuse; both are back, as they were, before this transaction commits.
ALTER TABLE tool_call DISABLE TRIGGER tool_call_write_once;
ALTER TABLE tool_call DROP CONSTRAINT tool_call_single_space;
UPDATE tool_call c SET created_by_user = u.id
FROM app_user u WHERE c.created_by IN ('agent:' || u.email, 'user:' || u.email);
ALTER TABLE tool_call ADD CONSTRAINT tool_call_single_space CHECK (tool_identity_single(identity)) NOT VALID;
ALTER TABLE tool_call ENABLE TRIGGER tool_call_write_once;

CREATE FUNCTION tool_call_creator() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_by_user IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM app_user u WHERE u.id = NEW.created_by_user
          AND NEW.created_by IN ('agent:' || u.email, 'user:' || u.email)) THEN
        RAISE EXCEPTION 'tool call % refused: created_by_user % is not the user created_by names (%)',
            NEW.key, NEW.created_by_user, NEW.created_by
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER tool_call_creator BEFORE INSERT ON tool_call
    FOR EACH ROW EXECUTE FUNCTION tool_call_creator();

ALTER TABLE effect_response DROP CONSTRAINT effect_response_kind_check;
ALTER TABLE effect_response ADD CONSTRAINT effect_response_kind_check
    CHECK (kind IN ('send', 'resend', 'probe', 'person'));

-- One person's evidence per attempt.
CREATE UNIQUE INDEX effect_response_person ON effect_response (effect_id) WHERE kind = 'person';

CREATE FUNCTION effect_response_person() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The effect's row version was written by this transaction (its
    -- resolution), and is a tool call's attempt resolved by a person.
    IF NOT EXISTS (
        SELECT 1 FROM effect e JOIN tool_attempt a ON a.effect_id = e.id
        WHERE e.id = NEW.effect_id
          AND e.resolved_by LIKE 'user:%' AND e.resolution IS NOT NULL
          AND e.state IN ('done', 'failed')
          AND e.xmin = pg_current_xact_id()::xid) THEN
        RAISE EXCEPTION 'effect %: a person''s evidence is recorded only with their resolution of a tool call, in its transaction', NEW.effect_id
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER effect_response_person BEFORE INSERT ON effect_response
    FOR EACH ROW WHEN (NEW.kind = 'person') EXECUTE FUNCTION effect_response_person();
