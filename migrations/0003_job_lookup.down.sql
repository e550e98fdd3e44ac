DROP INDEX river_job_onceplan_target;
