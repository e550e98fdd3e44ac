ALTER TABLE worker_process DROP COLUMN providers;
