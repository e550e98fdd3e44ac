package audit

// The package's SQL, in one place. Every query reads; none writes.

// metricSQL counts a plan's targets by the newest attempt at their key's
// current epoch, in one statement (@plan is the plan's id), and those the
// claim found suppressed (sup: recorded in target_suppressed for one of
// the campaign's plans, and not held by a blocking attempt; a failed or
// revoked attempt before the suppression counts as suppressed, as
// TargetRow says). Missing is what is left: approved minus the targets
// that have an attempt or were suppressed.
//
// The attempts are found two ways:
//
//   - those made by the plan, or by another version of the campaign whose
//     plan froze the same target list (a version that changed only the
//     text shares its list), by (plan_id, ordinal): an index-only range
//     scan of effect_plan_target (migration 0007) per plan, so the cost
//     grows with the plan and not with the rest of the ledger;
//   - those made by a version with another target list, by key: keys do
//     not depend on the text, so a target done under version 1 is done for
//     version 2. Usually there is no such version; whether there is comes
//     in as a value (@other, from samePlans), so that a custom plan for
//     false leaves the branch out altogether. Planned in, even behind a
//     one-time filter that is false, the branch could start a parallel
//     scan: two workers launched for nothing beside a long history, and
//     without any filter a scan of effect_plan_target from its first
//     entry, looking other campaigns' attempts up in the list (4.2 s
//     instead of 0.6 s at 1,000,000 targets once another campaign had a
//     million attempts). When there is such a version, it hashes the
//     plan's keys.
//
// Every attempt at a plan target carries its plan and the target's
// ordinal (the executor's claim is the only writer and sets them), and
// PostgreSQL refuses one whose key is not that target's (migration 0014).
// An attempt without a plan is outside the plan: it never counts as a
// target's effect, even on a planned key (outsideSQL counts the targets it
// holds). Since no row can be added to a frozen list (0014), every
// ordinal an attempt names is an approved target's; ForPlan says when an
// older ledger counts more than that.
//
// The current epoch is 0 unless the key was bumped: the ledger's
// effect_bumped_epoch (migration 0029), the latest epoch of each key ever
// bumped, hashed once (bumps are few: each is a human act or a registered
// policy's), joined to the list by key, once (MATERIALIZED): the
// statistics may not know the plan's attempts yet (an audit right after
// the campaign ran, before ANALYZE), and then the planner, counting on one
// attempt, ran the aggregate of every bump again for each attempt — two
// minutes for 100,000 targets beside 10,000 bumps. (Every bump in the
// ledger costs an index probe of the list: 3 ms per 1,000 bumps. Looking
// the epochs up by each attempt's key instead was tried; at a million
// targets single runs could not tell the two apart, so the join stays as
// it was.) A blocking attempt
// (pending, done, unknown, stranded) is always the newest of its key and
// epoch, since no attempt can start beside it, and there is at most one
// (the ledger's unique index), so those are counted as they come. A failed
// or revoked attempt decides its target only when no newer attempt exists,
// checked only for those rows, by the (key, epoch, id) index.
var metricSQL = planAttempts + `,
counted AS (
  SELECT
    count(*) FILTER (WHERE a.state = 'done')     AS done,
    count(*) FILTER (WHERE a.state = 'pending')  AS pending,
    count(*) FILTER (WHERE a.state = 'unknown')  AS unknown,
    count(*) FILTER (WHERE a.state = 'stranded') AS stranded,
    count(*) FILTER (WHERE a.state = 'failed' AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)) AS failed,
    count(*) FILTER (WHERE a.state = 'failed' AND a.failure = 'rejected' AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)) AS rejected,
    count(*) FILTER (WHERE a.state = 'failed' AND a.failure = 'exhausted' AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)) AS exhausted,
    count(*) FILTER (WHERE a.state = 'failed' AND a.failure = 'unreached' AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)) AS unreached,
    count(*) FILTER (WHERE a.state = 'revoked' AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)) AS revoked
  FROM attempt a LEFT JOIN bumped bu ON bu.ordinal = a.ordinal
  WHERE a.epoch = coalesce(bu.epoch, 0)
)
SELECT p.campaign_id, p.version, p.target_count, p.list_id,
       c.done, c.pending, c.unknown, c.stranded, c.failed, c.rejected, c.exhausted, c.unreached, c.revoked,
       (SELECT count(DISTINCT s.ordinal) FROM sup s WHERE NOT EXISTS (
          SELECT 1 FROM effect_attempt() e WHERE e.key = s.key AND effect_blocks(e.state)
            AND e.epoch = (SELECT cur.epoch FROM effect_current_epoch(s.key) cur))) AS suppressed
FROM p CROSS JOIN counted c`

// planAttempts is the WITH list metricSQL and failedSQL share: the plan
// (p), the current epochs of its bumped keys, by ordinal (bumped: the
// ledger's effect_bumped_epoch; a target not there is at epoch 0), the
// attempts that count for its targets (attempt) and the targets the claim
// found suppressed (sup). @plans and @other are samePlans' answers.
var planAttempts = `
WITH p AS MATERIALIZED (SELECT fp.id, fp.campaign_id, fp.version, fp.list_id, fp.target_count FROM frozen_plan() fp WHERE fp.id = @plan),
bumped AS MATERIALIZED (
  SELECT t.ordinal, cur.epoch
  FROM effect_bumped_epoch() cur JOIN list_target() t ON t.list_id = (SELECT list_id FROM p) AND t.key = cur.key
),
attempt AS (
  SELECT e.ordinal, e.id, e.epoch, e.state, e.failure, e.reason
  FROM effect_attempt() e
  WHERE e.plan_id = ANY (@plans::bigint[])
  UNION ALL
  SELECT ot.ordinal, oe.id, oe.epoch, oe.state, oe.failure, oe.reason
  FROM frozen_plan() o
  JOIN effect_attempt() oe ON oe.plan_id = o.id
  JOIN list_target() ot ON ot.list_id = (SELECT list_id FROM p) AND ot.key = oe.key
  WHERE @other::boolean AND o.campaign_id = (SELECT campaign_id FROM p) AND o.list_id <> (SELECT list_id FROM p)
),
sup AS MATERIALIZED (
  SELECT ts.ordinal, ts.key FROM target_suppressed_record() ts
  WHERE ts.plan_id = ANY (@plans::bigint[])
  UNION
  SELECT t.ordinal, t.key FROM target_suppressed_record() ts
  JOIN frozen_plan() o ON o.id = ts.plan_id
  JOIN list_target() t ON t.list_id = (SELECT list_id FROM p) AND t.key = ts.key
  WHERE @other::boolean AND o.campaign_id = (SELECT campaign_id FROM p) AND o.list_id <> (SELECT list_id FROM p)
)`

// failedSQL groups the plan's failed targets (as metricSQL counts them) by
// whether the failure is final and its reason, with a few of their
// addresses: what the audit names in its reasons. It runs only when some
// target failed.
var failedSQL = planAttempts + `
SELECT coalesce(a.failure, ''), coalesce(a.reason, ''), count(*)::int,
       (array_agg(t.target ORDER BY a.ordinal))[1:3]
FROM attempt a
LEFT JOIN bumped bu ON bu.ordinal = a.ordinal
JOIN list_target() t ON t.list_id = (SELECT list_id FROM p) AND t.ordinal = a.ordinal
WHERE a.epoch = coalesce(bu.epoch, 0) AND a.state = 'failed'
  AND NOT EXISTS (` + newerAttempt + `) AND NOT EXISTS (SELECT 1 FROM sup WHERE sup.ordinal = a.ordinal)
GROUP BY 1, 2
ORDER BY 3 DESC, 2
LIMIT 20`

// newerAttempt finds an attempt at the same key and epoch as attempt a,
// started after it.
const newerAttempt = `SELECT 1 FROM effect_attempt() me JOIN effect_attempt() n ON n.key = me.key AND n.epoch = me.epoch AND n.id > me.id WHERE me.id = a.id`

// noJIT is set for the metric's transaction: the planner costs the
// newer-attempt check as if it ran for every attempt (it runs only for
// failed and revoked ones), and at a million targets that estimate buys an
// LLVM compilation that takes longer than the whole query without it.
const noJIT = `SET LOCAL jit = off`

// samePlans lists the plans whose attempts count for plan @plan's targets
// directly: the plan and the other versions of its campaign frozen on the
// same list; and says whether a version of the campaign was frozen on
// another list. planAttempts takes them as @plans and @other, values the
// planner sees (with a custom plan, customPlans), so that it estimates
// their attempts from the ledger's statistics for those plans (a long
// history of other campaigns must not make it guess a large share of the
// ledger and read all of it), and leaves out the other-list branch when
// there is no such version.
const samePlans = `SELECT array_agg(o.id) FILTER (WHERE o.list_id = p.list_id), coalesce(bool_or(o.list_id <> p.list_id), false)
FROM frozen_plan() p JOIN frozen_plan() o ON o.campaign_id = p.campaign_id WHERE p.id = $1`

// customPlans has the metric's statements planned for their values
// (@plans), never with a generic plan, for samePlans' reason.
const customPlans = `SET LOCAL plan_cache_mode = force_custom_plan`

// campaignByID and campaignsByName find the campaign an operator names.
const (
	campaignByID    = `SELECT c.id, c.name, coalesce(c.plan_id, 0) FROM campaign_record() c WHERE c.id = $1::uuid`
	campaignsByName = `SELECT c.id, c.name, coalesce(c.plan_id, 0) FROM campaign_record() c WHERE c.name = $1 ORDER BY c.created_at LIMIT 3`
	campaignPlan    = `SELECT coalesce(c.plan_id, 0) FROM campaign_record() c WHERE c.id = $1::uuid`
)

// The per-target read model: "what is this target's state now?", asked by
// the UI's pages, the API's target list, the exports, the reconciliation
// and (as counts) the campaign's status. Its predicates are written once,
// here or in package ledger, and both statements below are built from them:
//
//   - the current epoch of a key: effect_current_epoch (migration 0029,
//     inlined by PostgreSQL);
//   - the states that hold a key at its epoch: effect_blocks (migration
//     0027, inlined by PostgreSQL);
//   - an attempt that counts for the target (countedAttempt): the
//     campaign's own (ownAttempt), or one that holds the key whoever made
//     it;
//   - the attempt that decides (decidingOrder): the blocking one, of which
//     there is at most one (the ledger's unique index), else the newest;
//   - its state as the target's (attemptState): StateOutside when the
//     attempt is not the campaign's own (migration 0014: an attempt
//     outside any plan, or for another campaign's plan, never counts as
//     the target's effect; while it holds the key the target can get no
//     effect of its own).

// ownAttempt is the SQL condition that the attempt aliased attempt is the
// campaign's own for the target list that list names (a column or a
// parameter): made by a plan of the campaign whose list it is. Keys do not
// depend on the text, so any version's plan counts.
func ownAttempt(attempt, list string) string {
	return attempt + ".plan_id IN (SELECT op.id FROM frozen_plan() op WHERE op.campaign_id = " +
		"(SELECT ol.campaign_id FROM target_list_summary() ol WHERE ol.id = " + list + "))"
}

// countedAttempt is the SQL condition that the attempt aliased attempt
// counts for a target of list: the campaign's own, or one holding the key.
func countedAttempt(attempt, list string) string {
	return "(effect_blocks(" + attempt + ".state) OR " + ownAttempt(attempt, list) + ")"
}

// attemptState is the target's state as the deciding attempt gives it.
func attemptState(attempt, list string) string {
	return "CASE WHEN " + ownAttempt(attempt, list) + " THEN " + attempt + ".state::text ELSE '" + StateOutside + "' END"
}

// decidingOrder orders a key's counted attempts at one epoch so that the
// one that decides the target's state comes first.
func decidingOrder(attempt string) string {
	return "effect_blocks(" + attempt + ".state) DESC, " + attempt + ".id DESC"
}

// targetRowSQL selects targets with their current state, one row per
// target: the deciding attempt at the key's current epoch, and the count
// and span of the attempts there that count (an attempt of another
// campaign that no longer holds the key is not the target's business).
// It is a template: the FROM item (a target row aliased t), the WHERE
// condition, the ORDER BY and the LIMIT are the page shape's (see
// QueryTargets); the columns are always these, in queryRows' order.
// Per target, two index lookups: the key's bumps (primary key) and its
// attempts at that epoch (effect_key_history).
var targetRowSQL = `
SELECT t.ordinal, t.target, t.key, cur.epoch, ` + targetState + `, coalesce(e.attempts, 0)::int,
       coalesce(e.receipt, ''), e.first_at, coalesce(e.last_at, sup.at), coalesce(e.resolved_by, ''), coalesce(e.resolution, ''),
       CASE WHEN ` + targetState + ` = '` + StateSuppressed + `' THEN sup.why ELSE coalesce(e.reason, '') END,
       coalesce(e.revoked_by, ''), coalesce(e.revoke_reason, ''), t.vars::text,
       CASE WHEN ` + targetState + ` = 'failed' THEN coalesce(e.failure, '') ELSE '' END
FROM %s
CROSS JOIN LATERAL effect_current_epoch(t.key) cur
LEFT JOIN LATERAL (
  SELECT ` + attemptState("x", "t.list_id") + ` AS state, effect_blocks(x.state) AS blocking,
         x.receipt, x.resolved_by, x.resolution, x.reason, x.revoked_by, x.revoke_reason, x.failure,
         count(*) OVER () AS attempts, min(x.created_at) OVER () AS first_at, max(x.updated_at) OVER () AS last_at
  FROM effect_attempt() x WHERE x.key = t.key AND x.epoch = cur.epoch AND ` + countedAttempt("x", "t.list_id") + `
  ORDER BY ` + decidingOrder("x") + `
  LIMIT 1
) e ON true
LEFT JOIN LATERAL (
  SELECT ts.created_at AS at,
         s.reason || ' (' || replace(s.source, '_', ' ') || CASE WHEN s.actor <> '' THEN ', by ' || s.actor ELSE '' END || ')' AS why
  FROM target_suppressed_record() ts JOIN suppression_entry() s ON s.id = ts.suppression_id
  WHERE ts.key = t.key AND ` + ownAttempt("ts", "t.list_id") + `
  ORDER BY ts.created_at LIMIT 1
) sup ON true
WHERE %s
ORDER BY %s
LIMIT %s`

// targetState is a target's state in targetRowSQL: the blocking attempt's
// (or StateOutside) when one holds the key; else StateSuppressed when the
// claim found its address suppressed (target_suppressed, for one of the
// campaign's plans: consent overrides a failed or revoked attempt, and
// the plan); else the newest counted attempt's; else StateNotStarted.
const targetState = "CASE WHEN e.blocking THEN e.state WHEN sup.at IS NOT NULL THEN '" + StateSuppressed + "' " +
	"ELSE coalesce(e.state, '" + StateNotStarted + "') END"

// listCountsSQL counts the targets of list $1 by state, as targetRowSQL
// would give them (and the failed ones by their deciding attempt's
// failure), in one aggregate statement: looking each target up
// would take seconds at a million targets, so this joins the list to the
// ledger by key once and keeps each key's deciding attempt (DISTINCT ON in
// decidingOrder). Targets with no counted attempt are not started; the
// caller counts them as what is left.
//
// The current epoch is checked on the deciding attempt, not in the join:
// a key's attempts are ordered newest epoch first (no attempt is ever at an
// epoch above the key's current one), so the first is at the current epoch
// when any counted attempt is, and a key bumped past its attempts is not
// started. Inside the join the per-key lookup made the planner hash the
// million targets, or probe them one by one, instead of hashing the
// attempts (2.0–3.2 s at 1,000,000 targets with 300,000 attempts). Here it
// costs one index probe of effect_bump per attempted key: 1.5–1.7 s where
// the statement this replaced (its own join of the bumps, grouped by key)
// took 1.3–1.5 s, 1.6–1.8 s against 1.0–1.2 s with 1,000 keys bumped.
// The counts are cached (approval.CountsCache).
var listCountsSQL = `
WITH decided AS (
  SELECT DISTINCT ON (e.key) e.key, e.epoch, ` + attemptState("e", "$1") + ` AS state, effect_blocks(e.state) AS blocking, e.failure
  FROM list_target() t
  JOIN effect_attempt() e ON e.key = t.key
  WHERE t.list_id = $1 AND ` + countedAttempt("e", "$1") + `
  ORDER BY e.key, e.epoch DESC, ` + decidingOrder("e") + `
), current AS (
  SELECT d.key, d.state, d.blocking, d.failure FROM decided d WHERE d.epoch = (SELECT cur.epoch FROM effect_current_epoch(d.key) cur)
), suppressed AS (
  SELECT DISTINCT t.key FROM target_suppressed_record() ts JOIN list_target() t ON t.list_id = $1 AND t.key = ts.key
  WHERE ` + ownAttempt("ts", "$1") + `
), counted AS (
  SELECT CASE WHEN NOT c.blocking AND EXISTS (SELECT 1 FROM suppressed s WHERE s.key = c.key) THEN '` + StateSuppressed + `' ELSE c.state END AS state,
         c.failure
  FROM current c
)
SELECT c.state, CASE WHEN c.state = 'failed' THEN coalesce(c.failure, '') ELSE '' END, count(*)
FROM counted c GROUP BY 1, 2
UNION ALL
SELECT '` + StateSuppressed + `', '', count(*) FROM suppressed s WHERE NOT EXISTS (SELECT 1 FROM current c WHERE c.key = s.key)`

// planList reads the target list a plan froze, for the export.
const planList = `SELECT p.list_id, p.target_count FROM frozen_plan() p WHERE p.id = $1`

// ledgerIdentities streams every attempt's identity and the campaign of
// the plan that made it, to name evidence no target of the audited plan
// accounts for. It reads the whole ledger, and runs only when such
// evidence exists.
const ledgerIdentities = `
SELECT e.key, e.epoch, coalesce(e.receipt, ''), coalesce(p.campaign_id::text, '')
FROM effect_attempt() e LEFT JOIN frozen_plan() p ON p.id = e.plan_id`

// frozenPlanSQL reads what a plan's integrity is checked against: its
// payload and approved hash, its campaign's quorum, and the distinct
// approvals of exactly that hash by people who are not authors of the
// submission it answered (the latest submission of its version and hash;
// for a plan frozen before submissions were recorded, its proposer and
// the draft's last editor), as PostgreSQL's freeze rule counts them
// (migration 0014).
const frozenPlanSQL = `
WITH p AS (SELECT * FROM frozen_plan() fp WHERE fp.id = $1),
s AS (
  SELECT s.proposed_by, s.last_edited_by FROM campaign_submission() s, p
  WHERE s.campaign_id = p.campaign_id AND s.version = p.version AND s.plan_hash = p.plan_hash
  ORDER BY s.id DESC LIMIT 1
),
author AS (
  SELECT proposed_by AS id FROM s UNION ALL SELECT last_edited_by FROM s
  UNION ALL SELECT p.proposed_by FROM p WHERE NOT EXISTS (SELECT 1 FROM s)
  UNION ALL SELECT d.last_edited_by FROM campaign_draft() d, p
    WHERE d.campaign_id = p.campaign_id AND d.version = p.version AND NOT EXISTS (SELECT 1 FROM s)
)
SELECT p.campaign_id, p.provider, p.tool, p.from_addr, p.subject, p.text_body, p.html_body,
       p.list_id, p.target_count, p.plan_hash, c.required_approvals, NOT p.list_unsubscribe,
       (SELECT count(DISTINCT a.approver_id)::int FROM campaign_approval() a
        WHERE a.campaign_id = p.campaign_id AND a.version = p.version AND a.plan_hash = p.plan_hash
          AND a.approver_id NOT IN (SELECT id FROM author))
FROM p JOIN campaign_record() c ON c.id = p.campaign_id`

// listRowsSQL reads a list's rows in ordinal order, as the digest takes
// them: the variables as PostgreSQL prints them, re-encoded canonically
// by plan.AppendCanonicalVars.
const listRowsSQL = `SELECT t.ordinal, t.target, t.key, t.vars::text FROM list_target() t WHERE t.list_id = $1 ORDER BY t.ordinal`

// outsideSQL counts the plan's approved targets whose key, at its current
// epoch, is held by an attempt made outside any plan (effect_outside_plan
// holds only those, so this reads few rows): such a target cannot get an
// effect of its own, and the held attempt never counts as one.
var outsideSQL = `
SELECT count(DISTINCT t.ordinal)::int
FROM effect_attempt() e JOIN list_target() t ON t.list_id = @list AND t.key = e.key
WHERE e.plan_id IS NULL AND effect_blocks(e.state) AND t.ordinal <= @count
  AND e.epoch = (SELECT cur.epoch FROM effect_current_epoch(e.key) cur)`
