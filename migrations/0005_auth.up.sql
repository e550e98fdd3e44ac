-- Sign-in sessions, sign-in throttling and API tokens (package auth).
--
-- No secret is stored in clear: a session or an API token is kept as the
-- SHA-256 of the secret the client holds (passwords are argon2id hashes in
-- app_user.password_hash), so reading this database lets nobody sign in.

CREATE TABLE session (
    id           bytea PRIMARY KEY CHECK (length(id) = 32), -- sha256 of the cookie's token
    user_id      bigint NOT NULL REFERENCES app_user (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,                       -- absolute end (7 days after sign-in)
    last_seen_at timestamptz NOT NULL DEFAULT now(),         -- idle end is 12 hours after this
    user_agent   text NOT NULL DEFAULT '',
    ip           text NOT NULL DEFAULT ''
);

CREATE INDEX session_by_user ON session (user_id);
CREATE INDEX session_by_expiry ON session (expires_at);

-- Every sign-in attempt, for throttling (failures per email and per IP
-- address in the last 15 minutes). email is as normalised, or as typed
-- when it is not an address; unknown emails are counted too.
CREATE TABLE login_attempt (
    id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL,
    ip    text NOT NULL DEFAULT '',
    at    timestamptz NOT NULL DEFAULT now(),
    ok    boolean NOT NULL
);

CREATE INDEX login_attempt_email ON login_attempt (email, at);
CREATE INDEX login_attempt_ip ON login_attempt (ip, at);

-- API tokens: "op_…" (personal) or "opa_…" (agent), shown once.
CREATE TABLE api_token (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES app_user (id),
    name         text NOT NULL CHECK (btrim(name) <> '' AND length(name) <= 100),
    agent        boolean NOT NULL DEFAULT false,
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32), -- sha256 of the whole token
    prefix       text NOT NULL CHECK (length(prefix) = 8),               -- its first 8 characters, for display
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE INDEX api_token_user ON api_token (user_id);
CREATE INDEX api_token_prefix ON api_token (prefix);
