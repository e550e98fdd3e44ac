DROP TABLE notification_preference;
DROP TABLE notification_attempt;
DROP TABLE notification;
DROP TABLE notification_attention;
DROP FUNCTION onceplan_notify_event_ok(text);
