-- Which providers each worker process serves: its heartbeat
-- names them, so that a running campaign whose provider no live process
-- serves can be said to wait for nothing (executor.LiveWorkers), rather
-- than sit at "not started" with no word. A process from before this
-- migration serves none as far as the table knows, until its next beat
-- from a binary that writes the column.
ALTER TABLE worker_process ADD COLUMN providers text[] NOT NULL DEFAULT '{}';
