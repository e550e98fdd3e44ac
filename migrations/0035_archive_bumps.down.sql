-- Archived bumps go back into the hot table before their archive goes.
ALTER TABLE effect_bump DISABLE TRIGGER USER;
INSERT INTO effect_bump SELECT * FROM effect_bump_archive;
ALTER TABLE effect_bump ENABLE TRIGGER USER;

DROP FUNCTION effect_archived_current_epoch(text);
DROP FUNCTION effect_archived_bumped_epoch();

-- archive_campaign as migration 0034 wrote it.
CREATE OR REPLACE FUNCTION archive_campaign(campaign uuid, actor text) RETURNS campaign_archive
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    plans bigint[];
    want campaign_archive;
    n bigint;
BEGIN
    PERFORM 1 FROM campaign c WHERE c.id = campaign FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'campaign %: no such campaign', campaign USING ERRCODE = 'P0002';
    END IF;
    IF EXISTS (SELECT 1 FROM campaign_archive a WHERE a.campaign_id = campaign) THEN
        RAISE EXCEPTION 'campaign %: it is archived already', campaign USING ERRCODE = 'OP002';
    END IF;
    SELECT coalesce(array_agg(p.id), '{}') INTO plans FROM plan p WHERE p.campaign_id = campaign;
    -- A campaign's attempts are all hot or all archived (readers of one
    -- campaign read one of the two): an attempt outside any plan on one of
    -- its keys would stay behind.
    IF EXISTS (SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id
               JOIN effect e ON e.key = t.key AND e.plan_id IS NULL
               WHERE p.id = ANY (plans)) THEN
        RAISE EXCEPTION 'campaign %: an attempt outside any plan was made on one of its keys, and would stay behind', campaign
            USING ERRCODE = 'OP002';
    END IF;

    CREATE TEMP TABLE archiving_effect (id bigint PRIMARY KEY) ON COMMIT DROP;
    CREATE TEMP TABLE archiving_batch (id bigint PRIMARY KEY) ON COMMIT DROP;
    INSERT INTO archiving_effect SELECT e.id FROM effect e WHERE e.plan_id = ANY (plans);
    INSERT INTO archiving_batch SELECT DISTINCT m.batch_id FROM effect_batch_member m JOIN archiving_effect x ON x.id = m.effect_id;
    ANALYZE archiving_effect;
    ANALYZE archiving_batch;
    IF EXISTS (SELECT 1 FROM effect_batch_member m JOIN archiving_batch b ON b.id = m.batch_id
               WHERE NOT EXISTS (SELECT 1 FROM archiving_effect x WHERE x.id = m.effect_id)) THEN
        RAISE EXCEPTION 'campaign %: a batch call of its attempts carries another campaign''s', campaign
            USING ERRCODE = 'OP004';
    END IF;

    -- The row that lets rows leave the hot tables in this transaction
    -- (onceplan_archive_only), checked by campaign_archive_insert.
    INSERT INTO campaign_archive (campaign_id, archived_by, attempts, answers, calls)
    VALUES (campaign, actor,
            (SELECT count(*) FROM archiving_effect),
            (SELECT count(*) FROM effect_response r JOIN archiving_effect x ON x.id = r.effect_id),
            (SELECT count(*) FROM archiving_batch))
    RETURNING * INTO want;

    WITH gone AS (DELETE FROM effect_response r USING archiving_effect x WHERE r.effect_id = x.id RETURNING r.*)
    INSERT INTO effect_response_archive SELECT * FROM gone;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> want.answers THEN
        RAISE EXCEPTION 'campaign %: % raw answers moved, not the % counted: an answer was recorded meanwhile; archive it again', campaign, n, want.answers
            USING ERRCODE = 'OP002';
    END IF;
    WITH gone AS (DELETE FROM effect_batch_member m USING archiving_batch x WHERE m.batch_id = x.id RETURNING m.*)
    INSERT INTO effect_batch_member_archive SELECT * FROM gone;
    WITH gone AS (DELETE FROM effect_batch_response r USING archiving_batch x WHERE r.batch_id = x.id RETURNING r.*)
    INSERT INTO effect_batch_response_archive SELECT * FROM gone;
    WITH gone AS (DELETE FROM effect_batch b USING archiving_batch x WHERE b.id = x.id RETURNING b.*)
    INSERT INTO effect_batch_archive SELECT * FROM gone;
    WITH gone AS (DELETE FROM effect e USING archiving_effect x WHERE e.id = x.id RETURNING e.*)
    INSERT INTO effect_archive SELECT * FROM gone;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> want.attempts OR EXISTS (SELECT 1 FROM effect e WHERE e.plan_id = ANY (plans)) THEN
        RAISE EXCEPTION 'campaign %: its attempts changed while it was archived; archive it again', campaign
            USING ERRCODE = 'OP002';
    END IF;
    DROP TABLE archiving_effect;
    DROP TABLE archiving_batch;
    RETURN want;
END $$;

DROP TRIGGER effect_bump_archive_only ON effect_bump;
DROP FUNCTION effect_bump_archive_only();
DROP TRIGGER effect_bump_no_delete ON effect_bump;
DROP TRIGGER effect_bump_write_once ON effect_bump;
CREATE TRIGGER effect_bump_write_once BEFORE UPDATE OR DELETE ON effect_bump
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
DROP TRIGGER effect_bump_archived_key ON effect_bump;

CREATE OR REPLACE FUNCTION effect_archived_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM effect_archive a WHERE a.key = NEW.key) THEN
        RAISE EXCEPTION 'effect refused: key % belongs to an archived campaign', NEW.key
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NEW;
END $$;
DROP FUNCTION key_archived(text);
DROP FUNCTION onceplan_archive_lock();

ALTER TABLE campaign_archive DROP COLUMN bumps;
DROP TABLE effect_bump_archive;
