DROP TABLE worker_process;
