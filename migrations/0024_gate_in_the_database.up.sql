-- What decides whether someone is mailed is decided by PostgreSQL on the
-- row that records it, for every role and snapshot (docs/ARCHITECTURE.md,
-- "The gate"):
--
--   * an attempt at a plan's target (effect with plan_id) is accepted only
--     while its campaign runs that plan and the target's address is not
--     suppressed;
--   * a suppressed outcome (target_suppressed) only cites an entry in
--     force for the target's own address;
--   * an address is taken off the list (suppression_removal) by the
--     schema's owner, or in the name of an enabled admin.
--
-- Each check reads the latest committed rows, after a lock that every
-- change of what it reads takes too, so nothing slips between the read
-- and the insert:
--
--   * an attempt is written under the ROW EXCLUSIVE lock every writer of
--     effect holds until it commits (PostgreSQL's own, at no extra cost);
--     a campaign leaving "running" (or its plan) takes SHARE on effect in
--     campaign_update: it waits for the writes in flight, and the writes
--     after it wait for its commit and then see it. A transition is a
--     person's act or a campaign's end: rare, and over in milliseconds;
--   * a suppressed outcome holds a shared advisory lock on its address; a
--     removal takes it exclusively (the lock suppression.Remove already
--     took by hand, now taken by PostgreSQL for every writer).
--
-- The attempts' check runs once per statement, over the rows the
-- statement inserted (a transition table): a claim batch of a hundred rows
-- pays one query, not a hundred. A lock of the campaign's row per claim
-- would write to that row (the per-claim write migration 0023 took away
-- for the plan's row), and an advisory lock per claim cost a quarter of
-- the executor's throughput at 100 workers (docs/BENCHMARKS.md).
-- "The latest committed rows" holds at READ COMMITTED, where each query
-- of a trigger takes a fresh snapshot; at REPEATABLE READ and SERIALIZABLE
-- the snapshot is the transaction's first, which could be older than a
-- pause or an unsubscribe. The server runs every session at READ
-- COMMITTED (internal/app), so these rows are refused at the other levels.

-- The one statement of "the address is suppressed now": the id of its
-- oldest entry without a removal, NULL when none (package suppression
-- reads it through suppression.ActiveIDSQL).
CREATE FUNCTION onceplan_suppressed(addr text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT min(s.id + 0) FROM suppression s
    WHERE s.address = addr
      AND NOT EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = s.id OFFSET 0)
$$;

-- The advisory lock key of an address's suppression (the key
-- suppression.Remove has used).
CREATE FUNCTION onceplan_suppression_lock_key(addr text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('onceplan-suppression:' || addr, 0) $$;

-- Refuses, with OP008, a row whose check needs the latest committed rows
-- in a transaction that cannot see them.
CREATE FUNCTION onceplan_require_read_committed(what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '% is recorded at READ COMMITTED only, where its check reads the campaign and the suppression list as they are now (this transaction is %)',
            what, current_setting('transaction_isolation')
            USING ERRCODE = 'OP008';
    END IF;
END
$$;

-- An attempt starts pending, without an outcome, and names both its plan
-- and its target's ordinal or neither; the database's clock stamps it.
-- Plain expressions only: the checks that read tables run once per
-- statement (effect_insert_gate).
CREATE OR REPLACE FUNCTION effect_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> 'pending' THEN
        RAISE EXCEPTION 'an effect starts as pending, not %', NEW.state
            USING ERRCODE = 'OP002';
    END IF;
    IF NEW.receipt IS NOT NULL OR NEW.reason IS NOT NULL OR NEW.resolved_by IS NOT NULL
       OR NEW.resolution IS NOT NULL OR NEW.revoked_by IS NOT NULL OR NEW.revoke_reason IS NOT NULL
       OR NEW.settled_at IS NOT NULL OR NEW.failure IS NOT NULL THEN
        RAISE EXCEPTION 'a new pending effect carries no outcome'
            USING ERRCODE = 'OP004';
    END IF;
    IF (NEW.plan_id IS NULL) <> (NEW.ordinal IS NULL) THEN
        RAISE EXCEPTION 'an effect names both its plan and its target''s ordinal, or neither'
            USING ERRCODE = 'OP004';
    END IF;
    NEW.created_at := now();
    NEW.updated_at := NEW.created_at;
    RETURN NEW;
END
$$;

-- The attempts a statement made for plan targets: each has its target's
-- key (OP007), its campaign runs that plan, and its address has no
-- suppression in force (OP008), read after the statement's lock on effect
-- (see above). The suppression test is onceplan_suppressed's, written out
-- so that it is planned with the rest. Index probes per row; the
-- function's cached plan must never scan a table (see 0010).
CREATE FUNCTION effect_insert_gate() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_attempts n WHERE n.plan_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    SELECT n.key, n.plan_id, n.ordinal, t.target AS address, t.key IS NULL AS wrong_key,
           c.state, c.plan_id IS NOT DISTINCT FROM n.plan_id AS current,
           (SELECT min(s.id + 0) FROM suppression s
            WHERE s.address = t.target
              AND NOT EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = s.id OFFSET 0)) AS held
    INTO bad
    FROM new_attempts n
    LEFT JOIN plan p ON p.id = n.plan_id
    LEFT JOIN target t ON t.list_id = p.list_id AND t.ordinal = n.ordinal AND t.key = n.key
    LEFT JOIN campaign c ON c.id = p.campaign_id
    WHERE n.plan_id IS NOT NULL
      AND (t.key IS NULL OR c.state <> 'running' OR c.plan_id IS DISTINCT FROM n.plan_id
           OR EXISTS (SELECT 1 FROM suppression s WHERE s.address = t.target
                      AND NOT EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = s.id OFFSET 0)))
    ORDER BY (t.key IS NULL) DESC
    LIMIT 1;
    IF FOUND AND bad.wrong_key THEN
        RAISE EXCEPTION 'effect refused: % is not the key of target #% of plan %', bad.key, bad.ordinal, bad.plan_id
            USING ERRCODE = 'OP007';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM onceplan_require_read_committed('an attempt at a plan''s target');
    END IF;
    IF FOUND AND (bad.state <> 'running' OR NOT bad.current) THEN
        RAISE EXCEPTION 'effect refused: target #% of plan % is not sent while its campaign is % (an attempt starts only while the campaign runs that plan)',
            bad.ordinal, bad.plan_id, CASE WHEN bad.current THEN bad.state::text ELSE 'running another plan' END
            USING ERRCODE = 'OP008';
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'effect refused: target #% of plan % is %, which is on the suppression list (entry %)',
            bad.ordinal, bad.plan_id, bad.address, bad.held
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NULL;
END
$$;
ALTER FUNCTION effect_insert_gate() SET enable_seqscan = off;
CREATE TRIGGER effect_insert_gate AFTER INSERT ON effect
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION effect_insert_gate();

-- A campaign leaving "running" waits for the ledger's writes in flight
-- and holds the next ones until it commits (SHARE on effect). The server's
-- role may not lock effect itself (LOCK TABLE needs table-wide UPDATE), so
-- the lock is taken with the owner's rights, by this function alone.
CREATE FUNCTION onceplan_close_gate() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    LOCK TABLE effect IN SHARE MODE;
END
$$;
REVOKE EXECUTE ON FUNCTION onceplan_close_gate() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION onceplan_close_gate() TO onceplan_app;

-- Whether a failed attempt is final, said when it fails: "rejected" (the
-- provider refused it for good: nothing retries it), "retry" (nothing was
-- done and the target is to be sent again: a temporary failure with
-- retries left, a probe that found nothing, a person's "not delivered"),
-- "exhausted" (a temporary failure with no retries left), "quota" (the
-- provider said "over quota": its queue pauses, and the target is sent
-- again after it, using up none of its attempts). The audit holds
-- with rejected targets only. Attempts that failed before this column are
-- NULL: the audit says it cannot tell.
ALTER TABLE effect ADD COLUMN failure text CHECK (failure IN ('rejected', 'retry', 'exhausted', 'quota'));
GRANT UPDATE (failure) ON effect TO onceplan_app;

CREATE OR REPLACE FUNCTION effect_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.key <> OLD.key OR NEW.epoch <> OLD.epoch
       OR NEW.attempt <> OLD.attempt OR NEW.owner <> OLD.owner
       OR NEW.job_id IS DISTINCT FROM OLD.job_id OR NEW.plan_id IS DISTINCT FROM OLD.plan_id
       OR NEW.ordinal IS DISTINCT FROM OLD.ordinal OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'effect %: key, epoch, attempt, owner, job, plan target and creation time never change', OLD.id
            USING ERRCODE = 'OP003';
    END IF;
    IF (OLD.receipt IS NOT NULL AND NEW.receipt IS DISTINCT FROM OLD.receipt)
       OR (OLD.reason IS NOT NULL AND NEW.reason IS DISTINCT FROM OLD.reason)
       OR (OLD.resolved_by IS NOT NULL AND NEW.resolved_by IS DISTINCT FROM OLD.resolved_by)
       OR (OLD.resolution IS NOT NULL AND NEW.resolution IS DISTINCT FROM OLD.resolution)
       OR (OLD.revoked_by IS NOT NULL AND NEW.revoked_by IS DISTINCT FROM OLD.revoked_by)
       OR (OLD.revoke_reason IS NOT NULL AND NEW.revoke_reason IS DISTINCT FROM OLD.revoke_reason)
       OR (OLD.settled_at IS NOT NULL AND NEW.settled_at IS DISTINCT FROM OLD.settled_at)
       OR (OLD.failure IS NOT NULL AND NEW.failure IS DISTINCT FROM OLD.failure) THEN
        RAISE EXCEPTION 'effect %: an outcome, once written, never changes', OLD.id
            USING ERRCODE = 'OP001';
    END IF;

    IF NEW.state = OLD.state THEN
        RAISE EXCEPTION 'effect % is already %', OLD.id, OLD.state
            USING ERRCODE = 'OP002';
    END IF;

    IF NOT (
        (OLD.state = 'pending' AND NEW.state IN ('done', 'failed', 'unknown', 'stranded'))
        OR (OLD.state = 'unknown' AND NEW.state IN ('done', 'failed'))
        OR (OLD.state IN ('done', 'stranded') AND NEW.state = 'revoked')
    ) THEN
        RAISE EXCEPTION 'effect %: % -> % is not a legal transition', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'OP002';
    END IF;
    IF (NEW.state = 'failed') <> (NEW.failure IS NOT NULL) THEN
        RAISE EXCEPTION 'effect %: a failed attempt, and only a failed one, says whether it is final (rejected, retry, exhausted or quota)', OLD.id
            USING ERRCODE = 'OP004';
    END IF;

    CASE
    WHEN OLD.state = 'pending' THEN
        -- The worker settles from a provider answer that is already committed.
        IF NEW.state IN ('done', 'failed', 'stranded')
           AND NOT EXISTS (SELECT 1 FROM effect_response r WHERE r.effect_id = OLD.id) THEN
            RAISE EXCEPTION 'effect %: settling as % needs the raw provider response recorded first', OLD.id, NEW.state
                USING ERRCODE = 'OP004';
        END IF;
        IF NEW.state = 'done' AND NEW.receipt IS NULL THEN
            RAISE EXCEPTION 'effect %: done needs a receipt', OLD.id USING ERRCODE = 'OP004';
        END IF;
        IF NEW.state IN ('failed', 'unknown', 'stranded') AND NEW.reason IS NULL THEN
            RAISE EXCEPTION 'effect %: % needs a reason', OLD.id, NEW.state USING ERRCODE = 'OP004';
        END IF;
        NEW.settled_at := now();
    WHEN OLD.state = 'unknown' THEN
        -- Only a probe's recorded answer or a named human settles an unknown.
        IF NEW.resolved_by IS NULL OR NEW.resolution IS NULL THEN
            RAISE EXCEPTION 'effect %: an unknown is settled only by a named resolver with a reason', OLD.id
                USING ERRCODE = 'OP004';
        END IF;
        NEW.settled_at := now();
    ELSE
        IF NEW.revoked_by IS NULL OR NEW.revoke_reason IS NULL THEN
            RAISE EXCEPTION 'effect %: a revocation needs who and why', OLD.id
                USING ERRCODE = 'OP004';
        END IF;
    END CASE;

    NEW.updated_at := now();
    RETURN NEW;
END
$$;
ALTER FUNCTION effect_update() SET enable_seqscan = off;

-- The campaign (0014's rules, unchanged), and: leaving "running", or the
-- plan it runs, waits for the ledger's writes in flight and holds new ones
-- back until it commits (onceplan_close_gate).
CREATE OR REPLACE FUNCTION campaign_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_version integer;
    new_version integer;
BEGIN
    IF NEW.id <> OLD.id OR NEW.created_by <> OLD.created_by OR NEW.created_at <> OLD.created_at
       OR NEW.provider <> OLD.provider OR NEW.tool <> OLD.tool
       OR NEW.scheduled_at IS DISTINCT FROM OLD.scheduled_at OR NEW.start_on_approval <> OLD.start_on_approval
       OR NEW.required_approvals <> OLD.required_approvals OR NEW.created_by_agent <> OLD.created_by_agent THEN
        RAISE EXCEPTION 'campaign %: only its name, state, version and plan change', OLD.id USING ERRCODE = 'OP003';
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
    IF OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.plan_id IS DISTINCT FROM OLD.plan_id) THEN
        PERFORM onceplan_close_gate();
    END IF;
    IF NEW.plan_id IS DISTINCT FROM OLD.plan_id THEN
        SELECT version INTO new_version FROM plan WHERE id = NEW.plan_id;
        SELECT version INTO old_version FROM plan WHERE id = OLD.plan_id;
        IF new_version IS NULL OR new_version <= coalesce(old_version, 0) THEN
            RAISE EXCEPTION 'campaign %: its plan only ever moves to a newer plan of its own', OLD.id
                USING ERRCODE = 'OP007';
        END IF;
    END IF;
    IF NEW.state <> OLD.state AND NEW.state = 'approved'
       AND NOT EXISTS (SELECT 1 FROM plan WHERE id = NEW.plan_id AND version = NEW.version) THEN
        RAISE EXCEPTION 'campaign %: approved needs the frozen plan of version %', OLD.id, NEW.version
            USING ERRCODE = 'OP007';
    END IF;
    IF NEW.state <> OLD.state AND NEW.state = 'running'
       AND NOT EXISTS (SELECT 1 FROM run WHERE plan_id = NEW.plan_id) THEN
        RAISE EXCEPTION 'campaign %: running needs a recorded start of its plan', OLD.id
            USING ERRCODE = 'OP007';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

-- A suppressed outcome names its plan's own target with that target's key
-- (OP007), and cites an entry in force for that target's address (OP008),
-- read after the address's lock, which a removal takes too.
CREATE OR REPLACE FUNCTION onceplan_target_suppressed_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    addr text;
BEGIN
    SELECT t.target INTO addr FROM plan p JOIN target t ON t.list_id = p.list_id
    WHERE p.id = NEW.plan_id AND t.ordinal = NEW.ordinal AND t.key = NEW.key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a suppressed outcome must name its plan''s target with its key'
            USING ERRCODE = 'OP007';
    END IF;
    PERFORM onceplan_require_read_committed('a suppressed outcome');
    PERFORM pg_advisory_xact_lock_shared(onceplan_suppression_lock_key(addr));
    IF NOT EXISTS (SELECT 1 FROM suppression s WHERE s.id = NEW.suppression_id AND s.address = addr)
       OR EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = NEW.suppression_id) THEN
        RAISE EXCEPTION 'a suppressed outcome for target #% of plan % must cite an entry in force for its own address, %: entry % is not one',
            NEW.ordinal, NEW.plan_id, addr, NEW.suppression_id
            USING ERRCODE = 'OP008';
    END IF;
    RETURN NEW;
END $$;

-- A removal waits for the suppressed outcomes of its address in flight,
-- and names who took the address off: the schema's owner may write any
-- name (the command line's account), the server only an enabled admin.
CREATE FUNCTION onceplan_suppression_removal_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    addr text;
BEGIN
    SELECT s.address INTO addr FROM suppression s WHERE s.id = NEW.suppression_id;
    IF FOUND THEN
        PERFORM pg_advisory_xact_lock(onceplan_suppression_lock_key(addr));
    END IF;
    IF NOT pg_has_role(current_user, 'onceplan_owner', 'USAGE')
       AND NOT EXISTS (SELECT 1 FROM app_user u WHERE u.email = NEW.actor AND u.disabled_at IS NULL AND 'admin' = ANY (u.roles)) THEN
        RAISE EXCEPTION 'an address is taken off the suppression list in the name of an enabled admin, and % is not one', NEW.actor
            USING ERRCODE = 'OP006';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER suppression_removal_insert BEFORE INSERT ON suppression_removal
    FOR EACH ROW EXECUTE FUNCTION onceplan_suppression_removal_insert();
