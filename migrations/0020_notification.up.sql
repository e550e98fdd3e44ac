-- Notifications: who was told what, through which notifier,
-- and what each notifier answered (package notify). A notification never
-- changes a campaign; its record is write-once like the trail it reports
-- on: one row per notifier and recipient of an event, one row per attempt
-- to deliver it, never changed or deleted.

-- The events a notification can be about, as package notify names them
-- (notify.Events).
CREATE FUNCTION onceplan_notify_event_ok(event text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT event IN ('submitted', 'approved', 'rejected', 'attention', 'completed')
$$;

-- Targets that need a person (unknown, stranded, failed) are announced in
-- batches, at most one per campaign per window: each row is what the
-- periodic scan saw of one campaign's counts when they changed (package
-- notify, Service.ScanAttention):
--   observed: the counts grew past the last baseline; a message is due
--             once the growth has gathered (the wait) and the window since
--             the last message has passed;
--   notified: the message went out with these counts (its notifications
--             name this row): the new baseline;
--   baseline: the counts fell (a person resolved targets): the new
--             baseline, so that a later growth is measured from it.
CREATE TABLE notification_attention (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id uuid NOT NULL REFERENCES campaign (id),
    kind        text NOT NULL CHECK (kind IN ('observed', 'notified', 'baseline')),
    unknown     integer NOT NULL CHECK (unknown >= 0),
    stranded    integer NOT NULL CHECK (stranded >= 0),
    failed      integer NOT NULL CHECK (failed >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_attention_campaign ON notification_attention (campaign_id, id);

-- One message for one recipient through one notifier, with its content as
-- it was sent (the subject and text of an email, the JSON body of a
-- webhook). Its source is a recorded decision (campaign_event) or an
-- attention batch; a source is expanded once: a retried expansion finds
-- its rows and writes nothing twice.
CREATE TABLE notification (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event             text NOT NULL CHECK (onceplan_notify_event_ok(event)),
    campaign_event_id bigint REFERENCES campaign_event (id),
    attention_id      bigint REFERENCES notification_attention (id),
    campaign_id       uuid NOT NULL REFERENCES campaign (id),
    notifier          text NOT NULL CHECK (notifier ~ '^[a-z0-9]+([_-][a-z0-9]+)*$' AND length(notifier) <= 40),
    kind              text NOT NULL CHECK (kind IN ('mailto', 'webhook')),
    -- the address of an email ('' for a webhook), and the user it is for
    -- (NULL: a fixed address of the notifier, or a webhook)
    recipient         text NOT NULL DEFAULT '' CHECK (length(recipient) <= 320),
    user_id           bigint REFERENCES app_user (id),
    subject           text NOT NULL CHECK (length(subject) <= 1000),
    body              text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notification_one_source CHECK ((campaign_event_id IS NULL) <> (attention_id IS NULL)),
    CONSTRAINT notification_recipient CHECK ((kind = 'webhook') = (recipient = ''))
);
CREATE UNIQUE INDEX notification_once_per_event ON notification (campaign_event_id, notifier, recipient)
    WHERE campaign_event_id IS NOT NULL;
CREATE UNIQUE INDEX notification_once_per_attention ON notification (attention_id, notifier, recipient)
    WHERE attention_id IS NOT NULL;
CREATE INDEX notification_campaign ON notification (campaign_id, id);

-- Each try to deliver a notification, with the notifier's answer: the
-- HTTP status and body of a webhook, the provider's raw answer of an
-- email, or the error that kept it from answering. status: delivered;
-- retrying (failed this time, River tries again with backoff); failed
-- (the last try, or an answer no retry can change). A notification's
-- state is its latest attempt's status, pending before the first.
CREATE TABLE notification_attempt (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id bigint NOT NULL REFERENCES notification (id),
    attempt         integer NOT NULL CHECK (attempt >= 1),
    status          text NOT NULL CHECK (status IN ('delivered', 'retrying', 'failed')),
    http_status     integer CHECK (http_status BETWEEN 100 AND 999),
    answer          text NOT NULL DEFAULT '' CHECK (length(answer) <= 2000),
    error           text NOT NULL DEFAULT '' CHECK (length(error) <= 2000),
    owner           text NOT NULL DEFAULT '',
    duration_ms     integer NOT NULL CHECK (duration_ms >= 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_attempt_latest ON notification_attempt (notification_id, id DESC);
-- Delivered once: a second delivery record of one notification is refused.
CREATE UNIQUE INDEX notification_delivered_once ON notification_attempt (notification_id) WHERE status = 'delivered';

CREATE TRIGGER notification_attention_created_at BEFORE INSERT ON notification_attention
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER notification_attention_write_once BEFORE UPDATE OR DELETE ON notification_attention
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER notification_attention_no_truncate BEFORE TRUNCATE ON notification_attention
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER notification_created_at BEFORE INSERT ON notification
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER notification_write_once BEFORE UPDATE OR DELETE ON notification
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER notification_no_truncate BEFORE TRUNCATE ON notification
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER notification_attempt_created_at BEFORE INSERT ON notification_attempt
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER notification_attempt_write_once BEFORE UPDATE OR DELETE ON notification_attempt
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER notification_attempt_no_truncate BEFORE TRUNCATE ON notification_attempt
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

-- Which events reach a user: a setting, not a record (the user changes
-- it on /account/notifications). No row: the event reaches them when
-- their roles make them its audience (the default).
CREATE TABLE notification_preference (
    user_id    bigint NOT NULL REFERENCES app_user (id),
    event      text NOT NULL CHECK (onceplan_notify_event_ok(event)),
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, event)
);

-- Write-once: read and append (the default privileges of 0008 grant
-- SELECT, INSERT; said again here so the file reads whole).
GRANT SELECT, INSERT ON notification_attention, notification, notification_attempt TO onceplan_app;
GRANT SELECT, INSERT, UPDATE ON notification_preference TO onceplan_app;
