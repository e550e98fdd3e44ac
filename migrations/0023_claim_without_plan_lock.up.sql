-- Two per-row costs on the executor's hot path, each enforcing
-- what the schema already enforces another way. Same rules, same errors.
--
-- 1. effect_plan, the foreign key from an attempt's plan_id to plan,
--    made every claim lock its plan's row (SELECT ... FOR KEY SHARE, a
--    write to the tuple and a WAL record per claiming transaction), the one
--    row that every concurrent claim of a campaign shares. What it said is
--    said already, in the same statement and before it: effect_insert()
--    refuses an attempt that names a plan (OP007) unless that plan exists,
--    its target has that ordinal and the target has the attempt's key; and
--    a plan, once there, stays: plan_write_once refuses its update and
--    delete and plan_no_truncate its truncation, to every role (0002). An
--    attempt's plan_id never changes (effect_update, OP003). Measured in
--    docs/BENCHMARKS.md.
ALTER TABLE effect DROP CONSTRAINT effect_plan;

-- 2. A raw answer's created_at is the database clock: the column's
--    default is that clock, and the trigger that overwrites whatever else
--    a client supplies now runs only when there is something to overwrite
--    (one PL/pgSQL call less per answer). The row stored is the same.
DROP TRIGGER effect_response_created_at ON effect_response;
CREATE TRIGGER effect_response_created_at BEFORE INSERT ON effect_response
    FOR EACH ROW WHEN (NEW.created_at IS DISTINCT FROM now())
    EXECUTE FUNCTION onceplan_db_created_at();
