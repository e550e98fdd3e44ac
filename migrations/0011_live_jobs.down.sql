DROP INDEX river_job_onceplan_live;
CREATE INDEX river_job_onceplan_target ON river_job (((args ->> 'plan_id')::bigint), (args ->> 'key'))
    WHERE kind = 'onceplan_effect';
