// Package toolcall owns single effects: an agent runtime's tool calls,
// one at a time, through the same ledger as campaigns.
//
// A call is named by its identity — the event (the run's or trigger's
// stable occurrence id), the tool, the target, an amount and a scope,
// and the user it is begun for (an agent token's user) — whose v1 key in
// the single effects' own key space ([KeyOf]) is the call's key: never a
// campaign target's, whatever the identity names, and never another
// user's call (docs/ARCHITECTURE.md, "Single agent effects"). Who may
// read a call is one rule, [Reader], which every door asks. Its args (the
// JSON the tool is called with) are stored and hashed beside the key,
// never part of it: a retry with the same identity and other args is
// refused (422, [ErrArgsMismatch]), so "set A, set B, restore A" under one
// event id performs once, and under three event ids three times.
//
// [Service.Begin] commits the intent before the tool body runs: the call's
// args (bound to the key for good), a pending ledger row (the ledger's
// partial unique index decides between concurrent callers: exactly one wins)
// and its lease. The winner performs the call, passing the key to the
// outside system as its idempotency key, and settles it ([Service.Settle])
// with the outside system's raw answer, which is committed in the same
// transaction as, and before, the outcome (docs/ARCHITECTURE.md, "Executing
// one effect"). Everyone else is told what holds the key: done (replay the
// recorded result), pending (in flight), unknown (in doubt: a person
// resolves it), awaiting approval.
//
// A lease that ends without a settle is in doubt, never "did not happen".
// It is recovered by the policy the attempt was begun under, as campaigns
// are by their provider's capabilities:
//   - dedupe (the outside system ignores a repeat of the key): the next
//     begin takes the attempt over and re-performs it with the same key;
//   - probe (a URL that answers whether the key's effect exists): Onceplan
//     asks it; found → done; not found once the tool's settle window after
//     the lease has passed → failed, and the key is free again;
//   - none: unknown, shown to a person, who resolves it through the same
//     routes and pages as a campaign's unknowns.
//
// Tools are registered with their recovery and approval policy by the
// schema's owner (`onceplan tool add`), or on first use with no recovery
// and no approval — the only registration the server's database role can
// write. A tool that requires approval performs nothing until a person
// approves the exact args (their digest); other args need a new approval.
// Agent tokens may begin, heartbeat, settle and read; never approve or
// resolve. The rules the server never legitimately breaks are enforced by
// PostgreSQL (migration 0021), not by this package alone.
package toolcall
