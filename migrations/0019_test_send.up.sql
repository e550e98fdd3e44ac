-- Test sends: a campaign's message, rendered for one target,
-- sent to reviewers with "[Test]" before the subject. It touches no ledger
-- key and no effect row; the campaign's trail records who sent it, to
-- whom, which ordinal and the provider's answer (detail), as an event of
-- its own.
ALTER TABLE campaign_event
    DROP CONSTRAINT campaign_event_action_check,
    ADD CONSTRAINT campaign_event_action_check CHECK (action IN ('create', 'edit', 'import', 'submit', 'approve', 'reject',
        'freeze', 'start', 'pause', 'resume', 'cancel', 'complete', 'resolve', 'supersede', 'revoke', 'test_send'));
