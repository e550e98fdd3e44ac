DROP TABLE inbound_token;
