// Package approval owns who may do what to a campaign and the campaign's
// state machine: draft → pending_approval → approved (frozen) → running ⇄
// paused → completed | cancelled, with rejection back to draft.
//
// Guarantees, each checked inside the transaction that holds the campaign's
// row lock:
//   - an approval carries the plan hash the approver was shown; a different
//     current hash is refused (onceplan.ErrConflict) and nothing is frozen;
//   - nobody approves a draft they proposed or last edited (PostgreSQL checks
//     this too), and an agent token never approves, rejects, starts, pauses,
//     resumes or cancels;
//   - a campaign needing N approvals freezes on the N-th distinct approver;
//   - freezing writes the plan and the approvals in one transaction; starting
//     writes the run record and every job in one transaction;
//   - every decision is appended to the write-once audit trail.
//
// It exports the lifecycle's operations — Service's actions and a test
// send, each entering through the lifecycle table (lifecycle.go) — and the
// reads other packages need; the statements that write a campaign's rows
// stay inside, behind the table.
package approval
