-- The one-time tokens of provider webhooks whose signature does not cover
-- the event it comes with. Mailgun signs its timestamp and a random token,
-- not the body: anyone holding one captured webhook could put its
-- signature on another event. So a token is taken once, bound to the
-- digest of the content it came with, and another content under a token
-- already taken is refused; the same content again (the provider's
-- re-delivery) finds its own row and changes nothing. The row is written
-- in the transaction that records the events, so a token is taken exactly
-- when what it carried was recorded.
--
-- A signature is taken only while fresh (package inbound: each kind's
-- window), so a row is needed only that long: inbound.TokenRetention,
-- longer than every window with a margin for the clocks of several
-- processes. Each write deletes a bounded number of rows older than that
-- (by signed_at, on its index), so the table holds about one retention's
-- worth of deliveries and never grows beyond it.
CREATE TABLE inbound_token (
    kind       text NOT NULL CHECK (kind IN ('ses', 'postmark', 'sendgrid', 'mailgun', 'generic')),
    token      text NOT NULL CHECK (token <> '' AND length(token) <= 200),
    -- hex SHA-256 of the content the token came with
    digest     text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    -- the time the provider signed, as the signature says
    signed_at  timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, token)
);
CREATE INDEX inbound_token_signed_at ON inbound_token (signed_at);

CREATE TRIGGER inbound_token_created_at BEFORE INSERT ON inbound_token
    FOR EACH ROW EXECUTE FUNCTION onceplan_db_created_at();

-- Taken and read by the webhook route; deleted once past the retention.
-- No UPDATE: a token's binding never changes.
GRANT SELECT, INSERT, DELETE ON inbound_token TO onceplan_app;
