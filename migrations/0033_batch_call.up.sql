-- Batch calls (docs/ARCHITECTURE.md, "Batch sending"): one provider call
-- carrying several attempts, each still its own ledger row and key. The
-- package ledger owns these tables.
--
-- The call is written with the claim of its attempts, in the same commit:
-- which attempts, in which order, and the exact request, so that recovery
-- sends the same bytes again under the same key (a service that
-- deduplicates by key answers a repeat with the first answer, and refuses
-- a repeat with other bytes), or asks about each attempt by its own
-- effect id. Its answer is stored once, as received, before anything
-- parses it; each attempt's raw-answer row points at it.
CREATE TABLE effect_batch (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider   text NOT NULL CHECK (provider <> ''),
    -- The service's idempotency key for the call ('' when it takes none).
    call_key   text NOT NULL,
    request    bytea NOT NULL,
    size       int NOT NULL CHECK (size BETWEEN 1 AND 500),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A key names one call: the same key with other bytes would be refused
-- by the service, or, past its window, be a second call.
CREATE UNIQUE INDEX effect_batch_call_key ON effect_batch (call_key) WHERE call_key <> '';

CREATE TABLE effect_batch_member (
    batch_id  bigint NOT NULL REFERENCES effect_batch (id),
    position  int NOT NULL CHECK (position >= 0),
    -- An attempt is carried by one call at most.
    effect_id bigint NOT NULL UNIQUE REFERENCES effect (id),
    PRIMARY KEY (batch_id, position)
);

CREATE TABLE effect_batch_response (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id   bigint NOT NULL REFERENCES effect_batch (id),
    kind       text NOT NULL CHECK (kind IN ('send', 'resend')),
    body       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effect_batch_response_batch ON effect_batch_response (batch_id);

-- Each attempt's raw-answer row of a batch call holds no bytes of its own:
-- it points at the call's one answer.
ALTER TABLE effect_response ADD COLUMN batch_response_id bigint REFERENCES effect_batch_response (id);

-- History: write-once, stamped by the database's clock.
CREATE TRIGGER effect_batch_created_at BEFORE INSERT ON effect_batch
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER effect_batch_response_created_at BEFORE INSERT ON effect_batch_response
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER effect_batch_write_once BEFORE UPDATE OR DELETE ON effect_batch
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_batch_no_truncate BEFORE TRUNCATE ON effect_batch
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_batch_member_write_once BEFORE UPDATE OR DELETE ON effect_batch_member
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_batch_member_no_truncate BEFORE TRUNCATE ON effect_batch_member
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_batch_response_write_once BEFORE UPDATE OR DELETE ON effect_batch_response
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_batch_response_no_truncate BEFORE TRUNCATE ON effect_batch_response
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- A call carries attempts claimed in its own transaction, and only while
-- they are pending: a pending attempt of an earlier transaction may have
-- been sent already (alone or in another call), and putting it in a new
-- call under a new key would send it a second time. (An attempt's
-- created_at is its transaction's start, now(): effect_insert.)
CREATE FUNCTION effect_batch_member_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st effect_state;
    born timestamptz;
    n int;
BEGIN
    SELECT e.state, e.created_at INTO st, born FROM effect e WHERE e.id = NEW.effect_id;
    IF st IS DISTINCT FROM 'pending' OR born IS DISTINCT FROM now() THEN
        RAISE EXCEPTION 'effect %: a batch call carries only attempts claimed in its own transaction, while pending', NEW.effect_id
            USING ERRCODE = 'OP004';
    END IF;
    SELECT b.size INTO n FROM effect_batch b WHERE b.id = NEW.batch_id;
    IF NEW.position >= n THEN
        RAISE EXCEPTION 'batch call %: position % is past its % attempts', NEW.batch_id, NEW.position, n
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER effect_batch_member_insert BEFORE INSERT ON effect_batch_member
    FOR EACH ROW EXECUTE FUNCTION effect_batch_member_insert();

-- An attempt's row that points at a call's answer is of an attempt that
-- call carried, of the answer's kind, and holds no bytes of its own.
CREATE FUNCTION effect_response_of_batch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM effect_batch_response b
                   JOIN effect_batch_member m ON m.batch_id = b.batch_id
                   WHERE b.id = NEW.batch_response_id AND b.kind = NEW.kind AND m.effect_id = NEW.effect_id)
       OR length(NEW.body) <> 0 THEN
        RAISE EXCEPTION 'effect %: a batch answer is recorded for the attempts its call carried, of its kind, without bytes of their own', NEW.effect_id
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER effect_response_of_batch BEFORE INSERT ON effect_response
    FOR EACH ROW WHEN (NEW.batch_response_id IS NOT NULL) EXECUTE FUNCTION effect_response_of_batch();

-- The newest raw answer of an attempt: a batch call's answer for an
-- attempt it carried (migration 0030's read, now through the pointer).
CREATE OR REPLACE FUNCTION effect_latest_response(effect bigint) RETURNS TABLE (body bytea, kind text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(b.body, r.body), r.kind FROM effect_response r
    LEFT JOIN effect_batch_response b ON b.id = r.batch_response_id
    WHERE r.effect_id = effect_latest_response.effect
    ORDER BY r.id DESC LIMIT 1
$$;

GRANT SELECT, INSERT ON effect_batch, effect_batch_member, effect_batch_response TO onceplan_app;
