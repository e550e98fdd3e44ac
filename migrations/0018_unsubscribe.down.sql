DROP TABLE unsubscribe_secret;
DROP TRIGGER plan_list_unsubscribe ON plan;
DROP FUNCTION onceplan_plan_list_unsubscribe();
ALTER TABLE plan DROP COLUMN list_unsubscribe;
DROP TRIGGER campaign_list_unsubscribe_fixed ON campaign;
DROP FUNCTION onceplan_campaign_list_unsubscribe_fixed();
ALTER TABLE campaign DROP COLUMN list_unsubscribe;
