-- The providers' shared pacing: a service's rate limit is its account's
-- (Resend: per team, across its API keys), so the processes that send
-- through one configured provider take their turns from one schedule,
-- here, instead of each from a bucket of its own (docs/ARCHITECTURE.md,
-- "Rate limits shared across processes"). The package internal/provider
-- owns the table; it is pacing, not evidence: a row says when the
-- provider's latest turn was given, nothing about any effect.
CREATE TABLE provider_pace (
    name    text PRIMARY KEY CHECK (name <> ''),
    -- The start of the latest turn given: the next is at least one
    -- interval (the configured rate's) after it.
    last_at timestamptz NOT NULL
);

-- The server gives turns and never takes one back: it inserts and moves
-- last_at forward, and never deletes (a row deleted would hand the next
-- caller a turn at once, a burst past the account's limit).
GRANT SELECT, INSERT, UPDATE ON provider_pace TO onceplan_app;

CREATE FUNCTION provider_pace_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        RAISE EXCEPTION 'provider_pace: a row''s provider is not changed'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.last_at < OLD.last_at THEN
        RAISE EXCEPTION 'provider_pace: turn of % moved back from % to %', OLD.name, OLD.last_at, NEW.last_at
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER provider_pace_forward BEFORE UPDATE ON provider_pace
FOR EACH ROW EXECUTE FUNCTION provider_pace_forward();

-- provider_pace_take gives the provider called name its next turn (at):
-- at least every_us microseconds after the latest one given, and not
-- before now. When that turn is no more than max_wait_us away it is taken
-- (taken, and wait_us is how long the caller waits for it); otherwise
-- nothing is taken and wait_us says how far away it is. The row lock
-- orders concurrent callers; the clock is the database's, one for every
-- process.
CREATE FUNCTION provider_pace_take(name text, every_us bigint, max_wait_us bigint,
                                   OUT taken boolean, OUT wait_us bigint, OUT at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    last timestamptz;
    now_ timestamptz;
BEGIN
    IF every_us IS NULL OR every_us <= 0 OR max_wait_us IS NULL OR max_wait_us < 0 THEN
        RAISE EXCEPTION 'provider_pace_take: every_us must be positive and max_wait_us not negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO provider_pace AS p (name, last_at) VALUES (provider_pace_take.name, '-infinity')
        ON CONFLICT ON CONSTRAINT provider_pace_pkey DO NOTHING;
        SELECT p.last_at INTO last FROM provider_pace p WHERE p.name = provider_pace_take.name FOR UPDATE;
    END IF;
    now_ := clock_timestamp(); -- after the lock: the turn is measured from when it is given
    at := greatest(last + make_interval(secs => every_us / 1e6), now_);
    wait_us := floor(extract(epoch FROM at - now_) * 1e6)::bigint;
    taken := wait_us <= max_wait_us;
    IF taken THEN
        UPDATE provider_pace p SET last_at = at WHERE p.name = provider_pace_take.name;
    END IF;
END $$;
