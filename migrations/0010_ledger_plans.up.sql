-- Rule 3's check in effect_update() ("settle only after the raw response is
-- recorded") looks effect_response up by effect_id. PL/pgSQL keeps a plan
-- per session and switches to a generic one after five calls: made while
-- effect_response was still small (a fresh ledger, a campaign's first
-- seconds), that plan scans the whole table, and it stays in use on a
-- pooled connection long after the table has grown — every settle then
-- reads every response ever recorded (issue 8: 48 million rows read for
-- 20,000 settles). Planning each call with the real table size costs a few
-- microseconds and always finds the index.
ALTER FUNCTION effect_update() SET plan_cache_mode = force_custom_plan;
