-- Single effects begun by agent runtimes, one tool call at a time
-- (package toolcall): the tools' recovery and approval
-- policies, the intent of each call (its key and the exact args it is
-- bound to), approvals of exact args, the lease of each attempt and the
-- audit trail. The attempts themselves are ledger rows (effect, plan_id
-- NULL): one blocking row per key and epoch, the legal transitions and
-- "settle only after the raw answer" hold for them as for campaigns.
--
-- What the server never legitimately does, PostgreSQL refuses it
-- (docs/ARCHITECTURE.md, "The guarantee against the server's own role"):
--   - register a tool with a recovery or without its approval: the
--     application role may insert a policy row naming only the tool and
--     who used it first, so every such row is the first-use default (no
--     recovery, no approval); anything else is the owner's to write
--     (`onceplan tool add`, run like `onceplan migrate`);
--   - bind a key to other args than its intent's, or a key that is not
--     the v1 key of the identity stored beside it (the args are never part
--     of it);
--   - start an attempt of a tool that requires approval without a
--     person's approval of exactly the intent's args (their digest), by
--     someone other than the user the call was begun for;
--   - record an attempt under a policy other than the tool's policy in
--     force, or for a plan target;
--   - hand an attempt's lease to another performer unless the tool
--     deduplicates by key and the attempt is in doubt (its lease expired,
--     or it was settled unknown);
--   - leave an effect on a tool call's key without its attempt record.
-- Everything here is write-once except an attempt's lease.
--
-- SQLSTATEs: OP001 write-once, OP003 immutable column, OP006 self
-- approval, OP007 not what was registered or approved.

-- The digest of a call's args: the hex SHA-256 of the args as jsonb
-- writes them (keys sorted, duplicates dropped, no insignificant white
-- space), so equal JSON objects have one digest. The database's encoding
-- is fixed, so the function is immutable for it.
CREATE FUNCTION tool_args_digest(args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(args::text, 'UTF8')), 'hex')
$$;

-- A tool's key from its identity: "v1:" and the hex SHA-256 of the
-- canonical JSON ledger.CanonicalJSON writes (the identity column).
CREATE FUNCTION tool_key_of(identity text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'v1:' || encode(sha256(convert_to(identity, 'UTF8')), 'hex')
$$;

-- A tool's policies, append-only: the one in force is the latest row
-- registered by the owner, else the first-use row (toolcall.CurrentPolicy
-- names the rule once). A first-use row is the default of every column
-- but tool and registered_by.
CREATE TABLE tool_policy (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tool              text NOT NULL CHECK (tool ~ '^[a-z0-9][a-z0-9._-]{0,99}$'),
    recovery          text NOT NULL DEFAULT 'none' CHECK (recovery IN ('none', 'dedupe', 'probe')),
    -- GET this, with {key} replaced by the call's key, to learn whether
    -- the effect exists: 200 found, 404 not found (as provider probes).
    probe_url         text CHECK (probe_url ~ '^https?://' AND strpos(probe_url, '{key}') > 0 AND length(probe_url) <= 2000),
    -- How long after a lease ends a probe's "not found" is believed.
    settle_window     interval NOT NULL DEFAULT '0' CHECK (settle_window >= '0' AND settle_window <= '1 day'),
    approval_required boolean NOT NULL DEFAULT false,
    first_use         boolean NOT NULL DEFAULT true,
    description       text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    registered_by     text NOT NULL CHECK (btrim(registered_by) <> '' AND length(registered_by) <= 400),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tool_policy_probe CHECK ((recovery = 'probe') = (probe_url IS NOT NULL)),
    CONSTRAINT tool_policy_first_use_is_default CHECK (NOT first_use
        OR (recovery = 'none' AND NOT approval_required AND settle_window = '0' AND description = ''))
);
-- One first-use registration per tool: two first calls at once agree.
CREATE UNIQUE INDEX tool_policy_first_use ON tool_policy (tool) WHERE first_use;
CREATE INDEX tool_policy_latest ON tool_policy (tool, first_use, id DESC);

-- The policy in force for a tool, by the rule above.
CREATE FUNCTION tool_policy_current(tool_name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT id FROM tool_policy WHERE tool = tool_name ORDER BY first_use, id DESC LIMIT 1
$$;

-- The intent of a call: its key, the identity the key is the v1 key of,
-- and the args the key is bound to, for good (a begin with other args
-- is refused: 422). Written by the first begin that may perform it.
CREATE TABLE tool_call (
    key         text PRIMARY KEY CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    identity    text NOT NULL,
    tool        text NOT NULL,
    event       text NOT NULL,
    args        jsonb NOT NULL CHECK (octet_length(args::text) <= 1048576),
    args_digest text NOT NULL GENERATED ALWAYS AS (tool_args_digest(args)) STORED,
    created_by  text NOT NULL CHECK (btrim(created_by) <> ''),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tool_call_key_of_identity CHECK (key = tool_key_of(identity)),
    CONSTRAINT tool_call_identity CHECK (tool = identity::jsonb ->> 'tool' AND event = identity::jsonb ->> 'event')
);
CREATE INDEX tool_call_tool_event ON tool_call (tool, event);

-- A request for a person to approve a call's exact args (one per key and
-- digest: a begin with changed args asks anew).
CREATE TABLE tool_approval_request (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key               text NOT NULL CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    identity          text NOT NULL,
    tool              text NOT NULL,
    event             text NOT NULL,
    args              jsonb NOT NULL CHECK (octet_length(args::text) <= 1048576),
    args_digest       text NOT NULL GENERATED ALWAYS AS (tool_args_digest(args)) STORED,
    policy_id         bigint NOT NULL REFERENCES tool_policy (id),
    requested_by      text NOT NULL CHECK (btrim(requested_by) <> ''),
    requested_by_user bigint NOT NULL REFERENCES app_user (id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tool_approval_request_key_of_identity CHECK (key = tool_key_of(identity)),
    CONSTRAINT tool_approval_request_identity CHECK (tool = identity::jsonb ->> 'tool' AND event = identity::jsonb ->> 'event'),
    CONSTRAINT tool_approval_request_once UNIQUE (key, args_digest)
);

-- A person's decision on a request: approved or rejected, of the digest
-- they were shown, by someone who holds the approver (or admin) role and
-- is not the user the call was begun for.
CREATE TABLE tool_approval (
    request_id  bigint PRIMARY KEY REFERENCES tool_approval_request (id),
    decision    text NOT NULL CHECK (decision IN ('approved', 'rejected')),
    args_digest text NOT NULL,
    decided_by  bigint NOT NULL REFERENCES app_user (id),
    reason      text NOT NULL DEFAULT '' CHECK (length(reason) <= 2000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tool_approval_rejection_says_why CHECK (decision = 'approved' OR btrim(reason) <> '')
);

CREATE FUNCTION tool_approval_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    u record;
BEGIN
    SELECT args_digest, requested_by_user INTO r FROM tool_approval_request WHERE id = NEW.request_id;
    IF NOT FOUND OR r.args_digest <> NEW.args_digest THEN
        RAISE EXCEPTION 'tool approval refused: request % is not for args with digest %', NEW.request_id, NEW.args_digest
            USING ERRCODE = 'OP007';
    END IF;
    IF NEW.decided_by = r.requested_by_user THEN
        RAISE EXCEPTION 'tool approval refused: user % began this call (through an agent token or their own)', NEW.decided_by
            USING ERRCODE = 'OP006';
    END IF;
    SELECT roles, disabled_at INTO u FROM app_user WHERE id = NEW.decided_by FOR SHARE;
    IF u.disabled_at IS NOT NULL OR NOT (u.roles && ARRAY['approver', 'admin']) THEN
        RAISE EXCEPTION 'tool approval refused: user % is disabled or holds neither the approver nor the admin role', NEW.decided_by
            USING ERRCODE = 'OP007';
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER tool_approval_insert BEFORE INSERT ON tool_approval
    FOR EACH ROW EXECUTE FUNCTION tool_approval_insert();

-- One attempt at a call: the ledger row, the policy it was begun under
-- (its recovery is what the caller was promised), the approval it
-- performs, and its lease: who may perform it and until when. Only the
-- lease changes (heartbeat; a takeover to re-perform with the same key).
CREATE TABLE tool_attempt (
    effect_id   bigint PRIMARY KEY REFERENCES effect (id),
    key         text NOT NULL REFERENCES tool_call (key),
    policy_id   bigint NOT NULL REFERENCES tool_policy (id),
    approval_id bigint REFERENCES tool_approval (request_id),
    holder      text NOT NULL CHECK (btrim(holder) <> ''),
    lease_id    uuid NOT NULL DEFAULT gen_random_uuid(),
    lease_until timestamptz NOT NULL,
    takeovers   integer NOT NULL DEFAULT 0 CHECK (takeovers >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_attempt_key ON tool_attempt (key, effect_id);

CREATE FUNCTION tool_attempt_insert() RETURNS trigger
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

CREATE TRIGGER tool_attempt_insert BEFORE INSERT ON tool_attempt
    FOR EACH ROW EXECUTE FUNCTION tool_attempt_insert();

CREATE FUNCTION tool_attempt_update() RETURNS trigger
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

CREATE TRIGGER tool_attempt_update BEFORE UPDATE ON tool_attempt
    FOR EACH ROW EXECUTE FUNCTION tool_attempt_update();
CREATE TRIGGER tool_attempt_no_delete BEFORE DELETE ON tool_attempt
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_attempt_no_truncate BEFORE TRUNCATE ON tool_attempt
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- An effect on a tool call's key is one of its attempts, recorded with
-- its policy and lease, by the end of the transaction that claims it.
-- Only effects outside any plan queue the check (WHEN), so a campaign's
-- claims pay nothing for it.
CREATE FUNCTION effect_tool_attempt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tool_call WHERE key = NEW.key)
       AND NOT EXISTS (SELECT 1 FROM tool_attempt WHERE effect_id = NEW.id) THEN
        RAISE EXCEPTION 'effect % refused: % is a tool call''s key, and the attempt has no tool_attempt record', NEW.id, NEW.key
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER effect_tool_attempt AFTER INSERT ON effect
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.plan_id IS NULL) EXECUTE FUNCTION effect_tool_attempt();

-- The audit trail of single effects, per tool and event: every begin,
-- takeover, settle, recovery and human decision.
CREATE TABLE tool_call_event (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        text NOT NULL CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    tool       text NOT NULL,
    event      text NOT NULL,
    action     text NOT NULL CHECK (action IN ('request_approval', 'approve', 'reject', 'begin', 'takeover',
                                               'settle', 'recover', 'resolve', 'revoke')),
    actor      text NOT NULL CHECK (btrim(actor) <> ''),
    actor_id   bigint REFERENCES app_user (id), -- NULL: recovery
    via_agent  boolean NOT NULL DEFAULT false,
    effect_id  bigint REFERENCES effect (id),
    state      effect_state,
    reason     text NOT NULL DEFAULT '',
    detail     jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_call_event_tool_event ON tool_call_event (tool, event, id);
CREATE INDEX tool_call_event_key ON tool_call_event (key, id);

-- Write-once, with database timestamps.
CREATE TRIGGER tool_policy_created_at BEFORE INSERT ON tool_policy FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER tool_call_created_at BEFORE INSERT ON tool_call FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER tool_approval_request_created_at BEFORE INSERT ON tool_approval_request FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER tool_call_event_created_at BEFORE INSERT ON tool_call_event FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER tool_policy_write_once BEFORE UPDATE OR DELETE ON tool_policy FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_call_write_once BEFORE UPDATE OR DELETE ON tool_call FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_approval_request_write_once BEFORE UPDATE OR DELETE ON tool_approval_request FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_approval_write_once BEFORE UPDATE OR DELETE ON tool_approval FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_call_event_write_once BEFORE UPDATE OR DELETE ON tool_call_event FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_policy_no_truncate BEFORE TRUNCATE ON tool_policy FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_call_no_truncate BEFORE TRUNCATE ON tool_call FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_approval_request_no_truncate BEFORE TRUNCATE ON tool_approval_request FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_approval_no_truncate BEFORE TRUNCATE ON tool_approval FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER tool_call_event_no_truncate BEFORE TRUNCATE ON tool_call_event FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- Privileges (the default privileges of 0008 grant SELECT, INSERT; said
-- again so the file reads whole). A policy: only its tool and who first
-- used it, so the row is the first-use default. An attempt's lease: its
-- holder, lease id and end, and the count of takeovers.
GRANT SELECT, INSERT ON tool_call, tool_approval_request, tool_approval, tool_attempt, tool_call_event TO onceplan_app;
REVOKE INSERT ON tool_policy FROM onceplan_app;
GRANT SELECT ON tool_policy TO onceplan_app;
GRANT INSERT (tool, registered_by) ON tool_policy TO onceplan_app;
GRANT UPDATE (holder, lease_id, lease_until, takeovers) ON tool_attempt TO onceplan_app;
