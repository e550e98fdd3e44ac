DROP TRIGGER effect_response_created_at ON effect_response;
CREATE TRIGGER effect_response_created_at BEFORE INSERT ON effect_response
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
ALTER TABLE effect ADD CONSTRAINT effect_plan FOREIGN KEY (plan_id) REFERENCES plan (id);
