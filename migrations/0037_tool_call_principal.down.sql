-- Back to migration 0026's rules: its tool_attempt_insert, whole; no
-- principal in a call's identity; effects outside any plan without a
-- tool call's intent.
DROP TRIGGER effect_single_intent ON effect;
DROP FUNCTION effect_single_intent();

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
    IF tool_key_of_a_plan(NEW.key) THEN
        RAISE EXCEPTION 'tool attempt refused: key % is a campaign target''s key (the call was begun before single effects had keys of their own): a single effect never holds it again', NEW.key
            USING ERRCODE = 'OP008';
    END IF;
    IF NOT (NEW.lease_until > now() AND NEW.lease_until <= now() + interval '1 hour') THEN
        RAISE EXCEPTION 'tool attempt refused: its lease must end after now and at most an hour from now, not at %', NEW.lease_until
            USING ERRCODE = 'OP007';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'tool attempt refused: this transaction is %, whose snapshot may predate the tool''s policy in force; attempts are recorded at READ COMMITTED', current_setting('transaction_isolation')
            USING ERRCODE = 'OP007';
    END IF;
    SELECT tool, args_digest INTO c FROM tool_call WHERE key = NEW.key;
    -- The policy in force when this commits, whatever the statement said:
    -- no registration of the tool commits before this transaction ends,
    -- and the read after the lock sees every one that committed before.
    PERFORM pg_advisory_xact_lock_shared(tool_policy_lock_class(), hashtext(c.tool));
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

DROP TRIGGER tool_approval_request_principal ON tool_approval_request;
DROP FUNCTION tool_approval_request_principal();
ALTER TABLE tool_call DROP CONSTRAINT tool_call_principal;
DROP FUNCTION tool_identity_principal(text, bigint);
