DROP FUNCTION target_suppression(bigint, int);
DROP FUNCTION onceplan_paused_queue();
DROP FUNCTION campaign_running_plan();
DROP FUNCTION effect_blocks(effect_state);
