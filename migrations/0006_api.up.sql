-- Idempotent campaign creation for the JSON API: an agent that retries a
-- timed-out POST /campaigns with the same Idempotency-Key gets the campaign
-- its first request made, never a second one. The row is written in the
-- transaction that creates the campaign, so a failed create leaves no key.
CREATE TABLE api_idempotency (
    user_id       bigint NOT NULL REFERENCES app_user (id),
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash  text NOT NULL,
    campaign_id   uuid NOT NULL REFERENCES campaign (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, key)
);

-- The API lists campaigns newest first by keyset (created_at, id).
CREATE INDEX campaign_created ON campaign (created_at DESC, id DESC);
