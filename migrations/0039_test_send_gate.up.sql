-- Whether a reviewer gets a test message is decided where the row that
-- records the message is written, for every role (docs/ARCHITECTURE.md,
-- "Test sends"): a test send writes one test_send_message per recipient,
-- and commits them, before it sends anything; PostgreSQL refuses the row
-- of an address the suppression list holds now — its own rule,
-- onceplan_suppressed (migration 0024), not a copy. A suppression
-- committed after that commit is too late for that message, as it is for
-- a target already claimed; one being written meanwhile is waited for
-- (the address's lock, taken shared, as a suppressed outcome takes it).
-- The check reads the latest committed rows, which holds at READ
-- COMMITTED only (onceplan_require_read_committed).
--
-- The trail's record of a test send (campaign_event 'test_send', written
-- after the sends with each provider's answer) names only messages so
-- recorded: each delivery's key, campaign and address are a
-- test_send_message's.
CREATE TABLE test_send_message (
    -- the message's effect key (event "test:<campaign>:<random>": no
    -- target's), which the provider was given
    key         text PRIMARY KEY CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    campaign_id uuid NOT NULL REFERENCES campaign (id),
    -- normalised exactly like a target's address (ledger.NormalizeEmail),
    -- so the suppression list's entries name it as they are written
    address     text NOT NULL CHECK (address <> '' AND address = btrim(address) AND address !~ '[A-Z]'),
    actor_id    bigint NOT NULL REFERENCES app_user (id),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX test_send_message_campaign ON test_send_message (campaign_id);
GRANT SELECT, INSERT ON test_send_message TO onceplan_app;

CREATE FUNCTION test_send_message_gate() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
BEGIN
    PERFORM onceplan_require_read_committed('a test message');
    PERFORM pg_advisory_xact_lock_shared(onceplan_suppression_lock_key(NEW.address));
    held := onceplan_suppressed(NEW.address);
    IF held IS NOT NULL THEN
        RAISE EXCEPTION 'test message refused: % is on the suppression list (entry %), and a test send never mails a suppressed address', NEW.address, held
            USING ERRCODE = 'OP008';
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER test_send_message_gate BEFORE INSERT ON test_send_message
    FOR EACH ROW EXECUTE FUNCTION test_send_message_gate();
CREATE TRIGGER test_send_message_write_once BEFORE UPDATE OR DELETE ON test_send_message
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER test_send_message_no_truncate BEFORE TRUNCATE ON test_send_message
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- A test send's trail entry lists its deliveries; each names a message
-- recorded (and so let through the gate above) before it was sent.
CREATE FUNCTION campaign_event_test_send() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF jsonb_typeof(NEW.detail -> 'deliveries') IS DISTINCT FROM 'array' OR jsonb_array_length(NEW.detail -> 'deliveries') = 0 THEN
        RAISE EXCEPTION 'a test send''s trail entry lists its deliveries'
            USING ERRCODE = 'OP008';
    END IF;
    SELECT d ->> 'to' AS address, d ->> 'key' AS key INTO bad
    FROM jsonb_array_elements(NEW.detail -> 'deliveries') d
    WHERE NOT EXISTS (SELECT 1 FROM test_send_message m
                      WHERE m.key = d ->> 'key' AND m.campaign_id = NEW.campaign_id AND m.address = d ->> 'to')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a test send''s trail entry names a message to % (key %) that was not recorded as a test message of this campaign before it was sent', bad.address, bad.key
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER campaign_event_test_send BEFORE INSERT ON campaign_event
    FOR EACH ROW WHEN (NEW.action = 'test_send') EXECUTE FUNCTION campaign_event_test_send();
