DROP FUNCTION worker_alive(interval);
DROP FUNCTION target_suppressed_in(bigint);
DROP FUNCTION effect_bumped_epoch();
DROP FUNCTION effect_current_epoch(text);
