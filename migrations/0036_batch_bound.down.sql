-- Refused (by the action check) once an alert has been recorded: the
-- trail is write-once, and going down would have to drop those entries.
ALTER TABLE campaign_event
    DROP CONSTRAINT campaign_event_action_check,
    ADD CONSTRAINT campaign_event_action_check CHECK (action IN ('create', 'edit', 'import', 'submit', 'approve', 'reject',
        'freeze', 'start', 'pause', 'resume', 'cancel', 'complete', 'resolve', 'supersede', 'revoke', 'test_send'));

GRANT INSERT ON effect_batch, effect_batch_member TO onceplan_app;

DROP TRIGGER effect_response_own_of_member ON effect_response;
DROP FUNCTION effect_response_own_of_member();
DROP TRIGGER effect_batch_complete ON effect_batch;
DROP FUNCTION effect_batch_complete();

-- effect_batch_member_insert as migration 0033 wrote it.
CREATE OR REPLACE FUNCTION effect_batch_member_insert() RETURNS trigger
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
ALTER FUNCTION effect_batch_member_insert() RESET ALL;

DROP TRIGGER effect_batch_insert ON effect_batch;
DROP FUNCTION effect_batch_insert();
CREATE TRIGGER effect_batch_created_at BEFORE INSERT ON effect_batch
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();

ALTER TABLE effect_batch_member_archive DROP COLUMN batch_xact;
ALTER TABLE effect_batch_archive DROP COLUMN created_xact;
ALTER TABLE effect_batch_archive DROP COLUMN plan_id;

ALTER TABLE effect_batch_member DROP CONSTRAINT effect_batch_member_of_call;
ALTER TABLE effect_batch_member DROP COLUMN batch_xact;
ALTER TABLE effect_batch DROP CONSTRAINT effect_batch_written_once;
ALTER TABLE effect_batch DROP COLUMN created_xact;
ALTER TABLE effect_batch DROP COLUMN plan_id;
