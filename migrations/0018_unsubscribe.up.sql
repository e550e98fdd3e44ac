-- One-click unsubscribe (RFC 8058). Every campaign message
-- carries a List-Unsubscribe link unless its campaign was created
-- transactional (list_unsubscribe false): a campaign's choice, fixed at
-- create, copied into each plan it freezes and covered by the plan hash.

-- The campaign's choice never changes: onceplan_app may update only
-- state, version and plan_id (0014), and this trigger refuses the owner
-- too, as campaign_update refuses the other fixed columns.
ALTER TABLE campaign ADD COLUMN list_unsubscribe boolean NOT NULL DEFAULT true;

CREATE FUNCTION onceplan_campaign_list_unsubscribe_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.list_unsubscribe <> OLD.list_unsubscribe THEN
        RAISE EXCEPTION 'campaign %: whether its messages carry an unsubscribe link is fixed at create', OLD.id
            USING ERRCODE = 'OP003';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER campaign_list_unsubscribe_fixed BEFORE UPDATE OF list_unsubscribe ON campaign
    FOR EACH ROW EXECUTE FUNCTION onceplan_campaign_list_unsubscribe_fixed();

-- A plan's choice is its campaign's, refused otherwise: what the plan hash
-- covers (plan.PlanHash) is what the campaign was created as. Plans and
-- campaigns from before this migration take true: the hash covers the
-- choice only when it is false, so their hashes stay what they were (the
-- audit recomputes them), and what is still to send of them carries the
-- link.
ALTER TABLE plan ADD COLUMN list_unsubscribe boolean NOT NULL DEFAULT true;

CREATE FUNCTION onceplan_plan_list_unsubscribe() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM campaign c WHERE c.id = NEW.campaign_id AND c.list_unsubscribe = NEW.list_unsubscribe) THEN
        RAISE EXCEPTION 'plan refused: its list_unsubscribe (%) is not its campaign''s', NEW.list_unsubscribe
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER plan_list_unsubscribe BEFORE INSERT ON plan
    FOR EACH ROW EXECUTE FUNCTION onceplan_plan_list_unsubscribe();

-- The secret the unsubscribe tokens are signed with (HMAC-SHA256, package
-- unsubscribe): one row, made on first use with crypto/rand by whichever
-- process gets there first (INSERT ... ON CONFLICT DO NOTHING, then read),
-- and never changed: a new secret would break every link already mailed.
CREATE TABLE unsubscribe_secret (
    id         smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    secret     bytea NOT NULL CHECK (length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER unsubscribe_secret_created_at BEFORE INSERT ON unsubscribe_secret
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER unsubscribe_secret_write_once BEFORE UPDATE OR DELETE ON unsubscribe_secret
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER unsubscribe_secret_no_truncate BEFORE TRUNCATE ON unsubscribe_secret
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

GRANT SELECT, INSERT ON unsubscribe_secret TO onceplan_app;
