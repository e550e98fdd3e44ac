ALTER FUNCTION effect_update() RESET plan_cache_mode;
