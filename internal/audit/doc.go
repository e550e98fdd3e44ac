// Package audit answers the question Onceplan exists for: did every approved
// target get exactly one effect? (docs/ARCHITECTURE.md, "The audit".)
//
// It owns three things, all read-only (the audit never writes the ledger):
//
//   - the metric ([ForPlan], [ForCampaign]): for a frozen plan, how many
//     targets were approved and how many of them stand exactly once, missing,
//     in doubt, failed, stranded or revoked, counted at each target's current
//     epoch by one SQL statement that stays fast at a million targets;
//   - reconciliation ([Reconcile]) of the ledger against evidence from
//     outside it: a maildir's files ([Evidence.ScanMaildir]), a provider's
//     delivery log ([Evidence.ImportLog]) and probes of the provider
//     ([ProbeOpts]), which count the messages with the effect id where the
//     provider can say (Postmark's search, Mailjet's message list, a
//     maildir's copies). The ledger cannot record a duplicate (its unique
//     index refuses the second blocking row), so duplicates are measured
//     here, in the world;
//   - the per-target export ([Export]), streamed as CSV or JSON.
//
// It is the one read model that joins several owners' tables in one
// statement, for speed and for one snapshot; it reads each through what its
// owner publishes in the schema (docs/ARCHITECTURE.md, "Where each rule
// lives"): the ledger's attempts, current epochs and suppressed records
// (effect_attempt, effect_current_epoch, effect_bumped_epoch,
// target_suppressed_record), the plan's frozen plans and lists
// (frozen_plan, target_list_summary, list_target), the campaign's rows
// (campaign_record, campaign_draft, campaign_submission, campaign_approval,
// campaign_run, campaign_trail) and the suppression list's
// (suppression_entry, suppression_removed), each inlined by PostgreSQL.
//
// # What the numbers mean
//
// Every approved target is counted in exactly one of exactly_once, missing,
// pending, unknown, failed, stranded and revoked, by the newest attempt at its
// key's current epoch (a blocking attempt is always the newest: nothing can
// start beside it). A target whose key was bumped to a new epoch and has no
// attempt there yet is missing, whatever happened at the earlier epoch.
// Targets are matched to the ledger by key alone, and a key does not depend
// on the message text, so a target done under version 1 of a campaign counts
// as done for version 2.
//
// The metric holds when missing, in doubt (pending + unknown) and duplicates
// are all zero — and, when evidence was gathered, when the evidence neither
// lacks a done effect nor shows one the ledger does not have as done.
package audit
