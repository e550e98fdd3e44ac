-- Back to migration 0021's rules: its tool_attempt_insert and
-- tool_attempt_update, whole.
DROP TRIGGER plan_no_legacy_tool_key ON plan;
DROP FUNCTION plan_no_legacy_tool_key();

CREATE OR REPLACE FUNCTION tool_attempt_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    e record;
    c record;
    p record;
BEGIN
    SELECT key, plan_id, state INTO e FROM effect WHERE id = NEW.effect_id;
    IF NOT FOUND OR e.key <> NEW.key OR e.plan_id IS NOT NULL OR e.state <> 'pending' THEN
        RAISE EXCEPTION 'tool attempt refused: effect % is not a new pending attempt outside any plan with key %', NEW.effect_id, NEW.key
            USING ERRCODE = 'OP007';
    END IF;
    SELECT tool, args_digest INTO c FROM tool_call WHERE key = NEW.key;
    -- The policy in force, whatever the statement said.
    NEW.policy_id := tool_policy_current(c.tool);
    IF NEW.policy_id IS NULL THEN
        RAISE EXCEPTION 'tool attempt refused: tool % is not registered', c.tool USING ERRCODE = 'OP007';
    END IF;
    SELECT approval_required INTO p FROM tool_policy WHERE id = NEW.policy_id;
    IF p.approval_required THEN
        NEW.approval_id := (
            SELECT a.request_id FROM tool_approval_request r JOIN tool_approval a ON a.request_id = r.id
            WHERE r.key = NEW.key AND r.args_digest = c.args_digest AND a.args_digest = c.args_digest
              AND a.decision = 'approved'
            ORDER BY a.request_id LIMIT 1);
        IF NEW.approval_id IS NULL THEN
            RAISE EXCEPTION 'tool attempt refused: tool % requires a person''s approval of exactly these args (digest %), and there is none', c.tool, c.args_digest
                USING ERRCODE = 'OP007';
        END IF;
    ELSE
        NEW.approval_id := NULL;
    END IF;
    NEW.takeovers := 0;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION tool_attempt_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st effect_state;
    recovery text;
BEGIN
    IF NEW.effect_id <> OLD.effect_id OR NEW.key <> OLD.key OR NEW.policy_id <> OLD.policy_id
       OR NEW.approval_id IS DISTINCT FROM OLD.approval_id OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'tool attempt %: its effect, key, policy, approval and creation time never change', OLD.effect_id
            USING ERRCODE = 'OP003';
    END IF;
    SELECT state INTO st FROM effect WHERE id = OLD.effect_id FOR SHARE;
    IF st NOT IN ('pending', 'unknown') THEN
        RAISE EXCEPTION 'tool attempt %: the effect is %, so its lease is over', OLD.effect_id, st
            USING ERRCODE = 'OP007';
    END IF;
    IF NEW.lease_id <> OLD.lease_id OR NEW.holder <> OLD.holder THEN
        SELECT p.recovery INTO recovery FROM tool_policy p WHERE p.id = OLD.policy_id;
        IF recovery <> 'dedupe' OR NOT (st = 'unknown' OR OLD.lease_until < now()) THEN
            RAISE EXCEPTION 'tool attempt %: its lease passes to another performer only when the tool deduplicates by key and the attempt is in doubt (lease expired or unknown)', OLD.effect_id
                USING ERRCODE = 'OP007';
        END IF;
        IF NEW.lease_id = OLD.lease_id OR NEW.takeovers <> OLD.takeovers + 1 THEN
            RAISE EXCEPTION 'tool attempt %: a takeover is a new lease and counts one more takeover', OLD.effect_id
                USING ERRCODE = 'OP007';
        END IF;
    ELSIF NEW.takeovers <> OLD.takeovers THEN
        RAISE EXCEPTION 'tool attempt %: takeovers count only with a new lease', OLD.effect_id
            USING ERRCODE = 'OP003';
    END IF;
    RETURN NEW;
END
$$;

DROP FUNCTION tool_key_of_a_plan(text);
DROP TRIGGER tool_policy_insert_lock ON tool_policy;
DROP FUNCTION tool_policy_insert_lock();
DROP FUNCTION tool_policy_lock_class();
DROP FUNCTION tool_first_call_at(bigint);
DROP FUNCTION tool_window_closed(interval, timestamptz, timestamptz);
ALTER TABLE tool_policy DROP COLUMN dedupe_window, DROP COLUMN probe_retention;
DROP TABLE tool_call_legacy_key;
DROP FUNCTION tool_call_legacy_key_closed();
ALTER TABLE tool_call DROP CONSTRAINT tool_call_single_space;
DROP FUNCTION tool_identity_single(text);
