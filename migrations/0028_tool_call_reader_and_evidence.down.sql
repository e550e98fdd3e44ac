DROP TRIGGER effect_response_person ON effect_response;
DROP FUNCTION effect_response_person();
DROP INDEX effect_response_person;
-- A person's evidence cannot be kept under 0026's kinds.
ALTER TABLE effect_response DISABLE TRIGGER effect_response_write_once;
DELETE FROM effect_response WHERE kind = 'person';
ALTER TABLE effect_response ENABLE TRIGGER effect_response_write_once;
ALTER TABLE effect_response DROP CONSTRAINT effect_response_kind_check;
ALTER TABLE effect_response ADD CONSTRAINT effect_response_kind_check
    CHECK (kind IN ('send', 'resend', 'probe'));

DROP TRIGGER tool_call_creator ON tool_call;
DROP FUNCTION tool_call_creator();
ALTER TABLE tool_call DROP COLUMN created_by_user;
