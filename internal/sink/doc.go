// Package sink provides stand-ins for the outside world in tests: an SMTP
// server ([SMTP], optionally deduplicating by a header as Resend's and
// EmailEngine's relays do), an HTTP webhook ([Webhook]), Resend's email
// API ([Resend]), Postmark's email and messages API ([Postmark], which can
// also search what an SMTP sink acting as Postmark's relay accepted) and
// Mailjet's message API over an SMTP sink ([Mailjet]) that record exactly
// what they accepted, count effects per Message-ID, Idempotency-Key,
// effect id or recipient, and fail on command (reject,
// rate-limit, accept-then-drop, apply-then-fail, apply-then-hang).
//
// They run in the test process and listen on 127.0.0.1, so a worker started
// as a child process (crash tests) can be pointed at them by URL and killed
// while the sink keeps the evidence. Every method is safe for concurrent
// use; counts are exact (one mutex per sink). A sink is never for
// production: it accepts any credentials and keeps everything in memory.
package sink
