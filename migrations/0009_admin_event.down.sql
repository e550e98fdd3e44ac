DROP TABLE admin_event;
