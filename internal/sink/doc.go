// Package sink provides stand-ins for the outside world in tests: an SMTP
// server ([SMTP]) and an HTTP webhook ([Webhook]) that record exactly what
// they accepted, count effects per Message-ID or Idempotency-Key, and fail
// on command (reject, rate-limit, accept-then-drop, apply-then-fail,
// apply-then-hang).
//
// They run in the test process and listen on 127.0.0.1, so a worker started
// as a child process (crash tests) can be pointed at them by URL and killed
// while the sink keeps the evidence. Every method is safe for concurrent
// use; counts are exact (one mutex per sink). A sink is never for
// production: it accepts any credentials and keeps everything in memory.
package sink
