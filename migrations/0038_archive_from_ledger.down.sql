-- Back to migrations 0031, 0034 and 0035. Attempts outside any plan that
-- moved to the archive with their campaign stay there (the archive is
-- write-once); migration 0034's down puts every archived row back.

REVOKE EXECUTE ON FUNCTION provider_pace_take(text, bigint, bigint) FROM onceplan_app;
GRANT EXECUTE ON FUNCTION provider_pace_take(text, bigint, bigint) TO PUBLIC;
GRANT INSERT, UPDATE ON provider_pace TO onceplan_app;
ALTER FUNCTION provider_pace_take(text, bigint, bigint) SECURITY INVOKER;
ALTER FUNCTION provider_pace_take(text, bigint, bigint) RESET search_path;
CREATE OR REPLACE FUNCTION provider_pace_take(name text, every_us bigint, max_wait_us bigint,
                                   OUT taken boolean, OUT wait_us bigint, OUT at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    last timestamptz;
    now_ timestamptz;
BEGIN
    IF every_us IS NULL OR every_us <= 0 OR max_wait_us IS NULL OR max_wait_us < 0 THEN
        RAISE EXCEPTION 'provider_pace_take: every_us must be positive and max_wait_us not negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO provider_pace AS p (name, last_at) VALUES (provider_pace_take.name, '-infinity')
        ON CONFLICT ON CONSTRAINT provider_pace_pkey DO NOTHING;
        SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    END IF;
    now_ := clock_timestamp(); -- after the lock: the turn is measured from when it is given
    at := greatest(last + make_interval(secs => every_us / 1e6), now_);
    wait_us := floor(extract(epoch FROM at - now_) * 1e6)::bigint;
    taken := wait_us <= max_wait_us;
    IF taken THEN
        UPDATE provider_pace p SET last_at = at WHERE p.name = provider_pace_take.name;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION provider_pace_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        RAISE EXCEPTION 'provider_pace: a row''s provider is not changed'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.last_at < OLD.last_at THEN
        RAISE EXCEPTION 'provider_pace: turn of % moved back from % to %', OLD.name, OLD.last_at, NEW.last_at
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
DROP FUNCTION provider_pace_horizon();

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

CREATE OR REPLACE FUNCTION effect_archive_only() RETURNS trigger
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

CREATE OR REPLACE FUNCTION campaign_archive_insert() RETURNS trigger
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

DROP FUNCTION target_open(bigint);
