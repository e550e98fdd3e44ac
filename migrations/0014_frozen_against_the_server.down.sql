-- Back to 0013's rules (for development and the down/up test; it weakens
-- what the server's role may do and drops the submissions).
GRANT INSERT ON bump_policy TO onceplan_app;
DROP INDEX effect_outside_plan;

ALTER FUNCTION effect_insert() RESET enable_seqscan;
CREATE OR REPLACE FUNCTION effect_insert() RETURNS trigger
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

GRANT UPDATE ON campaign TO onceplan_app;
CREATE OR REPLACE FUNCTION campaign_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.created_by <> OLD.created_by OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'campaign %: id, creator and creation time never change', OLD.id USING ERRCODE = 'OP003';
    END IF;
    IF NEW.version < OLD.version THEN
        RAISE EXCEPTION 'campaign %: versions only go up', OLD.id USING ERRCODE = 'OP003';
    END IF;
    IF NEW.state <> OLD.state AND NOT (
        (OLD.state = 'draft' AND NEW.state IN ('pending_approval', 'cancelled'))
        OR (OLD.state = 'pending_approval' AND NEW.state IN ('draft', 'approved', 'cancelled'))
        OR (OLD.state = 'approved' AND NEW.state IN ('running', 'draft', 'cancelled'))
        OR (OLD.state = 'running' AND NEW.state IN ('paused', 'completed', 'draft', 'cancelled'))
        OR (OLD.state = 'paused' AND NEW.state IN ('running', 'draft', 'cancelled'))
        OR (OLD.state = 'completed' AND NEW.state IN ('draft', 'running'))
    ) THEN
        RAISE EXCEPTION 'campaign %: % -> % is not a legal transition', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'OP002';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

ALTER TABLE campaign DROP CONSTRAINT campaign_plan_of_campaign;
ALTER TABLE run DROP CONSTRAINT run_plan_of_campaign;
ALTER TABLE plan DROP CONSTRAINT plan_list;
ALTER TABLE plan DROP CONSTRAINT plan_of_campaign;
DROP TRIGGER plan_approved ON plan;
DROP FUNCTION plan_approved();

CREATE OR REPLACE FUNCTION approval_not_self() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM draft d WHERE d.campaign_id = NEW.campaign_id AND d.version = NEW.version
               AND NEW.approver_id IN (d.proposed_by, d.last_edited_by)) THEN
        RAISE EXCEPTION 'approval refused: user % proposed or last edited this draft', NEW.approver_id
            USING ERRCODE = 'OP006';
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;
ALTER TABLE approval DROP COLUMN submission_id;

GRANT UPDATE ON draft TO onceplan_app;
ALTER TABLE draft DROP CONSTRAINT draft_list;
DROP TRIGGER draft_no_delete ON draft;
DROP TRIGGER draft_update ON draft;
DROP FUNCTION draft_update();

DROP TABLE submission;
DROP FUNCTION submission_insert();

CREATE OR REPLACE FUNCTION target_list_frozen_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    list bigint;
BEGIN
    IF TG_TABLE_NAME = 'target' THEN
        list := OLD.list_id;
    ELSE
        list := OLD.id;
    END IF;
    IF EXISTS (SELECT 1 FROM plan WHERE list_id = list) THEN
        RAISE EXCEPTION 'DELETE on % refused: list % belongs to a frozen plan', TG_TABLE_NAME, list
            USING ERRCODE = 'OP001';
    END IF;
    RETURN OLD;
END
$$;

REVOKE INSERT ON target_list FROM onceplan_app;
GRANT INSERT ON target_list TO onceplan_app;
REVOKE INSERT ON target FROM onceplan_app;
GRANT INSERT, DELETE ON target TO onceplan_app;

DROP TRIGGER target_list_insert ON target_list;
DROP FUNCTION target_list_insert();
CREATE TRIGGER target_list_created_at BEFORE INSERT ON target_list FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();

ALTER TABLE target DROP CONSTRAINT target_of_list;
ALTER TABLE target ADD CONSTRAINT target_list_id_fkey FOREIGN KEY (list_id) REFERENCES target_list (id) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE target DROP COLUMN list_xact;
ALTER TABLE target_list DROP CONSTRAINT target_list_of_campaign;
ALTER TABLE target_list DROP CONSTRAINT target_list_written_once;
ALTER TABLE target_list DROP COLUMN created_xact;
