ALTER TABLE suppression DROP CONSTRAINT suppression_event_fk;
DROP TABLE inbound_event;
