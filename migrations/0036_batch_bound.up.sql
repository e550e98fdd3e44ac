-- A batch call is bound to its members (docs/ARCHITECTURE.md, "Batch
-- sending"): what the server never writes, PostgreSQL refuses to every
-- role, whatever the isolation level.
--
--   1. A call carries the targets of one plan, through that plan's
--      provider: the call names its plan (effect_batch.plan_id), its
--      provider is the plan's, and every attempt it carries was made for
--      that plan. (The server never mixes plans in a call; recovery
--      judges each attempt's gate against its own plan all the same.)
--   2. A call's attempts are written by the transaction that writes the
--      call, and by no other: both rows remember that transaction
--      (created_xact, batch_xact, set by the database, never by the
--      statement) and a foreign key makes them equal — as a plan's target
--      list's rows do (migration 0014). A call committed an hour ago, or
--      one no snapshot of the writer can see, has no call to point at.
--      At commit, the call carries exactly its size of attempts (a
--      deferred check: the order of the statements does not matter).
--   3. An attempt a call carried is answered by its call's answer only
--      (effect_response.batch_response_id): a raw answer of its own, sent
--      or re-sent, is refused, so that no attempt of a call is settled on
--      an answer that is not the call's.
--
-- Calls written before this migration keep what they hold: they name no
-- plan and carry transaction 0, which no transaction has, so nothing is
-- ever added to them. Recovery derives every call it would send again
-- from its members' frozen plan and refuses any that differs
-- (executor/call.go).
--
-- SQLSTATE OP004, as the call's other rules (migration 0033).

ALTER TABLE effect_batch ADD COLUMN plan_id bigint REFERENCES plan (id);
ALTER TABLE effect_batch ADD COLUMN created_xact xid8 NOT NULL DEFAULT '0';
ALTER TABLE effect_batch ALTER COLUMN created_xact SET DEFAULT pg_current_xact_id();
ALTER TABLE effect_batch ADD CONSTRAINT effect_batch_written_once UNIQUE (id, created_xact);

ALTER TABLE effect_batch_member ADD COLUMN batch_xact xid8 NOT NULL DEFAULT '0';
ALTER TABLE effect_batch_member ALTER COLUMN batch_xact SET DEFAULT pg_current_xact_id();
ALTER TABLE effect_batch_member ADD CONSTRAINT effect_batch_member_of_call FOREIGN KEY (batch_id, batch_xact)
    REFERENCES effect_batch (id, created_xact);

-- The archive's twins hold every column of their hot tables, in order
-- (archive_campaign moves rows with SELECT *).
ALTER TABLE effect_batch_archive ADD COLUMN plan_id bigint;
ALTER TABLE effect_batch_archive ADD COLUMN created_xact xid8;
ALTER TABLE effect_batch_member_archive ADD COLUMN batch_xact xid8;

-- 1 and 2, the call's own row: stamped by the database (its time and its
-- transaction, for the owner too), and of one plan, through its provider.
-- A plan is write-once: its provider checked here stays true.
CREATE FUNCTION effect_batch_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    planned text;
BEGIN
    NEW.created_at := now();
    NEW.created_xact := pg_current_xact_id();
    IF NEW.plan_id IS NULL THEN
        RAISE EXCEPTION 'batch call: it names the plan whose targets it carries'
            USING ERRCODE = 'OP004';
    END IF;
    SELECT p.provider INTO planned FROM plan p WHERE p.id = NEW.plan_id;
    IF planned IS DISTINCT FROM NEW.provider THEN
        RAISE EXCEPTION 'batch call: plan % sends through provider %, not %', NEW.plan_id, coalesce(planned, '(no such plan)'), NEW.provider
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER effect_batch_created_at ON effect_batch;
CREATE TRIGGER effect_batch_insert BEFORE INSERT ON effect_batch
    FOR EACH ROW EXECUTE FUNCTION effect_batch_insert();

-- 1, 2 and 3, each attempt of a call: claimed in the call's own
-- transaction (the foreign key above, and its creation time, now(): an
-- attempt's created_at is its transaction's start, effect_insert), while
-- pending, made for the call's plan, at a position within the call, and
-- not answered on its own.
CREATE OR REPLACE FUNCTION effect_batch_member_insert() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    st effect_state;
    born timestamptz;
    attempt_plan bigint;
    call_plan bigint;
    n int;
BEGIN
    NEW.batch_xact := pg_current_xact_id();
    -- Said here in words; the foreign key is the rule, checked against the
    -- latest committed rows whatever the snapshot.
    IF NOT EXISTS (SELECT 1 FROM effect_batch b WHERE b.id = NEW.batch_id AND b.created_xact = NEW.batch_xact) THEN
        RAISE EXCEPTION 'batch call %: its attempts are written with the call, in its transaction, and by no other', NEW.batch_id
            USING ERRCODE = 'OP004';
    END IF;
    SELECT e.state, e.created_at, e.plan_id INTO st, born, attempt_plan FROM effect e WHERE e.id = NEW.effect_id;
    IF st IS DISTINCT FROM 'pending' OR born IS DISTINCT FROM now() THEN
        RAISE EXCEPTION 'effect %: a batch call carries only attempts claimed in its own transaction, while pending', NEW.effect_id
            USING ERRCODE = 'OP004';
    END IF;
    SELECT b.size, b.plan_id INTO n, call_plan FROM effect_batch b WHERE b.id = NEW.batch_id;
    IF NEW.position >= n THEN
        RAISE EXCEPTION 'batch call %: position % is past its % attempts', NEW.batch_id, NEW.position, n
            USING ERRCODE = 'OP004';
    END IF;
    IF attempt_plan IS NULL OR attempt_plan IS DISTINCT FROM call_plan THEN
        RAISE EXCEPTION 'effect %: batch call % carries targets of plan % only, and this attempt is %', NEW.effect_id, NEW.batch_id,
            coalesce(call_plan::text, '(none)'), coalesce('of plan ' || attempt_plan, 'outside any plan')
            USING ERRCODE = 'OP004';
    END IF;
    IF EXISTS (SELECT 1 FROM effect_response r
               WHERE r.effect_id = NEW.effect_id AND r.batch_response_id IS NULL AND r.kind IN ('send', 'resend')) THEN
        RAISE EXCEPTION 'effect %: it has an answer of its own, so no batch call carries it', NEW.effect_id
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NEW;
END $$;

-- 2, at commit: a call carries exactly its size of attempts (positions
-- are below the size and unique, so they are 0 … size-1).
CREATE FUNCTION effect_batch_complete() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    n int;
BEGIN
    SELECT count(*) INTO n FROM effect_batch_member m WHERE m.batch_id = NEW.id;
    IF n <> NEW.size THEN
        RAISE EXCEPTION 'batch call %: it carries % attempts, not its size %', NEW.id, n, NEW.size
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER effect_batch_complete AFTER INSERT ON effect_batch
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION effect_batch_complete();

-- 3, each raw answer: an attempt a call carried takes its call's answer,
-- never a send or resend answer of its own (a probe's, or a person's
-- evidence, are its own: they name the attempt by its own effect id).
-- Once per statement, over the rows it inserted: a batch of a hundred
-- answers pays one lookup.
CREATE FUNCTION effect_response_own_of_member() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    member bigint;
BEGIN
    SELECT n.effect_id INTO member FROM new_responses n
    JOIN effect_batch_member m ON m.effect_id = n.effect_id
    WHERE n.batch_response_id IS NULL AND n.kind IN ('send', 'resend')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'effect %: a batch call carried it, so it is answered by its call''s answer only', member
            USING ERRCODE = 'OP004';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER effect_response_own_of_member AFTER INSERT ON effect_response
    REFERENCING NEW TABLE AS new_responses FOR EACH STATEMENT EXECUTE FUNCTION effect_response_own_of_member();

-- The columns the database sets are not the application's to write.
REVOKE INSERT ON effect_batch, effect_batch_member FROM onceplan_app;
GRANT INSERT (provider, call_key, request, size, plan_id) ON effect_batch TO onceplan_app;
GRANT INSERT (batch_id, position, effect_id) ON effect_batch_member TO onceplan_app;

-- A person is told what recovery refused: an alert in the campaign's
-- trail (approval.Service.Alert), announced to the operators with its
-- reason (package notify).
ALTER TABLE campaign_event
    DROP CONSTRAINT campaign_event_action_check,
    ADD CONSTRAINT campaign_event_action_check CHECK (action IN ('create', 'edit', 'import', 'submit', 'approve', 'reject',
        'freeze', 'start', 'pause', 'resume', 'cancel', 'complete', 'resolve', 'supersede', 'revoke', 'test_send', 'alert'));
