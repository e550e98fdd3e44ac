-- Archived rows go back into the hot tables before the archive goes.
ALTER TABLE effect DISABLE TRIGGER USER;
ALTER TABLE effect_response DISABLE TRIGGER USER;
ALTER TABLE effect_batch DISABLE TRIGGER USER;
ALTER TABLE effect_batch_member DISABLE TRIGGER USER;
ALTER TABLE effect_batch_response DISABLE TRIGGER USER;
INSERT INTO effect (id, key, epoch, state, attempt, owner, job_id, plan_id, ordinal, receipt, reason,
                    resolved_by, resolution, revoked_by, revoke_reason, created_at, updated_at, settled_at, failure)
    OVERRIDING SYSTEM VALUE
    SELECT id, key, epoch, state, attempt, owner, job_id, plan_id, ordinal, receipt, reason,
           resolved_by, resolution, revoked_by, revoke_reason, created_at, updated_at, settled_at, failure
    FROM effect_archive;
INSERT INTO effect_batch OVERRIDING SYSTEM VALUE SELECT * FROM effect_batch_archive;
INSERT INTO effect_batch_response OVERRIDING SYSTEM VALUE SELECT * FROM effect_batch_response_archive;
INSERT INTO effect_batch_member SELECT * FROM effect_batch_member_archive;
INSERT INTO effect_response OVERRIDING SYSTEM VALUE SELECT * FROM effect_response_archive;
ALTER TABLE effect ENABLE TRIGGER USER;
ALTER TABLE effect_response ENABLE TRIGGER USER;
ALTER TABLE effect_batch ENABLE TRIGGER USER;
ALTER TABLE effect_batch_member ENABLE TRIGGER USER;
ALTER TABLE effect_batch_response ENABLE TRIGGER USER;

DROP FUNCTION effect_archived();
DROP FUNCTION archive_campaign(uuid, text);

DROP TRIGGER inbound_event_effect ON inbound_event;
DROP FUNCTION inbound_event_effect();
ALTER TABLE inbound_event ADD CONSTRAINT inbound_event_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES effect (id);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['effect_response', 'effect_batch', 'effect_batch_member', 'effect_batch_response'] LOOP
        EXECUTE format('DROP TRIGGER %I ON %I', t || '_no_delete', t);
        EXECUTE format('DROP TRIGGER %I ON %I', t || '_write_once', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change()', t || '_write_once', t);
    END LOOP;
END $$;
DROP TRIGGER effect_no_delete ON effect;
DROP TRIGGER effect_archive_only ON effect;
CREATE TRIGGER effect_no_delete BEFORE DELETE ON effect
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
DROP FUNCTION effect_archive_only();
DROP FUNCTION onceplan_archive_only();
DROP TRIGGER effect_archived_key ON effect;
DROP FUNCTION effect_archived_key();
DROP TRIGGER campaign_archived_final ON campaign;
DROP FUNCTION campaign_archived_final();

DROP TABLE campaign_archive;
DROP FUNCTION campaign_archive_insert();
DROP TABLE effect_archive, effect_response_archive, effect_batch_archive,
    effect_batch_member_archive, effect_batch_response_archive;
