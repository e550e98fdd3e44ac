-- Bounces and complaints reported by email providers: each event
-- a provider's webhook delivered, stored raw with what was parsed from it,
-- write-once. A provider re-delivers freely (SNS, SendGrid and Mailgun
-- retry until they see a 2xx): one row per (kind, the provider's event id —
-- or the sha256 of the event's raw JSON when the provider gives none), so a
-- re-delivery is recorded once. An event tied to the effect it reports on
-- (through our Message-ID or the provider's message id kept as the
-- receipt) names that effect; a hard bounce or a complaint is what a
-- suppression with source provider_event points at.
CREATE TABLE inbound_event (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind                text NOT NULL CHECK (kind IN ('ses', 'postmark', 'sendgrid', 'mailgun', 'generic')),
    provider_event_id   text NOT NULL CHECK (provider_event_id <> '' AND length(provider_event_id) <= 300),
    type                text NOT NULL CHECK (type IN ('hard_bounce', 'soft_bounce', 'complaint')),
    -- normalised like a target's address when it parses as one
    address             text NOT NULL CHECK (address <> '' AND length(address) <= 320),
    message_id          text NOT NULL DEFAULT '' CHECK (length(message_id) <= 1000),
    provider_message_id text NOT NULL DEFAULT '' CHECK (length(provider_message_id) <= 1000),
    detail              text NOT NULL DEFAULT '' CHECK (length(detail) <= 2000),
    occurred_at         timestamptz,
    -- the event as the provider sent it (for SES, the whole SNS message,
    -- so its signature can be checked again)
    raw                 bytea NOT NULL,
    -- the effect it reports on, when it could be tied to one
    effect_id           bigint REFERENCES effect (id),
    key                 text CHECK (key ~ '^v1:[0-9a-f]{64}$'),
    epoch               integer CHECK (epoch >= 0),
    campaign_id         uuid REFERENCES campaign (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbound_event_once UNIQUE (kind, provider_event_id),
    CONSTRAINT inbound_event_tied CHECK ((effect_id IS NULL) = (key IS NULL) AND (key IS NULL) = (epoch IS NULL))
);
CREATE INDEX inbound_event_key ON inbound_event (key, id) WHERE key IS NOT NULL;
CREATE INDEX inbound_event_address ON inbound_event (address, id);

CREATE TRIGGER inbound_event_created_at BEFORE INSERT ON inbound_event
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();
CREATE TRIGGER inbound_event_write_once BEFORE UPDATE OR DELETE ON inbound_event
    FOR EACH ROW EXECUTE FUNCTION onceplan_refuse_change();
CREATE TRIGGER inbound_event_no_truncate BEFORE TRUNCATE ON inbound_event
    FOR EACH STATEMENT EXECUTE FUNCTION onceplan_refuse_change();

ALTER TABLE suppression ADD CONSTRAINT suppression_event_fk FOREIGN KEY (event_id) REFERENCES inbound_event (id);

GRANT SELECT, INSERT ON inbound_event TO onceplan_app;
