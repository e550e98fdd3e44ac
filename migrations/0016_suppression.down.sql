DROP TABLE target_suppressed;
DROP FUNCTION onceplan_target_suppressed_insert();
DROP TABLE suppression_removal;
DROP TABLE suppression;
