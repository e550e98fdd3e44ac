-- Onceplan looks up River's jobs by plan and target: "resume the
-- remainder" skips targets that still have a live job of the same plan,
-- and a campaign completes when its plan has no live job left. This index
-- finds them without scanning River's table.
CREATE INDEX river_job_onceplan_target ON river_job (((args ->> 'plan_id')::bigint), (args ->> 'key'))
    WHERE kind = 'onceplan_effect';
