-- The suppression list: addresses that must not be mailed —
-- they unsubscribed, bounced hard, complained, or an admin said so. The
-- history is write-once: an entry is never changed or deleted; taking an
-- address off is a removal row of its own, with who and why. An address is
-- suppressed while it has an entry without a removal
-- (suppression.ActiveSQL).
CREATE TABLE suppression (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- normalised exactly like a target's address (ledger.NormalizeEmail)
    address     text NOT NULL CHECK (address <> '' AND address = btrim(address)),
    reason      text NOT NULL CHECK (reason IN ('unsubscribed', 'hard_bounce', 'complaint', 'manual')),
    -- where it came from: a campaign's unsubscribe link, a provider's
    -- event, a person (actor), an import
    source      text NOT NULL CHECK (source IN ('unsubscribe', 'provider_event', 'actor', 'import')),
    campaign_id uuid REFERENCES campaign (id),
    event_id    bigint,
    actor       text NOT NULL DEFAULT '',
    note        text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX suppression_address ON suppression (address, id);
CREATE INDEX suppression_recent ON suppression (id DESC);

CREATE TABLE suppression_removal (
    suppression_id bigint PRIMARY KEY REFERENCES suppression (id),
    actor          text NOT NULL CHECK (btrim(actor) <> ''),
    reason         text NOT NULL CHECK (btrim(reason) <> ''),
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER suppression_created_at BEFORE INSERT ON suppression
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER suppression_write_once BEFORE UPDATE OR DELETE ON suppression
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER suppression_no_truncate BEFORE TRUNCATE ON suppression
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER suppression_removal_created_at BEFORE INSERT ON suppression_removal
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER suppression_removal_write_once BEFORE UPDATE OR DELETE ON suppression_removal
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER suppression_removal_no_truncate BEFORE TRUNCATE ON suppression_removal
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- A planned target left out because its address was suppressed when its
-- effect was about to be claimed: its own outcome, not a ledger state
-- (the target has no attempt at all). Written by the claim's own
-- statement (ledger.ClaimMany with a Skip), once per plan target; it is
-- final for that plan: resume and requeue pass it by.
CREATE TABLE target_suppressed (
    plan_id        bigint NOT NULL REFERENCES plan (id),
    ordinal        integer NOT NULL CHECK (ordinal >= 1),
    key            text NOT NULL,
    suppression_id bigint NOT NULL REFERENCES suppression (id),
    job_id         bigint,
    owner          text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan_id, ordinal)
);
CREATE INDEX target_suppressed_key ON target_suppressed (key);

CREATE TRIGGER target_suppressed_created_at BEFORE INSERT ON target_suppressed
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER target_suppressed_write_once BEFORE UPDATE OR DELETE ON target_suppressed
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER target_suppressed_no_truncate BEFORE TRUNCATE ON target_suppressed
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- A suppressed outcome names its plan's own target with that target's key,
-- as a planned attempt must (effect_insert's rule).
CREATE FUNCTION onceplan_target_suppressed_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id
                   WHERE p.id = NEW.plan_id AND t.ordinal = NEW.ordinal AND t.key = NEW.key) THEN
        RAISE EXCEPTION 'a suppressed outcome must name its plan''s target with its key'
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER target_suppressed_insert BEFORE INSERT ON target_suppressed
    FOR EACH ROW EXECUTE FUNCTION onceplan_target_suppressed_insert();

GRANT SELECT, INSERT ON suppression, suppression_removal, target_suppressed TO onceplan_app;
