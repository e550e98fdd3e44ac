-- The archive (docs/ARCHITECTURE.md, "The archive"): a finished campaign's
-- attempts, raw answers and batch calls move, in one transaction, out of
-- the ledger's hot tables into tables of the same shape, so that the
-- indexes the next campaign's claims and settles walk hold only what may
-- still change. A campaign's attempts are all hot or all archived: its
-- readers (the audit, the export, the pages) read effect_archived() below
-- in place of effect_attempt() once it is archived, and ledger.Store's
-- reads by id and key read both. The package ledger owns these tables;
-- archive_campaign() is the only writer.

-- (LIKE copies the columns as plain ones: the hot table's generated and
-- identity columns keep their values here as they were.)
CREATE TABLE effect_archive (LIKE effect INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_archive ADD PRIMARY KEY (id);
CREATE INDEX effect_archive_key ON effect_archive (key, epoch, id);
CREATE INDEX effect_archive_plan_target ON effect_archive (plan_id, ordinal) INCLUDE (epoch, state, id) WHERE plan_id IS NOT NULL;

CREATE TABLE effect_response_archive (LIKE effect_response INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_response_archive ADD PRIMARY KEY (id);
CREATE INDEX effect_response_archive_effect ON effect_response_archive (effect_id);

CREATE TABLE effect_batch_archive (LIKE effect_batch INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_batch_archive ADD PRIMARY KEY (id);

CREATE TABLE effect_batch_member_archive (LIKE effect_batch_member INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_batch_member_archive ADD PRIMARY KEY (batch_id, position);
CREATE UNIQUE INDEX effect_batch_member_archive_effect ON effect_batch_member_archive (effect_id);

CREATE TABLE effect_batch_response_archive (LIKE effect_batch_response INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE effect_batch_response_archive ADD PRIMARY KEY (id);
CREATE INDEX effect_batch_response_archive_batch ON effect_batch_response_archive (batch_id);

-- One row per archived campaign: who, when, how much moved, and the
-- transaction that moved it (the hot tables let rows go only in that
-- transaction, below).
CREATE TABLE campaign_archive (
    campaign_id uuid PRIMARY KEY REFERENCES campaign (id),
    archived_by text NOT NULL CHECK (btrim(archived_by) <> ''),
    attempts    bigint NOT NULL DEFAULT 0,
    answers     bigint NOT NULL DEFAULT 0,
    calls       bigint NOT NULL DEFAULT 0,
    archived_at timestamptz NOT NULL DEFAULT now(),
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id()
);

-- The archive is history: write-once, for every role.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['effect_archive', 'effect_response_archive', 'effect_batch_archive',
                             'effect_batch_member_archive', 'effect_batch_response_archive'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change()', t || '_write_once', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change()', t || '_no_truncate', t);
    END LOOP;
END $$;

-- A campaign is archived once it is finished: completed or cancelled, with
-- no attempt still pending or unknown (recovery and people still act on
-- those). Its row is locked, so that nothing starts it again meanwhile;
-- the counts are what archive_campaign moves.
CREATE FUNCTION campaign_archive_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    open_state effect_state;
BEGIN
    SELECT c.state INTO st FROM campaign c WHERE c.id = NEW.campaign_id FOR UPDATE;
    IF st IS NULL OR st NOT IN ('completed', 'cancelled') THEN
        RAISE EXCEPTION 'campaign %: it is %; only a completed or cancelled campaign is archived', NEW.campaign_id, coalesce(replace(st, '_', ' '), 'missing')
            USING ERRCODE = 'OP002';
    END IF;
    SELECT e.state INTO open_state FROM plan p JOIN effect e ON e.plan_id = p.id
    WHERE p.campaign_id = NEW.campaign_id AND e.state IN ('pending', 'unknown') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'campaign %: it still has % attempts; they are settled or resolved before it is archived', NEW.campaign_id, open_state
            USING ERRCODE = 'OP002';
    END IF;
    NEW.archived_at := now();
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END $$;
CREATE TRIGGER campaign_archive_insert BEFORE INSERT ON campaign_archive
    FOR EACH ROW EXECUTE FUNCTION campaign_archive_insert();
CREATE TRIGGER campaign_archive_write_once BEFORE UPDATE OR DELETE ON campaign_archive
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER campaign_archive_no_truncate BEFORE TRUNCATE ON campaign_archive
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- An archived campaign never runs again: its state, plan and version are
-- final (an attempt starts only while its campaign runs its plan:
-- effect_insert_gate).
CREATE FUNCTION campaign_archived_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.state, NEW.plan_id, NEW.version) IS DISTINCT FROM (OLD.state, OLD.plan_id, OLD.version)
       AND EXISTS (SELECT 1 FROM campaign_archive a WHERE a.campaign_id = OLD.id) THEN
        RAISE EXCEPTION 'campaign %: it is archived, and an archived campaign stays %', OLD.id, OLD.state
            USING ERRCODE = 'OP002';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER campaign_archived_final BEFORE UPDATE OF state, plan_id, version ON campaign
    FOR EACH ROW EXECUTE FUNCTION campaign_archived_final();

-- An attempt outside any plan on a key the archive holds is refused, as
-- the key's row in the hot table would have refused it.
CREATE FUNCTION effect_archived_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM effect_archive a WHERE a.key = NEW.key) THEN
        RAISE EXCEPTION 'effect refused: key % belongs to an archived campaign', NEW.key
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER effect_archived_key BEFORE INSERT ON effect
    FOR EACH ROW WHEN (NEW.plan_id IS NULL) EXECUTE FUNCTION effect_archived_key();

-- Rows leave the hot tables only into the archive, in the transaction that
-- archives their campaign; every other DELETE is refused, to every role.
CREATE FUNCTION onceplan_archive_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM campaign_archive a WHERE a.txid = pg_current_xact_id()) THEN
        RAISE EXCEPTION 'DELETE on % refused: rows are write-once, and leave the ledger only into its archive (onceplan archive)', TG_TABLE_NAME
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NULL;
END $$;

-- And an attempt leaves only with its campaign.
CREATE FUNCTION effect_archive_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    stray bigint;
BEGIN
    SELECT g.id INTO stray FROM gone g
    WHERE g.plan_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM plan p JOIN campaign_archive a ON a.campaign_id = p.campaign_id
        WHERE p.id = g.plan_id AND a.txid = pg_current_xact_id())
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'DELETE on effect refused: attempt % is not of a campaign archived in this transaction', stray
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER effect_no_delete ON effect;
CREATE TRIGGER effect_archive_only AFTER DELETE ON effect
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION effect_archive_only();
CREATE TRIGGER effect_no_delete BEFORE DELETE ON effect
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_archive_only();

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['effect_response', 'effect_batch', 'effect_batch_member', 'effect_batch_response'] LOOP
        EXECUTE format('DROP TRIGGER %I ON %I', t || '_write_once', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE ON %I FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change()', t || '_write_once', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE DELETE ON %I FOR EACH STATEMENT EXECUTE FUNCTION onceplan_archive_only()', t || '_no_delete', t);
    END LOOP;
END $$;

-- An inbound event names the attempt it is about, in the hot table or the
-- archive (a bounce may come after its campaign was archived).
ALTER TABLE inbound_event DROP CONSTRAINT inbound_event_effect_id_fkey;
CREATE FUNCTION inbound_event_effect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM effect e WHERE e.id = NEW.effect_id)
       AND NOT EXISTS (SELECT 1 FROM effect_archive a WHERE a.id = NEW.effect_id) THEN
        RAISE EXCEPTION 'inbound event refused: no attempt % in the ledger', NEW.effect_id
            USING ERRCODE = '23503';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER inbound_event_effect BEFORE INSERT ON inbound_event
    FOR EACH ROW WHEN (NEW.effect_id IS NOT NULL) EXECUTE FUNCTION inbound_event_effect();

-- archive_campaign moves campaign's attempts, their raw answers and their
-- batch calls into the archive, in the caller's transaction, and returns
-- its campaign_archive row. It runs as the tables' owner (the app role may
-- neither delete from the ledger nor write the archive). Each DELETE
-- returns the rows as they are when it takes them, and the counts it moved
-- must be the counts taken under the campaign's lock: anything else is an
-- error, and the transaction moves nothing.
CREATE FUNCTION archive_campaign(campaign uuid, actor text) RETURNS campaign_archive
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
REVOKE ALL ON FUNCTION archive_campaign(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION archive_campaign(uuid, text) TO onceplan_app;

-- The archive's attempts, with effect_attempt()'s columns (migration
-- 0030). A campaign's attempts are all hot or all archived (its keys are
-- its own, and archive_campaign moves every plan of it), so a reader of one
-- campaign reads one of the two, never both.
CREATE FUNCTION effect_archived() RETURNS TABLE (
    id bigint, key text, epoch int, state effect_state, attempt int, owner text, job_id bigint,
    plan_id bigint, ordinal int, receipt text, reason text, failure text,
    resolved_by text, resolution text, revoked_by text, revoke_reason text,
    created_at timestamptz, updated_at timestamptz, settled_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT a.id, a.key, a.epoch, a.state, a.attempt, a.owner, a.job_id,
           a.plan_id, a.ordinal, a.receipt, a.reason, a.failure,
           a.resolved_by, a.resolution, a.revoked_by, a.revoke_reason,
           a.created_at, a.updated_at, a.settled_at
    FROM effect_archive a
$$;

-- The app role reads the archive; only archive_campaign writes it (the
-- schema's default privileges grant INSERT on every new table).
REVOKE INSERT ON effect_archive, effect_response_archive, effect_batch_archive,
    effect_batch_member_archive, effect_batch_response_archive, campaign_archive FROM onceplan_app;
GRANT SELECT ON effect_archive, effect_response_archive, effect_batch_archive,
    effect_batch_member_archive, effect_batch_response_archive, campaign_archive TO onceplan_app;
