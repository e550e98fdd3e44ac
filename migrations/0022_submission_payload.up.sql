-- A submission keeps the text it asked to be approved: the
-- approver of a resubmitted draft sees, line by line, what changed since
-- the version that was rejected or edited while pending. Until now only
-- its hash, list and authors were kept, and a draft edited after a
-- rejection overwrote the only copy of that text.
--
-- As with the list and the authorship, PostgreSQL copies the text from the
-- draft (under the same lock), not from the statement; the row stays
-- write-once. Submissions made before this migration have NULL here: the
-- diff falls back to their plan, or to their draft while it still hashes
-- to what was submitted.
ALTER TABLE submission
    ADD COLUMN from_addr text,
    ADD COLUMN subject   text,
    ADD COLUMN text_body text,
    ADD COLUMN html_body text;

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
    SELECT list_id, proposed_by, last_edited_by, from_addr, subject, text_body, html_body INTO d FROM draft
    WHERE campaign_id = NEW.campaign_id AND version = NEW.version FOR SHARE;
    IF d.list_id IS NULL THEN
        RAISE EXCEPTION 'submission refused: version % of campaign % has no targets', NEW.version, NEW.campaign_id
            USING ERRCODE = 'OP007';
    END IF;
    NEW.list_id := d.list_id;
    NEW.proposed_by := d.proposed_by;
    NEW.last_edited_by := d.last_edited_by;
    NEW.from_addr := d.from_addr;
    NEW.subject := d.subject;
    NEW.text_body := d.text_body;
    NEW.html_body := d.html_body;
    NEW.target_count := (SELECT target_count FROM target_list WHERE id = d.list_id);
    NEW.created_at := now();
    RETURN NEW;
END
$$;
