DROP FUNCTION provider_pace_take(text, bigint, bigint);
DROP TABLE provider_pace;
DROP FUNCTION provider_pace_forward();
