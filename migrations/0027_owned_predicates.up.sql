-- The rules other packages' statements ask about a table, stated by the
-- table's owner in the schema (docs/ARCHITECTURE.md, "Where each rule
-- lives"), instead of SQL text one Go package exported and another pasted
-- into its own statements.
--
-- Each is a LANGUAGE sql function PostgreSQL inlines into the statement
-- that names it, so every statement keeps the plan it had with the text
-- written out (the partial indexes it matched included):
--
--   * effect_blocks is a plain expression of its argument (IMMUTABLE):
--     inlined wherever it is called;
--   * the others read tables, and a scalar function that reads a table is
--     never inlined (a call per row). They return a set instead, and are
--     called in FROM: PostgreSQL inlines such a function as a subquery.
--     campaign_running_plan and onceplan_paused_queue take no argument, so
--     that an EXISTS over them, whose conditions on the outer row are in
--     its WHERE, still becomes a join.
--
-- None is SECURITY DEFINER (that would stop the inlining, too): each reads
-- with its caller's privileges, so the application role can do nothing
-- through them it could not do before. They record no dependency on the
-- tables they read, so River's migrations stay free to change river_queue.

-- The ledger's: the states that hold a key at its epoch, as the unique
-- index effect_one_blocking (migration 0001) names them. Package ledger's
-- own statements keep the list written out (an ON CONFLICT arbiter must
-- repeat the index's predicate); TestBlockingStatesAreTheDatabases keeps
-- the two equal.
CREATE FUNCTION effect_blocks(state effect_state) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('pending', 'done', 'unknown', 'stranded')
$$;

-- The campaigns': the plan each campaign runs now (none while it is not
-- running): a claim's campaign gate.
CREATE FUNCTION campaign_running_plan() RETURNS TABLE (campaign_id uuid, plan_id bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.id, c.plan_id FROM campaign c WHERE c.state = 'running'
$$;

-- River's: the queues paused now. River stops fetching from a paused
-- queue, but jobs fetched before the pause are still running: the claim
-- asks this too.
CREATE FUNCTION onceplan_paused_queue() RETURNS TABLE (name text)
LANGUAGE sql STABLE AS $$
    SELECT q.name FROM river_queue q WHERE q.paused_at IS NOT NULL
$$;

-- The suppression list's, for a plan's target: the id of the suppression
-- entry in force for the address of target ordinal of plan (one row, NULL
-- when none). It is onceplan_suppressed's rule (migration 0024) over the
-- target's address; TestTargetSuppressionIsTheDatabasesRule keeps the two
-- equal. "s.id + 0", which no index orders, and "OFFSET 0" keep the plan
-- a lookup of the address's entries (suppression_address) and of each
-- entry's removal by its key, however empty the tables were when it was
-- made (TestWritePlansUseIndexesOnly).
CREATE FUNCTION target_suppression(plan bigint, ordinal int) RETURNS TABLE (suppression_id bigint)
LANGUAGE sql STABLE AS $$
    SELECT min(s.id + 0) FROM suppression s
    WHERE s.address = (SELECT pt.target FROM plan_target pt
                       WHERE pt.plan_id = target_suppression.plan AND pt.ordinal = target_suppression.ordinal)
      AND NOT EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = s.id OFFSET 0)
$$;
