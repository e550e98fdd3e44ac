// Package jobs is the only package that knows River: the job arguments, the
// queues (one per provider), the enqueueing of a started plan and the
// workers and maintenance that run them.
//
// River runs a job at least once; a rescued job may run twice. That is
// safe here because a job performs nothing by itself: it asks the ledger
// to claim its target's key, and PostgreSQL's unique index lets exactly one
// claim win. River's own uniqueness (which expires with job retention) is
// not relied on.
package jobs
