DROP TABLE api_token;
DROP TABLE login_attempt;
DROP TABLE session;
