// Package executor performs one effect: the exact order of
// docs/ARCHITECTURE.md, "Executing one effect", and
// the recovery of attempts whose worker died.
//
// For one planned target it renders the message from the frozen plan,
// waits for the provider (rate limit, concurrency slot), checks that the
// campaign still runs, commits a pending ledger row (the only way to
// start), calls the provider, commits the raw answer, classifies it and
// commits the settlement. Everything that can wait happens before the
// pending commit, so the in-doubt window is the call itself.
//
// Recovery of a pending row whose owner is dead (or of an unknown one):
//   - the provider dedupes by effect id → send again with the same id and
//     settle from the answer;
//   - the provider can be probed → probe: found → done; not found after
//     the settle window → failed (the key is free and the target is
//     enqueued again); not found inside the window → look again later;
//   - otherwise → unknown, for a human. Unknown is never treated as "did
//     not happen".
package executor
