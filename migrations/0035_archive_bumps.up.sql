-- A campaign's bumps go to the archive with its attempts (docs/ARCHITECTURE.md,
-- "The archive"): effect_bump holds the bumps of keys that may still be
-- attempted, and the readers of an archived campaign read its epochs where
-- they read its attempts. And archiving is serialised with every write that
-- asks "is this key archived?" (a bump, an attempt outside any plan), so that
-- none of them slips in beside an archive that has not committed yet.

CREATE TABLE effect_bump_archive (LIKE effect_bump INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_bump_archive ADD PRIMARY KEY (key, epoch);
CREATE TRIGGER effect_bump_archive_write_once BEFORE UPDATE OR DELETE ON effect_bump_archive
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_bump_archive_no_truncate BEFORE TRUNCATE ON effect_bump_archive
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

ALTER TABLE campaign_archive ADD COLUMN bumps bigint NOT NULL DEFAULT 0;

-- The advisory lock an archive holds alone for its whole transaction, and
-- every write that asks whether a key is archived holds shared for its own:
-- a bump or an attempt outside any plan waits for an archive in progress,
-- then sees it. (Its number is no key's: keys take hashtextextended(key, 0),
-- of text that starts "v1:".)
CREATE FUNCTION onceplan_archive_lock() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended('onceplan archive', 0)
$$;

-- Whether key is a target's key in an archived campaign's plans, attempted
-- or not (one probe of the target index per archived plan), under the
-- archive's lock.
CREATE FUNCTION key_archived(key text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(onceplan_archive_lock());
    RETURN EXISTS (SELECT 1 FROM campaign_archive a JOIN plan p ON p.campaign_id = a.campaign_id
                   JOIN target t ON t.list_id = p.list_id AND t.key = key_archived.key);
END $$;

-- An attempt outside any plan on an archived campaign's key is refused,
-- whether the key was attempted or not (migration 0034 asked the archived
-- attempts only: a key its campaign never attempted, suppressed or not
-- started, was left open). And such a key is not bumped: its campaign
-- never runs again, and its epochs are read from the archive.
CREATE OR REPLACE FUNCTION effect_archived_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF key_archived(NEW.key) THEN
        RAISE EXCEPTION '% refused: key % belongs to an archived campaign, which never runs again',
            CASE TG_TABLE_NAME WHEN 'effect_bump' THEN 'bump' ELSE 'effect' END, NEW.key
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER effect_bump_archived_key BEFORE INSERT ON effect_bump
    FOR EACH ROW EXECUTE FUNCTION effect_archived_key();

-- Bumps leave only with their campaign: every key of the rows gone is a key
-- of a campaign archived in this transaction, with no attempt left hot.
CREATE FUNCTION effect_bump_archive_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    stray text;
BEGIN
    SELECT g.key INTO stray FROM gone g
    WHERE EXISTS (SELECT 1 FROM effect e WHERE e.key = g.key)
       OR NOT EXISTS (
        SELECT 1 FROM campaign_archive a JOIN plan p ON p.campaign_id = a.campaign_id
        JOIN target t ON t.list_id = p.list_id AND t.key = g.key
        WHERE a.txid = pg_current_xact_id())
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'DELETE on effect_bump refused: key % is not of a campaign archived in this transaction', stray
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER effect_bump_write_once ON effect_bump;
CREATE TRIGGER effect_bump_write_once BEFORE UPDATE ON effect_bump
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER effect_bump_no_delete BEFORE DELETE ON effect_bump
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_archive_only();
CREATE TRIGGER effect_bump_archive_only AFTER DELETE ON effect_bump
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION effect_bump_archive_only();

-- archive_campaign as migration 0034 wrote it, under the archive's lock, and
-- moving the bumps of the campaign's keys after its attempts (an attempt at
-- a bumped epoch names its bump: effect_epoch_bumped).
CREATE OR REPLACE FUNCTION archive_campaign(campaign uuid, actor text) RETURNS campaign_archive
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    plans bigint[];
    want campaign_archive;
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(onceplan_archive_lock());
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
    CREATE TEMP TABLE archiving_key (key text PRIMARY KEY) ON COMMIT DROP;
    INSERT INTO archiving_effect SELECT e.id FROM effect e WHERE e.plan_id = ANY (plans);
    INSERT INTO archiving_batch SELECT DISTINCT m.batch_id FROM effect_batch_member m JOIN archiving_effect x ON x.id = m.effect_id;
    INSERT INTO archiving_key SELECT DISTINCT b.key FROM effect_bump b
        JOIN target t ON t.key = b.key JOIN plan p ON p.list_id = t.list_id WHERE p.id = ANY (plans);
    ANALYZE archiving_effect;
    ANALYZE archiving_batch;
    ANALYZE archiving_key;
    IF EXISTS (SELECT 1 FROM effect_batch_member m JOIN archiving_batch b ON b.id = m.batch_id
               WHERE NOT EXISTS (SELECT 1 FROM archiving_effect x WHERE x.id = m.effect_id)) THEN
        RAISE EXCEPTION 'campaign %: a batch call of its attempts carries another campaign''s', campaign
            USING ERRCODE = 'OP004';
    END IF;

    -- The row that lets rows leave the hot tables in this transaction
    -- (onceplan_archive_only), checked by campaign_archive_insert.
    INSERT INTO campaign_archive (campaign_id, archived_by, attempts, answers, calls, bumps)
    VALUES (campaign, actor,
            (SELECT count(*) FROM archiving_effect),
            (SELECT count(*) FROM effect_response r JOIN archiving_effect x ON x.id = r.effect_id),
            (SELECT count(*) FROM archiving_batch),
            (SELECT count(*) FROM effect_bump b JOIN archiving_key k ON k.key = b.key))
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
    WITH gone AS (DELETE FROM effect_bump b USING archiving_key k WHERE b.key = k.key RETURNING b.*)
    INSERT INTO effect_bump_archive SELECT * FROM gone;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> want.bumps THEN
        RAISE EXCEPTION 'campaign %: % bumps moved, not the % counted; archive it again', campaign, n, want.bumps
            USING ERRCODE = 'OP002';
    END IF;
    DROP TABLE archiving_effect;
    DROP TABLE archiving_batch;
    DROP TABLE archiving_key;
    RETURN want;
END $$;

-- The archive's epochs, as effect_current_epoch() and effect_bumped_epoch()
-- (migration 0029) state the hot table's: a reader of an archived campaign
-- reads these where it reads effect_archived().
CREATE FUNCTION effect_archived_current_epoch(key text) RETURNS TABLE (epoch int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(max(b.epoch), 0) FROM effect_bump_archive b WHERE b.key = effect_archived_current_epoch.key
$$;

CREATE FUNCTION effect_archived_bumped_epoch() RETURNS TABLE (key text, epoch int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT b.key, max(b.epoch) FROM effect_bump_archive b GROUP BY b.key
$$;

REVOKE INSERT ON effect_bump_archive FROM onceplan_app;
GRANT SELECT ON effect_bump_archive TO onceplan_app;
