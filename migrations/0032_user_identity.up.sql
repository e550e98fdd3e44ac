-- The users' identity, published by package internal/auth, which owns
-- app_user (docs/ARCHITECTURE.md, "Where each rule lives"): the id, email
-- and name another package's statement shows for an actor (who decided a
-- single effect's approval, who acted on a campaign). Like migration
-- 0030's functions, a plain LANGUAGE sql function, STABLE, PARALLEL SAFE,
-- not STRICT, not SECURITY DEFINER, returning a set: PostgreSQL inlines it
-- where it is named, and it reads with its caller's privileges. Roles and
-- the password hash stay auth's alone.
CREATE FUNCTION user_identity() RETURNS TABLE (id bigint, email text, name text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT u.id, u.email, u.name FROM app_user u
$$;
