-- Back to submissions without their text (0014's trigger).
CREATE OR REPLACE FUNCTION submission_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    d record;
BEGIN
    SELECT state, version INTO c FROM campaign WHERE id = NEW.campaign_id FOR SHARE;
    IF NOT FOUND OR c.state <> 'pending_approval' OR c.version <> NEW.version THEN
        RAISE EXCEPTION 'submission refused: campaign % is not pending approval of version %', NEW.campaign_id, NEW.version
            USING ERRCODE = 'OP007';
    END IF;
    SELECT list_id, proposed_by, last_edited_by INTO d FROM draft
    WHERE campaign_id = NEW.campaign_id AND version = NEW.version FOR SHARE;
    IF d.list_id IS NULL THEN
        RAISE EXCEPTION 'submission refused: version % of campaign % has no targets', NEW.version, NEW.campaign_id
            USING ERRCODE = 'OP007';
    END IF;
    NEW.list_id := d.list_id;
    NEW.proposed_by := d.proposed_by;
    NEW.last_edited_by := d.last_edited_by;
    NEW.target_count := (SELECT target_count FROM target_list WHERE id = d.list_id);
    NEW.created_at := now();
    RETURN NEW;
END
$$;

ALTER TABLE submission
    DROP COLUMN from_addr,
    DROP COLUMN subject,
    DROP COLUMN text_body,
    DROP COLUMN html_body;
