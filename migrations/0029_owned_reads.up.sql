-- More of the rules other packages' statements ask about a table, stated
-- by the table's owner in the schema (docs/ARCHITECTURE.md, "Where each
-- rule lives"), in place of SQL text a Go package exported for others to
-- paste into their statements. As with migration 0027's, each is a plain
-- LANGUAGE sql function, STABLE, not STRICT, not SECURITY DEFINER, that
-- returns a set: called in FROM, PostgreSQL inlines it as a subquery, so
-- the statements that name it keep the plans they had with the text
-- written out, and it reads with its caller's privileges. Each is
-- PARALLEL SAFE (it only reads): a function not declared so, named
-- anywhere in a statement, keeps the whole statement from a parallel plan,
-- and the audit's and the diff's joins over a list are parallel.
--
-- A function's arguments are in its FROM item: one that names a column of
-- an outer row keeps an EXISTS over it from becoming a join. Those an
-- EXISTS is asked over take only what is the same for every row of the
-- statement (a parameter); the conditions on the outer row go in the
-- EXISTS's WHERE.

-- The ledger's: the current epoch of a key, one row: 0, or the epoch of
-- its latest recorded bump. Called as
-- "CROSS JOIN LATERAL effect_current_epoch(t.key) cur", its aggregate is
-- evaluated once per row however often the statement names cur.epoch.
CREATE FUNCTION effect_current_epoch(key text) RETURNS TABLE (epoch int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(max(b.epoch), 0) FROM effect_bump b WHERE b.key = effect_current_epoch.key
$$;

-- The ledger's, for a statement over many keys: each key ever bumped and
-- the epoch of its latest bump, which is its current epoch; a key not in
-- it is at epoch 0. Bumps are few (each is a human act or a registered
-- policy's): "LEFT JOIN effect_bumped_epoch() cur ON cur.key = t.key"
-- hashes them once, where effect_current_epoch probes effect_bump once
-- per key. TestBumpedEpochIsTheCurrentEpoch keeps the two equal.
CREATE FUNCTION effect_bumped_epoch() RETURNS TABLE (key text, epoch int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT b.key, max(b.epoch) FROM effect_bump b GROUP BY b.key
$$;

-- The ledger's: the ordinals of the targets of a plan that a claim found
-- suppressed and recorded so (target_suppressed): final for that plan.
CREATE FUNCTION target_suppressed_in(plan bigint) RETURNS TABLE (ordinal int)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ts.ordinal FROM target_suppressed ts WHERE ts.plan_id = target_suppressed_in.plan
$$;

-- The executor's: the worker processes that said they are alive (their
-- heartbeat in worker_process) within the interval given. An attempt or a
-- running job whose owner is not among them is in doubt, and recovery
-- takes it.
CREATE FUNCTION worker_alive(within interval) RETURNS TABLE (owner text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT w.owner FROM worker_process w WHERE w.seen_at > now() - worker_alive.within
$$;
