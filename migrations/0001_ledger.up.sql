-- The effects ledger: one row per attempt at (key, epoch).
--
-- Every rule below is enforced by PostgreSQL itself, so that a bug in the
-- application, a second process or a hand-typed statement cannot break it
-- (docs/ARCHITECTURE.md, "The ledger: exactly-once lives in PostgreSQL"):
--   1. at most one blocking row (pending, done, unknown, stranded) per (key, epoch);
--   2. only the legal state transitions;
--   3. raw provider responses are written once, and a worker settles only
--      after the response it settles from is committed;
--   5. a row with epoch > 0 exists only behind a recorded bump.
-- Timestamps come from the database clock, never from a client.
--
-- Custom SQLSTATEs (mapped to Go errors in ledger/errors.go):
--   OP001 write-once violation    OP002 illegal transition
--   OP003 immutable column        OP004 missing evidence / actor for a transition
--   OP005 bump out of sequence

CREATE TYPE effect_state AS ENUM ('pending', 'done', 'unknown', 'failed', 'stranded', 'revoked');

-- onceplan_refuse_change makes a table write-once: any UPDATE, DELETE or
-- TRUNCATE raises. Used by every append-only table in the schema.
CREATE FUNCTION onceplan_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % refused: rows are write-once', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'OP001';
END
$$;

-- onceplan_db_timestamps overwrites created_at with the database clock, so a
-- client cannot backdate a record.
CREATE FUNCTION onceplan_db_created_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.created_at := now();
    RETURN NEW;
END
$$;

-- bump_policy: a policy that may bump an epoch must be registered before it
-- acts (a model's output can never bump).
CREATE TABLE bump_policy (
    name          text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    description   text NOT NULL CHECK (btrim(description) <> ''),
    registered_by text NOT NULL CHECK (btrim(registered_by) <> ''),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER bump_policy_created_at BEFORE INSERT ON bump_policy
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER bump_policy_write_once BEFORE UPDATE OR DELETE ON bump_policy
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER bump_policy_no_truncate BEFORE TRUNCATE ON bump_policy
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- effect_bump records who moved a key to a new epoch and why (rule 5).
CREATE TABLE effect_bump (
    key        text NOT NULL CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    epoch      integer NOT NULL CHECK (epoch > 0),
    actor_kind text NOT NULL CHECK (actor_kind IN ('human', 'policy')),
    actor      text NOT NULL CHECK (btrim(actor) <> ''),
    policy     text REFERENCES bump_policy (name),
    reason     text NOT NULL CHECK (btrim(reason) <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, epoch),
    CONSTRAINT effect_bump_policy_named CHECK ((actor_kind = 'policy') = (policy IS NOT NULL))
);

-- Epochs go up one at a time: the n-th bump of a key makes epoch n.
CREATE FUNCTION effect_bump_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    current integer;
BEGIN
    SELECT coalesce(max(epoch), 0) INTO current FROM effect_bump WHERE key = NEW.key;
    IF NEW.epoch <> current + 1 THEN
        RAISE EXCEPTION 'bump of % to epoch % refused: the current epoch is %', NEW.key, NEW.epoch, current
            USING ERRCODE = 'OP005';
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER effect_bump_sequence BEFORE INSERT ON effect_bump
    FOR EACH ROW EXECUTE FUNCTION effect_bump_sequence();
CREATE TRIGGER effect_bump_write_once BEFORE UPDATE OR DELETE ON effect_bump
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_bump_no_truncate BEFORE TRUNCATE ON effect_bump
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

CREATE TABLE effect (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key           text NOT NULL CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    epoch         integer NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    -- NULL for epoch 0, so the foreign key below (MATCH SIMPLE) only applies
    -- to bumped epochs: rule 5 as a declarative constraint.
    bumped_epoch  integer GENERATED ALWAYS AS (nullif(epoch, 0)) STORED,
    state         effect_state NOT NULL DEFAULT 'pending',
    attempt       integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    owner         text NOT NULL CHECK (btrim(owner) <> ''),
    job_id        bigint,
    -- The plan target this attempt executes (NULL for an effect made
    -- outside a plan); recovery re-renders the message from it.
    plan_id       bigint,
    ordinal       integer,
    -- Set once each, by the transition that needs them.
    receipt       text,
    reason        text,
    resolved_by   text,
    resolution    text,
    revoked_by    text,
    revoke_reason text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz,
    CONSTRAINT effect_epoch_bumped FOREIGN KEY (key, bumped_epoch) REFERENCES effect_bump (key, epoch)
);

-- Rule 1: the loser of a concurrent claim hits this index and skips.
CREATE UNIQUE INDEX effect_one_blocking ON effect (key, epoch)
    WHERE state IN ('pending', 'done', 'unknown', 'stranded');
-- History of a key (all attempts, blocking or not).
CREATE INDEX effect_key_history ON effect (key, epoch, id);
-- Recovery scans pending rows by age; the UI lists unknowns.
CREATE INDEX effect_pending_age ON effect (created_at) WHERE state = 'pending';
CREATE INDEX effect_unknown ON effect (updated_at) WHERE state = 'unknown';

-- Every attempt starts as a pending claim, stamped by the database.
CREATE FUNCTION effect_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> 'pending' THEN
        RAISE EXCEPTION 'an effect starts as pending, not %', NEW.state
            USING ERRCODE = 'OP002';
    END IF;
    IF NEW.receipt IS NOT NULL OR NEW.reason IS NOT NULL OR NEW.resolved_by IS NOT NULL
       OR NEW.resolution IS NOT NULL OR NEW.revoked_by IS NOT NULL OR NEW.revoke_reason IS NOT NULL
       OR NEW.settled_at IS NOT NULL THEN
        RAISE EXCEPTION 'a new pending effect carries no outcome'
            USING ERRCODE = 'OP004';
    END IF;
    NEW.created_at := now();
    NEW.updated_at := NEW.created_at;
    RETURN NEW;
END
$$;

CREATE TRIGGER effect_insert BEFORE INSERT ON effect
    FOR EACH ROW EXECUTE FUNCTION effect_insert();

-- Rule 2 (legal transitions), rule 3 (settle only after the raw response is
-- committed) and the write-once columns.
CREATE FUNCTION effect_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.key <> OLD.key OR NEW.epoch <> OLD.epoch
       OR NEW.attempt <> OLD.attempt OR NEW.owner <> OLD.owner
       OR NEW.job_id IS DISTINCT FROM OLD.job_id OR NEW.plan_id IS DISTINCT FROM OLD.plan_id
       OR NEW.ordinal IS DISTINCT FROM OLD.ordinal OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'effect %: key, epoch, attempt, owner, job, plan target and creation time never change', OLD.id
            USING ERRCODE = 'OP003';
    END IF;
    IF (OLD.receipt IS NOT NULL AND NEW.receipt IS DISTINCT FROM OLD.receipt)
       OR (OLD.reason IS NOT NULL AND NEW.reason IS DISTINCT FROM OLD.reason)
       OR (OLD.resolved_by IS NOT NULL AND NEW.resolved_by IS DISTINCT FROM OLD.resolved_by)
       OR (OLD.resolution IS NOT NULL AND NEW.resolution IS DISTINCT FROM OLD.resolution)
       OR (OLD.revoked_by IS NOT NULL AND NEW.revoked_by IS DISTINCT FROM OLD.revoked_by)
       OR (OLD.revoke_reason IS NOT NULL AND NEW.revoke_reason IS DISTINCT FROM OLD.revoke_reason)
       OR (OLD.settled_at IS NOT NULL AND NEW.settled_at IS DISTINCT FROM OLD.settled_at) THEN
        RAISE EXCEPTION 'effect %: an outcome, once written, never changes', OLD.id
            USING ERRCODE = 'OP001';
    END IF;

    IF NEW.state = OLD.state THEN
        RAISE EXCEPTION 'effect % is already %', OLD.id, OLD.state
            USING ERRCODE = 'OP002';
    END IF;

    IF NOT (
        (OLD.state = 'pending' AND NEW.state IN ('done', 'failed', 'unknown', 'stranded'))
        OR (OLD.state = 'unknown' AND NEW.state IN ('done', 'failed'))
        OR (OLD.state IN ('done', 'stranded') AND NEW.state = 'revoked')
    ) THEN
        RAISE EXCEPTION 'effect %: % -> % is not a legal transition', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'OP002';
    END IF;

    CASE
    WHEN OLD.state = 'pending' THEN
        -- The worker settles from a provider answer that is already committed.
        IF NEW.state IN ('done', 'failed', 'stranded')
           AND NOT EXISTS (SELECT 1 FROM effect_response r WHERE r.effect_id = OLD.id) THEN
            RAISE EXCEPTION 'effect %: settling as % needs the raw provider response recorded first', OLD.id, NEW.state
                USING ERRCODE = 'OP004';
        END IF;
        IF NEW.state = 'done' AND NEW.receipt IS NULL THEN
            RAISE EXCEPTION 'effect %: done needs a receipt', OLD.id USING ERRCODE = 'OP004';
        END IF;
        IF NEW.state IN ('failed', 'unknown', 'stranded') AND NEW.reason IS NULL THEN
            RAISE EXCEPTION 'effect %: % needs a reason', OLD.id, NEW.state USING ERRCODE = 'OP004';
        END IF;
        NEW.settled_at := now();
    WHEN OLD.state = 'unknown' THEN
        -- Only a probe's recorded answer or a named human settles an unknown.
        IF NEW.resolved_by IS NULL OR NEW.resolution IS NULL THEN
            RAISE EXCEPTION 'effect %: an unknown is settled only by a named resolver with a reason', OLD.id
                USING ERRCODE = 'OP004';
        END IF;
        NEW.settled_at := now();
    ELSE
        IF NEW.revoked_by IS NULL OR NEW.revoke_reason IS NULL THEN
            RAISE EXCEPTION 'effect %: a revocation needs who and why', OLD.id
                USING ERRCODE = 'OP004';
        END IF;
    END CASE;

    NEW.updated_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER effect_update BEFORE UPDATE ON effect
    FOR EACH ROW EXECUTE FUNCTION effect_update();
-- Ledger rows are history: nothing deletes them.
CREATE TRIGGER effect_no_delete BEFORE DELETE ON effect
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_no_truncate BEFORE TRUNCATE ON effect
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- Rule 3: every raw answer from a provider (send, re-send, probe) is kept as
-- received, once, before anything parses it.
CREATE TABLE effect_response (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effect_id   bigint NOT NULL REFERENCES effect (id),
    kind        text NOT NULL CHECK (kind IN ('send', 'resend', 'probe')),
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effect_response_effect ON effect_response (effect_id);

CREATE TRIGGER effect_response_created_at BEFORE INSERT ON effect_response
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER effect_response_write_once BEFORE UPDATE OR DELETE ON effect_response
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_response_no_truncate BEFORE TRUNCATE ON effect_response
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
