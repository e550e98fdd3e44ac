-- Two rows the server's role could write to hold the system for ever
-- (docs/ARCHITECTURE.md, "The archive" and "Rate limits shared across
-- processes"), closed where the rows are written.
--
-- 1. The shared provider pace (migration 0031). The role could insert or
--    move a provider's latest turn anywhere ahead (two hours: every process
--    waits; 'infinity': every take fails for good). It now writes the table
--    only through provider_pace_take, which runs as the owner, refuses
--    arguments no process sends, and repairs a turn that no take could have
--    given.
--
-- 2. The archive (migrations 0034, 0035) took campaign.state's word that a
--    campaign was finished: the role could mark a running campaign
--    completed and archive it with targets never sent. A completed campaign
--    is archived only when its ledger says nothing is left to send. And one
--    attempt outside any plan on a campaign's key, which the role may write,
--    kept the campaign from being archived for ever: such attempts now move
--    to the archive with the campaign whose key they hold.

-- The pace's horizon: the furthest ahead of now a turn is ever given, and
-- the longest interval between two turns. internal/provider states both
-- once (MaxPaceWait, the longest a caller waits for its turn, and
-- MaxRateInterval, the slowest rate= it takes: one call an hour);
-- migrations' TestPaceHorizonIsTheDatabases keeps them equal to this.
CREATE FUNCTION provider_pace_horizon() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT interval '1 hour' $$;

-- A turn is moved back only when it lies beyond any turn a take could
-- have given: more than the horizon after the turn that replaces it (a
-- take's repair, below, replaces it with now). Nothing else moves one back.
CREATE OR REPLACE FUNCTION provider_pace_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        RAISE EXCEPTION 'provider_pace: a row''s provider is not changed'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.last_at < OLD.last_at AND NOT OLD.last_at > NEW.last_at + provider_pace_horizon() THEN
        RAISE EXCEPTION 'provider_pace: turn of % moved back from % to %', OLD.name, OLD.last_at, NEW.last_at
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- provider_pace_take as migration 0031 wrote it, run as the table's owner
-- (the server's role may no longer write the table itself), with every
-- argument bounded by the horizon, and a repair: a latest turn beyond now +
-- the horizon (a take waits at most the horizon, so none gave it; an older
-- database may hold one, or 'infinity') is taken as no turn at all, and the
-- next turn is now.
CREATE OR REPLACE FUNCTION provider_pace_take(name text, every_us bigint, max_wait_us bigint,
                                              OUT taken boolean, OUT wait_us bigint, OUT at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    last timestamptz;
    now_ timestamptz;
    horizon_us constant bigint := (extract(epoch FROM provider_pace_horizon()) * 1e6)::bigint;
BEGIN
    IF every_us IS NULL OR every_us <= 0 OR every_us > horizon_us THEN
        RAISE EXCEPTION 'provider_pace_take: every_us is %; it is 1 to % (one turn an hour, the slowest rate)', every_us, horizon_us
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_wait_us IS NULL OR max_wait_us < 0 OR max_wait_us > horizon_us THEN
        RAISE EXCEPTION 'provider_pace_take: max_wait_us is %; it is 0 to % (an hour, the longest wait for a turn)', max_wait_us, horizon_us
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO provider_pace AS p (name, last_at) VALUES (provider_pace_take.name, '-infinity')
        ON CONFLICT ON CONSTRAINT provider_pace_pkey DO NOTHING;
        SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    END IF;
    now_ := clock_timestamp(); -- after the lock: the turn is measured from when it is given
    IF last > now_ + provider_pace_horizon() THEN
        RAISE WARNING 'provider_pace: the latest turn of % was %, beyond any a take gives; its schedule starts again now', provider_pace_take.name, last;
        last := '-infinity';
    END IF;
    at := greatest(last + make_interval(secs => every_us / 1e6), now_);
    wait_us := floor(extract(epoch FROM at - now_) * 1e6)::bigint;
    taken := wait_us <= max_wait_us;
    IF taken THEN
        UPDATE provider_pace p SET last_at = at WHERE p.name = provider_pace_take.name;
    END IF;
END $$;

-- Pinned to the schema Onceplan is migrated into, temporary objects last:
-- the function runs with the owner's rights, so no name in it may resolve
-- to a caller's object.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION provider_pace_take(text, bigint, bigint) SET search_path = %I, pg_temp', current_schema());
END $$;

REVOKE INSERT, UPDATE ON provider_pace FROM onceplan_app;
REVOKE ALL ON FUNCTION provider_pace_take(text, bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION provider_pace_take(text, bigint, bigint) TO onceplan_app;

-- target_open lists the targets of plan that nothing has settled for good
-- at their key's current epoch: what a resume of the campaign would still
-- send, and so what keeps a completed campaign from being archived. A
-- target is settled for good when
--   * an attempt holds its key at the current epoch (effect_blocks: done,
--     stranded, or pending or unknown — which the archive refuses on their
--     own — whoever made it: the campaign sends nothing on a held key);
--   * or the claim recorded it suppressed for the plan (target_suppressed_in);
--   * or the campaign's newest attempt at that epoch is final: failed
--     rejected or exhausted (nothing retries it: migration 0024's failure),
--     or revoked by a person.
-- A target never tried, one failed to be sent again (retry, quota, a
-- person's "not delivered", or from before failures said: NULL), and one
-- bumped since and not tried at its new epoch are open. Each rule is the
-- ledger's or the plan's, as the enqueuer asks them (jobs' notBlocked).
CREATE FUNCTION target_open(plan bigint) RETURNS TABLE (ordinal int, target text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT t.ordinal, t.target
    FROM frozen_plan() p
    JOIN list_target() t ON t.list_id = p.list_id
    CROSS JOIN LATERAL effect_current_epoch(t.key) cur
    WHERE p.id = target_open.plan
      AND NOT EXISTS (SELECT 1 FROM effect_attempt() f
                      WHERE f.key = t.key AND f.epoch = cur.epoch AND effect_blocks(f.state))
      AND NOT EXISTS (SELECT 1 FROM target_suppressed_in(target_open.plan) ts WHERE ts.ordinal = t.ordinal)
      AND NOT EXISTS (
          SELECT 1 FROM (SELECT f.state, f.failure FROM effect_attempt() f
                         WHERE f.key = t.key AND f.epoch = cur.epoch
                           AND f.plan_id IN (SELECT o.id FROM frozen_plan() o WHERE o.campaign_id = p.campaign_id)
                         ORDER BY f.id DESC LIMIT 1) newest
          WHERE newest.state = 'revoked' OR (newest.state = 'failed' AND newest.failure IN ('rejected', 'exhausted')))
$$;

-- A campaign is archived once it is finished, and the ledger says whether
-- it is: a cancelled campaign never runs again, and a completed one is
-- finished only when no target of its plan is open (target_open) — a
-- completed campaign may still be resumed, and what an archived one did
-- not send is never sent. Nothing of its plans is pending or unknown
-- (recovery and people still act on those). Every check reads the rows
-- committed before it, after the campaign's row lock and the archive's
-- own (archive_campaign): so only at READ COMMITTED, where each query
-- takes a fresh snapshot; an older snapshot could miss a bump or a resume
-- committed just before.
CREATE OR REPLACE FUNCTION campaign_archive_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    running_plan bigint;
    open_state effect_state;
    open_count bigint;
    open_first text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'campaign %: a campaign is archived at READ COMMITTED only, where every check reads the latest rows (this transaction is %)', NEW.campaign_id, upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'OP002';
    END IF;
    SELECT c.state, c.plan_id INTO st, running_plan FROM campaign c WHERE c.id = NEW.campaign_id FOR UPDATE;
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
    IF st = 'completed' THEN
        SELECT count(*), (array_agg(o.target ORDER BY o.ordinal))[1] INTO open_count, open_first FROM target_open(running_plan) o;
        IF open_count > 0 THEN
            RAISE EXCEPTION 'campaign %: it is completed, but % of its targets (% among them) % nothing final yet (never tried, to be sent again, or bumped since); resume it to send them, and archive it once it completes',
                NEW.campaign_id, open_count, open_first, CASE WHEN open_count = 1 THEN 'has' ELSE 'have' END
                USING ERRCODE = 'OP002';
        END IF;
    END IF;
    NEW.archived_at := now();
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END $$;

-- An attempt leaves the hot table only with its campaign: one of a plan of
-- a campaign archived in this transaction, or one outside any plan on such
-- a campaign's key (a campaign's keys are its own: plan.TargetKey).
CREATE OR REPLACE FUNCTION effect_archive_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    stray bigint;
BEGIN
    SELECT g.id INTO stray FROM gone g
    WHERE NOT EXISTS (
        SELECT 1 FROM campaign_archive a JOIN plan p ON p.campaign_id = a.campaign_id
        WHERE a.txid = pg_current_xact_id()
          AND (p.id = g.plan_id
               OR (g.plan_id IS NULL AND EXISTS (SELECT 1 FROM target t WHERE t.list_id = p.list_id AND t.key = g.key))))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'DELETE on effect refused: attempt % is not of a campaign archived in this transaction', stray
            USING ERRCODE = 'OP001';
    END IF;
    RETURN NULL;
END $$;

-- archive_campaign as migration 0035 wrote it, moving besides the
-- campaign's attempts those outside any plan on its keys, with their raw
-- answers, where it refused the campaign: the audit counts such an attempt
-- as "outside the plan" for its target, and reads it from the archive as it
-- did from the hot table. A tool call's attempt is not moved (its
-- tool_attempt and its trail point at it): only a call begun before single
-- effects had a key space of their own (migration 0026) can hold a
-- campaign's key, none can begin on a frozen plan's, and a campaign such a
-- call holds is refused, naming the key.
CREATE OR REPLACE FUNCTION archive_campaign(campaign uuid, actor text) RETURNS campaign_archive
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    plans bigint[];
    want campaign_archive;
    n bigint;
    tool_key text;
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

    CREATE TEMP TABLE archiving_effect (id bigint PRIMARY KEY) ON COMMIT DROP;
    CREATE TEMP TABLE archiving_batch (id bigint PRIMARY KEY) ON COMMIT DROP;
    CREATE TEMP TABLE archiving_key (key text PRIMARY KEY) ON COMMIT DROP;
    INSERT INTO archiving_effect SELECT e.id FROM effect e WHERE e.plan_id = ANY (plans);
    -- A campaign's keys are its own, and so are the attempts at them: those
    -- outside any plan go with it (the partial index effect_outside_plan).
    INSERT INTO archiving_effect SELECT DISTINCT e.id FROM plan p JOIN target t ON t.list_id = p.list_id
        JOIN effect e ON e.key = t.key AND e.plan_id IS NULL WHERE p.id = ANY (plans)
    ON CONFLICT DO NOTHING;
    SELECT e.key INTO tool_key FROM archiving_effect x JOIN effect e ON e.id = x.id
        JOIN tool_attempt a ON a.effect_id = e.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'campaign %: the key % of one of its targets is held by a tool call begun before single effects had a key space of their own; that call''s record would be cut from its attempt', campaign, tool_key
            USING ERRCODE = 'OP002';
    END IF;
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
    IF n <> want.attempts OR EXISTS (SELECT 1 FROM effect e WHERE e.plan_id = ANY (plans))
       OR EXISTS (SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id
                  JOIN effect e ON e.key = t.key AND e.plan_id IS NULL WHERE p.id = ANY (plans)) THEN
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
