// Package faulttest holds the fault suite (docs/RELIABILITY.md,
// "Faults"): real `onceplan serve`
// and `onceplan worker` processes run campaigns while PostgreSQL is
// restarted, stopped or crashed under them, while providers are slow,
// flapping, resetting connections, rate limiting or down, and while the
// maildir's disk is full; and a full run is searched for secrets in its
// logs and error pages.
//
// As in internal/crashtest, the outside world is the only judge of how many
// effects happened: files in a maildir, the webhook receiver's applied
// effects, the SMTP server's accepted messages (internal/sink). The ledger's
// states are checked against docs/ARCHITECTURE.md, "The ledger:
// exactly-once lives in PostgreSQL", besides.
//
// Tests that restart PostgreSQL start a cluster of their own
// (internal/pgcluster) and never touch the shared TEST_DATABASE_URL one.
// The slow tests run only when ONCEPLAN_FAULTS=1 (`make test-faults`, which
// CI runs after `make test`); docs/RELIABILITY.md lists every fault, what
// the system did, and the test that shows it.
package faulttest
