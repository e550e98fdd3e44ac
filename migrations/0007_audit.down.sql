DROP INDEX effect_plan_target;
