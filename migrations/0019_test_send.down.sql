-- Refused (by the action check) once a test send has been recorded: the
-- trail is write-once, and going down would have to drop those entries.
ALTER TABLE campaign_event
    DROP CONSTRAINT campaign_event_action_check,
    ADD CONSTRAINT campaign_event_action_check CHECK (action IN ('create', 'edit', 'import', 'submit', 'approve', 'reject',
        'freeze', 'start', 'pause', 'resume', 'cancel', 'complete', 'resolve', 'supersede', 'revoke'));
