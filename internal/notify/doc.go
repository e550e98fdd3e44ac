// Package notify tells people when a campaign needs them: a draft waits
// for approval (the approvers), a version reached its quorum or was
// rejected (its proposer), targets need a person because they are unknown,
// stranded or failed (the operators, in batches), a campaign completed
// (its proposer and whoever started it, with the exactly-once headline).
//
// It owns the notifiers (--notify NAME=URL: mailto: through a configured
// email provider, or an http(s) webhook with a Slack-compatible JSON
// body, optionally HMAC-signed), the messages, the users' preferences and
// the record of every notification and every try to deliver it
// (migration 0020).
//
// What it guarantees:
//   - a notification never blocks or changes a campaign: a decision only
//     puts one announcement job on the queue inside its own transaction
//     (approval.Announcer), so a notification exists exactly when its
//     decision committed, and the decision never waits for a notifier;
//   - an event is expanded once: one notification per notifier and
//     recipient, unique in PostgreSQL, so a retried expansion writes
//     nothing twice; each is delivered by a job of its own, bounded in
//     time, retried with backoff a bounded number of times;
//   - every notification and every attempt, with the notifier's answer,
//     is recorded write-once (the application role may not update or
//     delete them), and failures show on the admin page and in /metrics;
//   - attention messages are batched: at most one per campaign per
//     window, counted as the UI counts (approval.CampaignCounts);
//   - a user's preference decides which events reach them by email; a
//     webhook is a channel, not a person, and carries every event it is
//     configured for.
//
// Delivery is at least once: an answer lost on the way (a timeout after
// the request left) is tried again, and a receiver can recognise a repeat
// by its X-Onceplan-Notification header (an email by its Message-ID).
// Package jobs runs the announcements, deliveries and the attention scan
// on River; this package knows nothing of River.
package notify
