-- Onceplan's lookups of River's jobs (0003) only ever ask for live jobs:
-- "resume the remainder" skips targets that still have one, a campaign
-- completes when its plan has none left. Indexing only those keeps the
-- index the size of the work in hand rather than of every job River
-- retains (a finished million-target plan left a million entries to wade
-- through on every completion check), and River's completion of a job no
-- longer adds an entry to it (one index write less per effect).
-- The queries repeat the predicate, so the planner can use the index.
--
-- Jobs are found by plan and ordinal: a job's arguments no longer carry
-- the target's key (jobs.EffectArgs); jobs enqueued earlier carry both.
DROP INDEX river_job_onceplan_target;
CREATE INDEX river_job_onceplan_live ON river_job (((args ->> 'plan_id')::bigint), ((args ->> 'ordinal')::int))
    WHERE kind = 'onceplan_effect' AND state NOT IN ('completed', 'cancelled', 'discarded');
