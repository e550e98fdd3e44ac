DROP INDEX campaign_created;
DROP TABLE api_idempotency;
