CREATE OR REPLACE FUNCTION effect_latest_response(effect bigint) RETURNS TABLE (body bytea, kind text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT r.body, r.kind FROM effect_response r
    WHERE r.effect_id = effect_latest_response.effect
    ORDER BY r.id DESC LIMIT 1
$$;
DROP TRIGGER effect_response_of_batch ON effect_response;
DROP FUNCTION effect_response_of_batch();
ALTER TABLE effect_response DISABLE TRIGGER effect_response_write_once;
DELETE FROM effect_response WHERE batch_response_id IS NOT NULL;
ALTER TABLE effect_response ENABLE TRIGGER effect_response_write_once;
ALTER TABLE effect_response DROP COLUMN batch_response_id;
DROP TABLE effect_batch_response;
DROP TABLE effect_batch_member;
DROP FUNCTION effect_batch_member_insert();
DROP TABLE effect_batch;
