DROP TRIGGER campaign_event_test_send ON campaign_event;
DROP FUNCTION campaign_event_test_send();
DROP TABLE test_send_message;
DROP FUNCTION test_send_message_gate();
