// Package pgcluster runs the "embedded default" database: a private PostgreSQL
// cluster kept under onceplan's data directory and started from the PostgreSQL
// server binaries installed on the machine (initdb, pg_ctl, postgres).
//
// It owns one PGDATA directory and guarantees that
//   - the cluster is created once (initdb) and reused afterwards, so data survives
//     restarts; existing data is never chowned, chmodded, moved or deleted;
//   - it listens only on a unix socket in a directory that only the account running
//     PostgreSQL can enter, which is why trust authentication is acceptable;
//   - every onceplan process given the same directory uses the same cluster: the
//     first one starts it, the others adopt it, and the last one to Close stops it
//     (shared/exclusive flock(2) locks next to PGDATA decide who is last);
//   - the postmaster outlives a caller killed with SIGKILL, and the next Open adopts
//     it, from any process; a postmaster that itself died is restarted and
//     PostgreSQL's crash recovery brings the data back;
//   - given Options.Roles, it creates an owner role (no login) and an application role
//     beside the bootstrap superuser, and hands the database and everything in it to
//     the owner, so that the application can connect as a role that owns nothing;
//   - when onceplan runs as root, PostgreSQL (which refuses to run as root) runs as
//     the "postgres" account, or the one named by ONCEPLAN_PG_USER;
//   - every failure is reported as one sentence saying what is wrong and what to do.
//
// We evaluated github.com/fergusstrange/embedded-postgres (v1.34.0) and wrote this
// small manager instead, because that library
//   - downloads PostgreSQL binaries from Maven by default rather than using the ones
//     the operator installed and patches through the distribution;
//   - runs initdb and the server as the current user, which fails when onceplan runs
//     as root (as it does in containers and CI);
//   - does not adopt a postmaster left running after its caller was SIGKILLed, so the
//     next start fails on the occupied data directory instead of carrying on.
package pgcluster
