DROP TRIGGER effect_insert_gate ON effect;
DROP FUNCTION effect_insert_gate();
DROP TRIGGER suppression_removal_insert ON suppression_removal;
DROP FUNCTION onceplan_suppression_removal_insert();

CREATE OR REPLACE FUNCTION onceplan_target_suppressed_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id
                   WHERE p.id = NEW.plan_id AND t.ordinal = NEW.ordinal AND t.key = NEW.key) THEN
        RAISE EXCEPTION 'a suppressed outcome must name its plan''s target with its key'
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END $$;

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
    IF (NEW.plan_id IS NULL) <> (NEW.ordinal IS NULL) THEN
        RAISE EXCEPTION 'an effect names both its plan and its target''s ordinal, or neither'
            USING ERRCODE = 'OP004';
    END IF;
    IF NEW.plan_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM plan p JOIN target t ON t.list_id = p.list_id AND t.ordinal = NEW.ordinal
        WHERE p.id = NEW.plan_id AND t.key = NEW.key) THEN
        RAISE EXCEPTION 'effect refused: % is not the key of target #% of plan %', NEW.key, NEW.ordinal, NEW.plan_id
            USING ERRCODE = 'OP007';
    END IF;
    NEW.created_at := now();
    NEW.updated_at := NEW.created_at;
    RETURN NEW;
END
$$;
ALTER FUNCTION effect_insert() SET enable_seqscan = off;

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
       OR (OLD.settled_at IS NOT NULL AND NEW.settled_at IS DISTINCT FROM OLD.settled_at) THEN
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

ALTER TABLE effect DROP COLUMN failure;
DROP FUNCTION onceplan_close_gate();
DROP FUNCTION onceplan_require_read_committed(text);
DROP FUNCTION onceplan_suppression_lock_key(text);
DROP FUNCTION onceplan_suppressed(text);
