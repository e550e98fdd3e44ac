-- Back to migration 0040. Rows that failed unsent or unreached keep their
-- failure as retry and exhausted, the words they had before.
CREATE OR REPLACE FUNCTION target_open(plan bigint) RETURNS TABLE (ordinal int, target text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT t.ordinal, t.target
    FROM frozen_plan() p
    JOIN list_target() t ON t.list_id = p.list_id
    CROSS JOIN LATERAL effect_current_epoch(t.key) cur
    WHERE p.id = target_open.plan
      AND NOT EXISTS (SELECT 1 FROM effect_attempt() f
                      WHERE f.key = t.key AND f.epoch = cur.epoch AND effect_blocks(f.state))
      AND NOT EXISTS (SELECT 1 FROM target_suppressed_in(target_open.plan) ts WHERE ts.ordinal = t.ordinal)
      AND NOT EXISTS (
          SELECT 1 FROM (SELECT f.state, f.failure FROM effect_attempt() f
                         WHERE f.key = t.key AND f.epoch = cur.epoch
                           AND f.plan_id IN (SELECT o.id FROM frozen_plan() o WHERE o.campaign_id = p.campaign_id)
                         ORDER BY f.id DESC LIMIT 1) newest
          WHERE newest.state = 'revoked' OR (newest.state = 'failed' AND newest.failure IN ('rejected', 'exhausted')))
$$;
DROP TRIGGER effect_unreached ON effect;
DROP FUNCTION effect_unreached();
ALTER TABLE effect DISABLE TRIGGER USER;
UPDATE effect SET failure = CASE failure WHEN 'unsent' THEN 'retry' ELSE 'exhausted' END WHERE failure IN ('unsent', 'unreached');
ALTER TABLE effect ENABLE TRIGGER USER;
ALTER TABLE effect_archive DISABLE TRIGGER USER;
UPDATE effect_archive SET failure = CASE failure WHEN 'unsent' THEN 'retry' ELSE 'exhausted' END WHERE failure IN ('unsent', 'unreached');
ALTER TABLE effect_archive ENABLE TRIGGER USER;
ALTER TABLE effect DROP CONSTRAINT effect_failure_check;
ALTER TABLE effect ADD CONSTRAINT effect_failure_check CHECK (failure IN ('rejected', 'retry', 'exhausted', 'quota'));
ALTER TABLE effect_archive DROP CONSTRAINT effect_failure_check;
ALTER TABLE effect_archive ADD CONSTRAINT effect_failure_check CHECK (failure IN ('rejected', 'retry', 'exhausted', 'quota'));
