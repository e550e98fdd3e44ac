-- Whether a failed attempt ever reached the provider (docs/ARCHITECTURE.md,
-- "Failures: final or not"). Two more failures:
--   * unsent: this attempt never reached the provider — the request never
--     left (a DNS failure, a refused connection, a TLS failure before any
--     request was written) — and the target is to be sent again, as retry;
--   * unreached: final, as exhausted — the target's attempts ran out, and
--     none of them at its key and epoch ever reached the provider: every
--     other one failed unsent.
-- Both are written where the row is settled, from what the provider and
-- the executor know at the call (provider.Verdict.NotSent); a person reads
-- "never reached the provider" only where it is true.

-- The old check is a subset of the new one and validated every row there
-- is, so the new one is added NOT VALID: no scan of the ledger under the
-- table's lock, and every row written from now on is checked.
ALTER TABLE effect DROP CONSTRAINT effect_failure_check;
ALTER TABLE effect ADD CONSTRAINT effect_failure_check
    CHECK (failure IN ('rejected', 'retry', 'exhausted', 'quota', 'unsent', 'unreached')) NOT VALID;
ALTER TABLE effect_archive DROP CONSTRAINT effect_failure_check;
ALTER TABLE effect_archive ADD CONSTRAINT effect_failure_check
    CHECK (failure IN ('rejected', 'retry', 'exhausted', 'quota', 'unsent', 'unreached')) NOT VALID;

-- "Never reached the provider" is said of a target only when it is true
-- of every attempt at its key and epoch: an attempt settled unreached has
-- no other attempt there but ones that failed unsent. The attempt being
-- settled is the newest at its key and epoch (it held the key while
-- pending), so this reads its predecessors, by the (key, epoch, id) index.
CREATE FUNCTION effect_unreached() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    other bigint;
BEGIN
    SELECT e.id INTO other FROM effect e
    WHERE e.key = NEW.key AND e.epoch = NEW.epoch AND e.id <> NEW.id AND e.failure IS DISTINCT FROM 'unsent'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'effect %: unreached says that no attempt at its key and epoch reached the provider, and attempt % may have', NEW.id, other
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER effect_unreached BEFORE UPDATE OF failure ON effect
    FOR EACH ROW WHEN (NEW.failure = 'unreached') EXECUTE FUNCTION effect_unreached();

-- unreached is final for its target, as exhausted is (migration 0038): a
-- completed campaign whose every open target ended so is finished, and a
-- resume sends them once more.
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
          WHERE newest.state = 'revoked' OR (newest.state = 'failed' AND newest.failure IN ('rejected', 'exhausted', 'unreached')))
$$;
