-- What the server never legitimately does, PostgreSQL refuses to the role
-- it runs as (docs/ARCHITECTURE.md, "The guarantee against the server's
-- own role"), whatever the isolation level, the age of the snapshot or the
-- order of the statements. An adversarial review connected as onceplan_app
-- found five ways around rules 4-6; each
-- is closed here by a constraint, a privilege or a lock, never by a
-- snapshot read deciding alone:
--
--   1. a target added to a frozen list      -> rows only from the list's own transaction
--   2. a frozen target deleted (old snapshot) -> no DELETE on target; a list goes whole, and
--                                               foreign keys (which see past snapshots) keep a planned list
--   3. self-approval by rewritten authorship -> authorship copied at submit into a write-once
--                                               submission, which the approval rule reads
--   4. a plan with no approval at all        -> a plan needs its submission and the quorum of
--                                               distinct non-author approvals of its exact hash
--   5. a bump policy registered by the server -> bump_policy is the owner's to write
--
-- and an attempt that counts for a plan is one made for that plan's target:
-- its key is the key of the target at its ordinal. What the role could still
-- forge (it is the server: it records human decisions and computes hashes),
-- the audit detects from the frozen rows (package audit: plan_intact).
--
-- SQLSTATE OP007: refused because it is not what was submitted or approved.

-- 1. A list's rows are written by the transaction that creates the list,
-- and by no other. Both tables remember that transaction: target_list the
-- one that inserted it, every target row the one that inserted the row,
-- and the foreign key makes them equal. onceplan_app may not write either
-- column, so its rows always carry their own transaction's id (the column
-- default): a row for a list made by any other transaction — committed an
-- hour ago, or visible to no snapshot at all — has no list to point at.
-- Lists made before this migration carry 0, which no transaction has.
-- Unlike a trigger, this costs the import nothing per row but the key
-- check it already paid.
ALTER TABLE target_list ADD COLUMN created_xact xid8 NOT NULL DEFAULT '0';
ALTER TABLE target_list ALTER COLUMN created_xact SET DEFAULT pg_current_xact_id();
ALTER TABLE target_list ADD CONSTRAINT target_list_written_once UNIQUE (id, created_xact);
-- Drafts, submissions and plans point at lists of their own campaign.
ALTER TABLE target_list ADD CONSTRAINT target_list_of_campaign UNIQUE (id, campaign_id);

ALTER TABLE target ADD COLUMN list_xact xid8 NOT NULL DEFAULT '0';
ALTER TABLE target ALTER COLUMN list_xact SET DEFAULT pg_current_xact_id();
ALTER TABLE target DROP CONSTRAINT target_list_id_fkey;
-- ON DELETE CASCADE: a list no draft or plan points at (a draft's list
-- that a newer import replaced) is deleted whole, by deleting its
-- target_list row; the application may not delete target rows itself.
ALTER TABLE target ADD CONSTRAINT target_of_list FOREIGN KEY (list_id, list_xact)
    REFERENCES target_list (id, created_xact) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;

-- A list's own row records the transaction for the owner too.
CREATE FUNCTION target_list_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.created_xact := pg_current_xact_id();
    NEW.created_at := now();
    RETURN NEW;
END
$$;
DROP TRIGGER target_list_created_at ON target_list;
CREATE TRIGGER target_list_insert BEFORE INSERT ON target_list
    FOR EACH ROW EXECUTE FUNCTION target_list_insert();

REVOKE INSERT, DELETE ON target FROM onceplan_app;
GRANT INSERT (list_id, ordinal, target, key, vars, line) ON target TO onceplan_app;
REVOKE INSERT ON target_list FROM onceplan_app;
GRANT INSERT (id, campaign_id, target_count, digest, created_by) ON target_list TO onceplan_app;

-- 2. A target row goes only with its list: deleting one from a list that
-- is still there (the owner's privilege) is refused. The list itself is
-- kept by the foreign keys of the drafts, submissions and plans that point
-- at it: PostgreSQL checks those against the latest committed rows, not
-- the deleting transaction's snapshot, so a plan frozen after an old
-- snapshot was taken still stops the delete. The trigger on target_list
-- (0002) only words the refusal.
CREATE OR REPLACE FUNCTION target_list_frozen_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'target' THEN
        IF EXISTS (SELECT 1 FROM target_list WHERE id = OLD.list_id) THEN
            RAISE EXCEPTION 'DELETE on target refused: a target goes only with its whole list (list %)', OLD.list_id
                USING ERRCODE = 'OP001';
        END IF;
        RETURN OLD;
    END IF;
    IF EXISTS (SELECT 1 FROM plan WHERE list_id = OLD.id) THEN
        RAISE EXCEPTION 'DELETE on target_list refused: list % belongs to a frozen plan', OLD.id
            USING ERRCODE = 'OP001';
    END IF;
    RETURN OLD;
END
$$;

-- 3. The submission: what was asked to be approved, and by whom, fixed at
-- submit. Authorship and the list are copied from the draft by the
-- trigger, under a lock, not taken from the statement; the row is
-- write-once. The approval rule reads this row, never the draft, so
-- rewriting a draft's authorship after the submit changes nothing (and
-- the draft refuses it anyway, below).
CREATE TABLE submission (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id    uuid NOT NULL REFERENCES campaign (id),
    version        integer NOT NULL,
    plan_hash      text NOT NULL CHECK (plan_hash ~ '^[0-9a-f]{64}$'),
    list_id        bigint NOT NULL,
    target_count   integer NOT NULL CHECK (target_count >= 1),
    proposed_by    bigint NOT NULL REFERENCES app_user (id),
    last_edited_by bigint NOT NULL REFERENCES app_user (id),
    submitted_by   bigint REFERENCES app_user (id), -- NULL: recorded by this migration for a draft already pending
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT submission_of_draft FOREIGN KEY (campaign_id, version) REFERENCES draft (campaign_id, version),
    CONSTRAINT submission_list FOREIGN KEY (list_id, campaign_id) REFERENCES target_list (id, campaign_id)
);

CREATE INDEX submission_latest ON submission (campaign_id, id);
CREATE INDEX submission_list ON submission (list_id);

-- Every transition into pending_approval is followed, in its transaction,
-- by the submission; the campaign's row lock orders submissions,
-- approvals and freezes of one campaign (an old snapshot that would miss a
-- newer submission fails on the lock instead: a row updated since the
-- snapshot cannot be locked under REPEATABLE READ).
CREATE FUNCTION submission_insert() RETURNS trigger
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

CREATE TRIGGER submission_insert BEFORE INSERT ON submission
    FOR EACH ROW EXECUTE FUNCTION submission_insert();
CREATE TRIGGER submission_write_once BEFORE UPDATE OR DELETE ON submission
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER submission_no_truncate BEFORE TRUNCATE ON submission
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- A draft's authorship never changes after it is written, and nothing of
-- a draft changes unless its campaign is a draft at that version: from the
-- submit on, the draft is what was submitted. The campaign row is locked
-- (the submit holds it for update), so an edit racing a submit waits for
-- it and then sees it, and an old snapshot fails instead of deciding.
CREATE FUNCTION draft_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NEW.campaign_id <> OLD.campaign_id OR NEW.version <> OLD.version
       OR NEW.proposed_by <> OLD.proposed_by OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'draft % of campaign %: campaign, version, proposer and creation time never change', OLD.version, OLD.campaign_id
            USING ERRCODE = 'OP003';
    END IF;
    SELECT state, version INTO c FROM campaign WHERE id = OLD.campaign_id FOR SHARE;
    IF c.state <> 'draft' OR c.version <> OLD.version THEN
        RAISE EXCEPTION 'draft % of campaign % cannot change: the campaign is % at version % (edit it, which starts a new draft)',
            OLD.version, OLD.campaign_id, c.state, c.version
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER draft_update BEFORE UPDATE ON draft
    FOR EACH ROW EXECUTE FUNCTION draft_update();
CREATE TRIGGER draft_no_delete BEFORE DELETE ON draft
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
ALTER TABLE draft ADD CONSTRAINT draft_list FOREIGN KEY (list_id, campaign_id) REFERENCES target_list (id, campaign_id);
REVOKE UPDATE ON draft FROM onceplan_app;
GRANT UPDATE (from_addr, subject, text_body, html_body, list_id, last_edited_by, updated_at) ON draft TO onceplan_app;

-- Approvals answer the campaign's latest submission, while it is pending:
-- same version, same hash, and nobody who proposed or last edited it as
-- submitted. The approval records which submission it answered.
ALTER TABLE approval ADD COLUMN submission_id bigint REFERENCES submission (id); -- NULL: given before submissions were recorded

CREATE OR REPLACE FUNCTION approval_not_self() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    s record;
BEGIN
    SELECT state, version INTO c FROM campaign WHERE id = NEW.campaign_id FOR SHARE;
    IF NOT FOUND OR c.state <> 'pending_approval' OR c.version <> NEW.version THEN
        RAISE EXCEPTION 'approval refused: campaign % is not pending approval of version %', NEW.campaign_id, NEW.version
            USING ERRCODE = 'OP007';
    END IF;
    SELECT id, version, plan_hash, proposed_by, last_edited_by INTO s FROM submission
    WHERE campaign_id = NEW.campaign_id ORDER BY id DESC LIMIT 1;
    IF NOT FOUND OR s.version <> NEW.version OR s.plan_hash <> NEW.plan_hash THEN
        RAISE EXCEPTION 'approval refused: version % with hash % is not what was submitted for approval', NEW.version, NEW.plan_hash
            USING ERRCODE = 'OP007';
    END IF;
    IF NEW.approver_id IN (s.proposed_by, s.last_edited_by) THEN
        RAISE EXCEPTION 'approval refused: user % proposed or last edited this draft', NEW.approver_id
            USING ERRCODE = 'OP006';
    END IF;
    NEW.submission_id := s.id;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

-- 4. A plan exists only as the answer to a submission: its campaign,
-- version, hash, list and size are the submission's, its proposer is the
-- submission's, and the campaign's quorum of distinct approvers — none of
-- them an author of the submission — approved exactly its hash. Checked at
-- commit, so it holds whatever order the transaction wrote things in.
-- Approvals and submissions are write-once, so a count can only grow: a
-- snapshot that misses some refuses, never admits; and the campaign's row
-- lock makes the latest submission the latest (see submission_insert).
CREATE FUNCTION plan_approved() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    need integer;
    got integer;
    s record;
BEGIN
    SELECT required_approvals INTO need FROM campaign WHERE id = NEW.campaign_id FOR SHARE;
    SELECT version, plan_hash, list_id, target_count, proposed_by, last_edited_by INTO s FROM submission
    WHERE campaign_id = NEW.campaign_id ORDER BY id DESC LIMIT 1;
    IF NOT FOUND OR s.version <> NEW.version OR s.plan_hash <> NEW.plan_hash THEN
        RAISE EXCEPTION 'plan % refused: version % of campaign % with hash % is not the campaign''s latest submission',
            NEW.id, NEW.version, NEW.campaign_id, NEW.plan_hash
            USING ERRCODE = 'OP007';
    END IF;
    IF NEW.list_id <> s.list_id OR NEW.target_count <> s.target_count OR NEW.proposed_by <> s.proposed_by THEN
        RAISE EXCEPTION 'plan % refused: its list, size or proposer is not what was submitted', NEW.id
            USING ERRCODE = 'OP007';
    END IF;
    SELECT count(DISTINCT a.approver_id) INTO got FROM approval a
    WHERE a.campaign_id = NEW.campaign_id AND a.version = NEW.version AND a.plan_hash = NEW.plan_hash
      AND a.approver_id NOT IN (s.proposed_by, s.last_edited_by);
    IF got < need THEN
        RAISE EXCEPTION 'plan % refused: % of the % approvals of hash % it needs', NEW.id, got, need, NEW.plan_hash
            USING ERRCODE = 'OP007';
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER plan_approved AFTER INSERT ON plan
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION plan_approved();

ALTER TABLE plan ADD CONSTRAINT plan_of_campaign UNIQUE (id, campaign_id);
ALTER TABLE plan ADD CONSTRAINT plan_list FOREIGN KEY (list_id, campaign_id) REFERENCES target_list (id, campaign_id);
ALTER TABLE run ADD CONSTRAINT run_plan_of_campaign FOREIGN KEY (plan_id, campaign_id) REFERENCES plan (id, campaign_id);
ALTER TABLE campaign ADD CONSTRAINT campaign_plan_of_campaign FOREIGN KEY (plan_id, id) REFERENCES plan (id, campaign_id);

-- The campaign: only its name, state, version and plan change (and
-- updated_at, which the trigger stamps; the server changes only the last
-- three, and may write only those); a plan is the campaign's own and only ever a
-- newer one; approved means a plan of the current version; running means
-- that plan was started (its run is recorded).
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

REVOKE UPDATE ON campaign FROM onceplan_app;
GRANT UPDATE (state, version, plan_id) ON campaign TO onceplan_app;

-- An attempt made for a plan target carries both the plan and the
-- ordinal, and its key is that target's key: a row that names a plan's
-- target with another key (and so would count as that target's effect in
-- the audit) is refused. Attempts outside any plan name neither; on a
-- planned key they count for no target (the audit says "outside the
-- plan"). The lookup is two primary-key probes on the claim's path; the
-- function's cached plan must never be a sequential scan (see 0010).
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

-- The audit finds the attempts made outside any plan (few) by this index;
-- the attempts of plans, which are nearly all, are not in it and cost it
-- nothing.
CREATE INDEX effect_outside_plan ON effect (key, epoch) WHERE plan_id IS NULL;

-- 5. Bump policies are registered by the owner (`onceplan policy add`,
-- run like `onceplan migrate`), before anything executes; the server may
-- read them and bump under them, never add one.
REVOKE INSERT ON bump_policy FROM onceplan_app;

-- Drafts already pending approval get the submission they were submitted
-- with: its hash is the one the submit recorded in the audit trail.
INSERT INTO submission (campaign_id, version, plan_hash, submitted_by)
SELECT c.id, c.version, e.plan_hash, e.actor_id
FROM campaign c
CROSS JOIN LATERAL (
    SELECT plan_hash, actor_id FROM campaign_event
    WHERE campaign_id = c.id AND action = 'submit' AND version = c.version AND plan_hash IS NOT NULL
    ORDER BY id DESC LIMIT 1
) e
WHERE c.state = 'pending_approval';

GRANT SELECT, INSERT ON submission TO onceplan_app;
