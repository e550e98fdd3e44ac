-- Every process that executes effects says it is alive here every few
-- seconds. A pending ledger row whose owner stopped saying so is in doubt:
-- the owner died during (or just before) the provider call, and recovery
-- takes over.
CREATE TABLE worker_process (
    owner      text PRIMARY KEY CHECK (btrim(owner) <> ''),
    host       text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
