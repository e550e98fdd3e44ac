DROP FUNCTION user_identity();
