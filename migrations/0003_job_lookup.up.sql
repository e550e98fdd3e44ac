-- "Resume the remainder" skips targets that still have a live job of the
-- same plan; this index finds a target's jobs by key without scanning
-- River's table.
CREATE INDEX river_job_onceplan_key ON river_job ((args ->> 'key'))
    WHERE kind = 'onceplan_effect';
