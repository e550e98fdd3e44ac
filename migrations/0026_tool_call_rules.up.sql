-- Single effects (package toolcall; docs/ARCHITECTURE.md, "Single agent
-- effects"): rules the application role could get around before.
--
-- A key space of their own. A campaign target's key is the v1 key of
-- {event: the campaign's id, tool, target, amount_minor, scope}; before
-- this migration a single effect's key was the v1 key of the same five
-- members, so any agent token could begin the call whose key is a
-- campaign target's and the campaign then never mailed that person. Now a
-- single effect's identity carries one more member, "space":"single",
-- which no campaign target's canonical JSON has (nor a notification's or
-- a test send's): tool_call refuses an identity without it, and as its
-- key is the v1 key of that identity (tool_call_key_of_identity), no
-- single effect written from now on can have a campaign target's key.
-- The calls begun before keep their keys (tool_call_legacy_key), so a
-- runtime retrying one across the upgrade finds it; none of them may
-- start or take over an attempt on a key a frozen plan's target has, and
-- no plan is frozen with a target whose key one of them holds.
--
-- The policy an attempt is recorded under is the one in force when it
-- commits, never an old snapshot's. Every registration of a tool (the
-- owner's, and a first use) takes an exclusive lock on the tool's name;
-- an attempt takes it shared and only then reads the policy, at READ
-- COMMITTED (each statement of the trigger sees what committed before
-- it). A transaction at REPEATABLE READ or SERIALIZABLE would read the
-- policy from its snapshot, which may predate a registration that
-- requires approval, so it may not record an attempt at all; the server
-- runs every session at READ COMMITTED.
--
-- A lease only runs forward. Its holder's heartbeat extends it (never
-- shortens it, never revives one that ended: that attempt is in doubt);
-- it ends by time; a takeover gives a new lease from now. Without this the
-- application role could move a live lease into the past and take the
-- call over while its holder still performed it: two performers of one
-- key. Every lease runs at most an hour from when it is given (the
-- longest lease a begin or heartbeat gives).
--
-- How long an outside system keeps what recovery relies on. A tool's
-- policy may say how long its outside system honours a key as an
-- idempotency key (dedupe_window: Stripe's and Resend's 24 hours) and
-- how long its probe can still be asked about an effect
-- (probe_retention), each from the first call with the key; NULL: for
-- ever. Past the dedupe window a takeover's second call could be a second
-- effect, so PostgreSQL refuses a takeover whose lease would end past it
-- (less a margin, as campaign providers keep: a tenth of the window, at
-- most a minute); recovery then leaves the call unknown for a person,
-- as it does past a probe's retention (package toolcall).
--
-- SQLSTATEs: OP007 not what was registered or approved, OP008 a campaign
-- target's key held outside its plan.

ALTER TABLE tool_policy
    ADD COLUMN dedupe_window interval CHECK (dedupe_window > '0'),
    ADD COLUMN probe_retention interval CHECK (probe_retention > '0'),
    ADD CONSTRAINT tool_policy_dedupe_window CHECK (dedupe_window IS NULL OR recovery = 'dedupe'),
    ADD CONSTRAINT tool_policy_probe_retention CHECK (probe_retention IS NULL OR recovery = 'probe');

-- Whether a window of length w (NULL: for ever), counted from since, is
-- closed at moment: the last margin of it (a tenth, at most a minute)
-- counts as closed, as provider.Capabilities' windows do.
CREATE FUNCTION tool_window_closed(w interval, since timestamptz, moment timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT w IS NOT NULL AND moment >= since + w - least(interval '1 minute', w / 10)
$$;

-- When the outside system may first have seen the key of attempt
-- attempt_id: the first attempt at its key's epoch.
CREATE FUNCTION tool_first_call_at(attempt_id bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min(f.created_at) FROM effect e JOIN effect f ON f.key = e.key AND f.epoch = e.epoch WHERE e.id = attempt_id
$$;

-- The advisory lock class of a tool's registrations: (this, hashtext(tool)).
-- Two tools whose names hash alike only wait for each other.
CREATE FUNCTION tool_policy_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1953460076 $$; -- 'tool'

CREATE FUNCTION tool_policy_insert_lock() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(tool_policy_lock_class(), hashtext(NEW.tool));
    RETURN NEW;
END
$$;
CREATE TRIGGER tool_policy_insert_lock BEFORE INSERT ON tool_policy
    FOR EACH ROW EXECUTE FUNCTION tool_policy_insert_lock();

-- Whether a single effect's identity (its canonical JSON) is in the single
-- effects' key space. A text that is not JSON fails the cast (22P02).
CREATE FUNCTION tool_identity_single(identity text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(identity::jsonb ->> 'space' = 'single', false)
$$;

-- NOT VALID: the calls begun before keep their identities; every row
-- written from now on is checked.
ALTER TABLE tool_call ADD CONSTRAINT tool_call_single_space CHECK (tool_identity_single(identity)) NOT VALID;

-- The keys of the calls begun before this migration: a closed set, written
-- here once.
CREATE TABLE tool_call_legacy_key (
    key text PRIMARY KEY REFERENCES tool_call (key)
);
INSERT INTO tool_call_legacy_key (key) SELECT key FROM tool_call;
CREATE FUNCTION tool_call_legacy_key_closed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on tool_call_legacy_key refused: the keys of the calls begun before single effects had a key space of their own are a closed set', TG_OP
        USING ERRCODE = 'OP001';
END
$$;
CREATE TRIGGER tool_call_legacy_key_closed BEFORE INSERT OR UPDATE OR DELETE ON tool_call_legacy_key
    FOR EACH ROW EXECUTE FUNCTION tool_call_legacy_key_closed();
CREATE TRIGGER tool_call_legacy_key_no_truncate BEFORE TRUNCATE ON tool_call_legacy_key
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- Whether key is a legacy call's key that a frozen plan's target has. Only
-- legacy keys are looked up in the plans, one index probe per plan, so a
-- call in the single effects' key space pays one primary key probe.
CREATE FUNCTION tool_key_of_a_plan(k text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM tool_call_legacy_key WHERE key = k)
       AND EXISTS (SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id AND t.key = k)
$$;

-- No plan is frozen with a target whose key a legacy call holds (a plan
-- frozen from now on; the plans frozen before are tool_key_of_a_plan's).
-- Free when there are no legacy calls: the loop is over that table.
CREATE FUNCTION plan_no_legacy_tool_key() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    SELECT l.key INTO k FROM tool_call_legacy_key l
    WHERE EXISTS (SELECT 1 FROM target t WHERE t.list_id = NEW.list_id AND t.key = l.key)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'plan refused: a target of list % has key %, which a single effect (an agent''s tool call begun before single effects had keys of their own) holds; take that address out of the list, or ask an admin to look at the tool call', NEW.list_id, k
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER plan_no_legacy_tool_key BEFORE INSERT ON plan
    FOR EACH ROW EXECUTE FUNCTION plan_no_legacy_tool_key();

-- Migration 0021's tool_attempt_insert, whole, and: no attempt on a
-- campaign target's key; the policy read at READ COMMITTED after the lock
-- registrations take; a lease from now, for at most an hour.
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

-- Migration 0021's tool_attempt_update, whole, and: no takeover on a
-- campaign target's key, nor past the tool's dedupe window; a lease only
-- runs forward.
CREATE OR REPLACE FUNCTION tool_attempt_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st effect_state;
    pol record;
    first_call timestamptz;
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
        SELECT p.recovery, p.dedupe_window INTO pol FROM tool_policy p WHERE p.id = OLD.policy_id;
        IF pol.recovery <> 'dedupe' OR NOT (st = 'unknown' OR OLD.lease_until < now()) THEN
            RAISE EXCEPTION 'tool attempt %: its lease passes to another performer only when the tool deduplicates by key and the attempt is in doubt (lease expired or unknown)', OLD.effect_id
                USING ERRCODE = 'OP007';
        END IF;
        IF NEW.lease_id = OLD.lease_id OR NEW.takeovers <> OLD.takeovers + 1 THEN
            RAISE EXCEPTION 'tool attempt %: a takeover is a new lease and counts one more takeover', OLD.effect_id
                USING ERRCODE = 'OP007';
        END IF;
        IF tool_key_of_a_plan(OLD.key) THEN
            RAISE EXCEPTION 'tool attempt %: key % is a campaign target''s key (the call was begun before single effects had keys of their own): nobody takes it over', OLD.effect_id, OLD.key
                USING ERRCODE = 'OP008';
        END IF;
        IF NOT (NEW.lease_until > now() AND NEW.lease_until <= now() + interval '1 hour') THEN
            RAISE EXCEPTION 'tool attempt %: a takeover''s lease must end after now and at most an hour from now, not at %', OLD.effect_id, NEW.lease_until
                USING ERRCODE = 'OP007';
        END IF;
        first_call := tool_first_call_at(OLD.effect_id);
        IF tool_window_closed(pol.dedupe_window, first_call, NEW.lease_until) THEN
            RAISE EXCEPTION 'tool attempt %: the tool''s outside system honours a key for % from the first call (at %), and this takeover''s lease would end past that: calling again could be a second effect', OLD.effect_id, pol.dedupe_window, first_call
                USING ERRCODE = 'OP007';
        END IF;
    ELSE
        IF NEW.takeovers <> OLD.takeovers THEN
            RAISE EXCEPTION 'tool attempt %: takeovers count only with a new lease', OLD.effect_id
                USING ERRCODE = 'OP003';
        END IF;
        -- The holder's heartbeat: forward only, while the lease runs.
        IF NEW.lease_until IS DISTINCT FROM OLD.lease_until THEN
            IF OLD.lease_until < now() THEN
                RAISE EXCEPTION 'tool attempt %: its lease ended at %, so the call is in doubt: no heartbeat revives it', OLD.effect_id, OLD.lease_until
                    USING ERRCODE = 'OP007';
            END IF;
            IF NEW.lease_until < OLD.lease_until THEN
                RAISE EXCEPTION 'tool attempt %: a lease is only ever extended, not moved back from % to %', OLD.effect_id, OLD.lease_until, NEW.lease_until
                    USING ERRCODE = 'OP007';
            END IF;
            IF NEW.lease_until > now() + interval '1 hour' THEN
                RAISE EXCEPTION 'tool attempt %: a heartbeat extends a lease to at most an hour from now, not to %', OLD.effect_id, NEW.lease_until
                    USING ERRCODE = 'OP007';
            END IF;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

REVOKE INSERT ON tool_call_legacy_key FROM onceplan_app;
GRANT SELECT ON tool_call_legacy_key TO onceplan_app;
