-- Single effects (package toolcall; docs/ARCHITECTURE.md, "Single agent
-- effects"): a call is its user's own, and an effect outside any plan is
-- a tool call's.
--
-- A call's key space includes its user. Before this migration a call was
-- named by {event, tool, target, amount_minor, scope} alone, so another
-- user's agent beginning the same operation got the first user's call:
-- its receipt and raw answer, or, for a tool that requires approval, the
-- approval a person gave to the first user's request — and then performed
-- the call itself. Now a call's identity carries one more member,
-- "principal": the id of the user the call is begun for (an agent token's
-- user: a user's agents share their user's calls), and its key is the v1
-- key of that identity (tool_key_of, migration 0021). PostgreSQL holds
-- the rule where the row is written: a call's identity names the user it
-- is filed under (created_by_user, which migration 0028 binds to
-- created_by), an approval request's the user who asked for it, so
-- another user's identical operation is its own call with its own key,
-- and an approval approves one user's call (an attempt performs only an
-- approval its call's own user asked for). The calls begun before keep
-- their identities and keys (NOT VALID); a begin finds one only when it
-- is its own user's (package toolcall), and never one whose user is not
-- recorded.
--
-- An effect outside any plan is a tool call's attempt, and its call's
-- intent is written first. Migration 0021's effect_tool_attempt checks,
-- at commit, that an effect on a tool call's key has its attempt record;
-- an effect written on a call's key before the call's intent existed (a
-- key is a hash of the call's identity, so anyone can compute a future
-- one) escaped it, and then held the key: pending, the call's agent was
-- told "in flight" for ever; done, a forged receipt was replayed to it.
-- PostgreSQL cannot tell a key's space from the key, so the rule is on
-- every attempt outside any plan: the server writes none but a tool
-- call's, inside the transaction that wrote its intent or after it. The
-- intent is write-once (migration 0021: no update, no delete, no
-- truncate), so a snapshot that misses it can only refuse, at any
-- isolation level and in any order of statements. The schema's owner
-- may still write one (it may change the schema anyway).
--
-- SQLSTATE: OP007 not what the server writes.

-- Whether a call's identity names the user owner as its principal: the
-- member is a JSON number whose text is the user's id. False when either
-- is missing.
CREATE FUNCTION tool_identity_principal(identity text, owner bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_typeof(identity::jsonb -> 'principal') = 'number'
                    AND identity::jsonb ->> 'principal' = owner::text, false)
$$;

-- NOT VALID: the calls begun before keep their identities; every row
-- written from now on is checked.
ALTER TABLE tool_call ADD CONSTRAINT tool_call_principal
    CHECK (tool_identity_principal(identity, created_by_user)) NOT VALID;

-- An approval request is for a call of the user who asks: its identity
-- names them, or (a call begun before this migration, whose args need a
-- new approval) the call's recorded user is them.
CREATE FUNCTION tool_approval_request_principal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT tool_identity_principal(NEW.identity, NEW.requested_by_user)
       AND NOT EXISTS (SELECT 1 FROM tool_call c WHERE c.key = NEW.key AND c.created_by_user = NEW.requested_by_user) THEN
        RAISE EXCEPTION 'tool approval request refused: key % is not a call of user %, who asks for it: a call''s identity names its user (principal)',
            NEW.key, NEW.requested_by_user
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tool_approval_request_principal BEFORE INSERT ON tool_approval_request
    FOR EACH ROW EXECUTE FUNCTION tool_approval_request_principal();

-- Migration 0026's tool_attempt_insert, whole, and: the approval an
-- attempt performs was asked for by its call's own user.
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
    SELECT tool, args_digest, created_by_user INTO c FROM tool_call WHERE key = NEW.key;
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
              AND a.decision = 'approved' AND r.requested_by_user = c.created_by_user
            ORDER BY a.request_id LIMIT 1);
        IF NEW.approval_id IS NULL THEN
            RAISE EXCEPTION 'tool attempt refused: tool % requires a person''s approval of exactly these args (digest %), asked for by the call''s own user, and there is none', c.tool, c.args_digest
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

-- An attempt outside any plan has its tool call's intent already.
CREATE FUNCTION effect_single_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tool_call c WHERE c.key = NEW.key)
       AND NOT pg_has_role(current_user, 'onceplan_owner', 'USAGE') THEN
        RAISE EXCEPTION 'effect refused: an attempt outside any plan is a tool call''s, written after its intent, and key % has no tool call', NEW.key
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER effect_single_intent BEFORE INSERT ON effect
    FOR EACH ROW WHEN (NEW.plan_id IS NULL) EXECUTE FUNCTION effect_single_intent();
