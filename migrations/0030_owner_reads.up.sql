-- Each table's owner publishes the rows other packages read
-- (docs/ARCHITECTURE.md, "Where each rule lives"): a package reads its own
-- tables, and another package's statement that must join one of them
-- (the jobs' enqueue and maintenance, the diff, the audit's read model, a
-- single effect's status) names the owner's function instead of the
-- table. What the owner publishes is the interface: the columns others
-- may rely on, under names it keeps when its table changes.
--
-- As with migrations 0027 and 0029, each is a plain LANGUAGE sql
-- function, STABLE, PARALLEL SAFE, not STRICT, not SECURITY DEFINER, that
-- returns a set: called in FROM, PostgreSQL inlines it as a subquery and
-- pulls it up, so a statement that names it has the plan it had with the
-- table named (every index, partial ones included, still matches) and
-- reads with its caller's privileges. Those read in an EXISTS take no
-- argument, so that the EXISTS can still become a join; the conditions on
-- the outer row go in its WHERE. migrations' TestOwnerReadsAreInlined
-- checks that PostgreSQL inlines every one.

-- The ledger's: every attempt (docs/ARCHITECTURE.md, "The ledger"), with
-- the columns other packages read. Which states hold a key, and a key's
-- current epoch, are effect_blocks, effect_current_epoch and
-- effect_bumped_epoch (migrations 0027, 0029).
CREATE FUNCTION effect_attempt() RETURNS TABLE (
    id bigint, key text, epoch int, state effect_state, attempt int, owner text, job_id bigint,
    plan_id bigint, ordinal int, receipt text, reason text, failure text,
    resolved_by text, resolution text, revoked_by text, revoke_reason text,
    created_at timestamptz, updated_at timestamptz, settled_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT e.id, e.key, e.epoch, e.state, e.attempt, e.owner, e.job_id,
           e.plan_id, e.ordinal, e.receipt, e.reason, e.failure,
           e.resolved_by, e.resolution, e.revoked_by, e.revoke_reason,
           e.created_at, e.updated_at, e.settled_at
    FROM effect e
$$;

-- The ledger's: the newest raw answer recorded for attempt effect (none
-- when there is none), with its source (send, resend, probe, person).
CREATE FUNCTION effect_latest_response(effect bigint) RETURNS TABLE (body bytea, kind text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT r.body, r.kind FROM effect_response r
    WHERE r.effect_id = effect_latest_response.effect
    ORDER BY r.id DESC LIMIT 1
$$;

-- The ledger's: the claims' records of a plan's target found suppressed
-- (final for that plan), with the suppression entry each cites.
CREATE FUNCTION target_suppressed_record() RETURNS TABLE (
    plan_id bigint, ordinal int, key text, suppression_id bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ts.plan_id, ts.ordinal, ts.key, ts.suppression_id, ts.created_at FROM target_suppressed ts
$$;

-- The plan's: every frozen plan row.
CREATE FUNCTION frozen_plan() RETURNS TABLE (
    id bigint, campaign_id uuid, version int, provider text, tool text,
    from_addr text, subject text, text_body text, html_body text, list_unsubscribe boolean,
    list_id bigint, target_count int, plan_hash text, proposed_by bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p.id, p.campaign_id, p.version, p.provider, p.tool,
           p.from_addr, p.subject, p.text_body, p.html_body, p.list_unsubscribe,
           p.list_id, p.target_count, p.plan_hash, p.proposed_by, p.created_at
    FROM plan p
$$;

-- The plan's: every target list, with its size and digest.
CREATE FUNCTION target_list_summary() RETURNS TABLE (
    id bigint, campaign_id uuid, target_count int, digest text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT l.id, l.campaign_id, l.target_count, l.digest FROM target_list l
$$;

-- The plan's: every target of every list, by list and ordinal: its
-- normalised address, key, variables and the line it came from.
CREATE FUNCTION list_target() RETURNS TABLE (
    list_id bigint, ordinal int, target text, key text, vars jsonb, line int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT t.list_id, t.ordinal, t.target, t.key, t.vars, t.line FROM target t
$$;

-- The campaign's (package approval): every campaign.
CREATE FUNCTION campaign_record() RETURNS TABLE (
    id uuid, name text, provider text, tool text, state text, version int, plan_id bigint,
    required_approvals int, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT c.id, c.name, c.provider, c.tool, c.state, c.version, c.plan_id,
           c.required_approvals, c.created_at
    FROM campaign c
$$;

-- The campaign's: every draft version, its list and its authors.
CREATE FUNCTION campaign_draft() RETURNS TABLE (
    campaign_id uuid, version int, list_id bigint, proposed_by bigint, last_edited_by bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT d.campaign_id, d.version, d.list_id, d.proposed_by, d.last_edited_by FROM draft d
$$;

-- The campaign's: every submission, what it asked to be approved and its
-- authors as submitted.
CREATE FUNCTION campaign_submission() RETURNS TABLE (
    id bigint, campaign_id uuid, version int, plan_hash text, list_id bigint,
    proposed_by bigint, last_edited_by bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT s.id, s.campaign_id, s.version, s.plan_hash, s.list_id, s.proposed_by, s.last_edited_by
    FROM submission s
$$;

-- The campaign's: every approval given.
CREATE FUNCTION campaign_approval() RETURNS TABLE (
    id bigint, campaign_id uuid, version int, plan_hash text, approver_id bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT a.id, a.campaign_id, a.version, a.plan_hash, a.approver_id, a.created_at FROM approval a
$$;

-- The campaign's: every run (a start of a plan).
CREATE FUNCTION campaign_run() RETURNS TABLE (id bigint, campaign_id uuid, plan_id bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT r.id, r.campaign_id, r.plan_id, r.created_at FROM run r
$$;

-- The campaign's: its trail, the actions taken and when.
CREATE FUNCTION campaign_trail() RETURNS TABLE (id bigint, campaign_id uuid, action text, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ev.id, ev.campaign_id, ev.action, ev.created_at FROM campaign_event ev
$$;

-- The suppression list's: every entry, in force or taken off.
CREATE FUNCTION suppression_entry() RETURNS TABLE (
    id bigint, address text, reason text, source text, actor text, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT s.id, s.address, s.reason, s.source, s.actor, s.created_at FROM suppression s
$$;

-- The suppression list's: when each entry taken off was.
CREATE FUNCTION suppression_removed() RETURNS TABLE (suppression_id bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT sr.suppression_id, sr.created_at FROM suppression_removal sr
$$;

-- The executor's: each worker process's latest heartbeat. Whether one is
-- alive is worker_alive (migration 0029).
CREATE FUNCTION worker_heartbeat() RETURNS TABLE (owner text, seen_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT w.owner, w.seen_at FROM worker_process w
$$;
