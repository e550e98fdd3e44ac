-- Takes back what 0008 granted onceplan_app. The role itself stays: roles
-- belong to the whole server, and other databases may use it.
DO $$
DECLARE
    owner name := (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'effect'::regclass);
BEGIN
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM onceplan_app', current_schema());
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM onceplan_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA %I REVOKE SELECT, INSERT ON TABLES FROM onceplan_app', owner, current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA %I REVOKE USAGE ON SEQUENCES FROM onceplan_app', owner, current_schema());
END
$$;

DROP FUNCTION onceplan_grant_river();
