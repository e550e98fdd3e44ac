ALTER TABLE suppression DROP CONSTRAINT suppression_event_fk;
DROP INDEX target_address_any;
DROP TABLE inbound_event;
