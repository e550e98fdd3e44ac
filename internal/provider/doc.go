// Package provider performs effects in the outside world: a file in a
// maildir, a message through an SMTP relay, a POST to an HTTP webhook.
//
// It owns three things the executor builds on:
//
//   - Send performs one effect and returns the provider's answer as raw
//     bytes, exactly as received, with a transport error encoded in it
//     (including whether the request had begun to leave). The executor
//     commits those bytes before anything reads them.
//   - Classify is a pure function of those bytes (the package-level
//     ClassifyMaildir, ClassifySMTP and ClassifyWebhook): the same bytes
//     give the same Verdict today and after a restart.
//   - Capabilities tell recovery what it may do with an attempt whose worker
//     died during the call (a pending ledger row with a dead owner).
//
// Every effect has one identity outside: [EffectID] (key ":" epoch), sent as
// the Idempotency-Key header, hashed into the SMTP/maildir Message-ID
// ([MessageID]) and into the maildir file name ([MaildirFileName]).
//
// What each kind guarantees after a crash:
//
//   - maildir: exactly once. The file name is a function of the effect, and
//     delivery is a hard link into new/, which the file system refuses when
//     the name exists; a repeat Send answers "already present" (done). So
//     recovery simply sends again. Probe looks in new/ and cur/.
//   - http with dedupe=true: exactly once, provided the endpoint really
//     ignores a repeated Idempotency-Key (as the operator declared): recovery
//     sends again with the same key and settles from the answer.
//   - http with probe=URL (and no dedupe): recovery asks GET URL/{EffectID};
//     found → done; not found after the settle window → failed, and the
//     target is sent again; not found inside it → ask later. This is exactly
//     once if the endpoint's probe is truthful and an effect becomes visible
//     to it within the settle window.
//   - postmark (Postmark's API, postmark.go): the effect id is sent as
//     Metadata onceplan_effect; recovery asks the outbound search by it:
//     found → done; not found after the settle window (default 2m) →
//     failed and sent again. Only within Postmark's retention (default 45
//     days, probe_retention=): past it recovery leaves the attempt
//     unknown for a person, never sends again. Postmark does not dedupe.
//   - smtp with probe=postmark or probe=mailjet (smtp_probe.go): the same
//     through the relay's API, the effect id in X-PM-Metadata-onceplan_effect
//     or X-MJ-CustomID; within the retention (Postmark 45 days, Mailjet an
//     assumed 30) it is exactly once as the probe is truthful.
//   - resend (Resend's API, resend.go): the effect id is the
//     Idempotency-Key, which Resend honours for 24 hours from the first
//     request (dedupe_window=): recovery sends again with it while that
//     window is open and Resend answers the first email's id without
//     sending again; past it recovery leaves the attempt unknown for a
//     person, never sends again.
//   - smtp with idempotency_header=NAME (smtp_dedupe.go): the same through
//     a relay that deduplicates by a message header (Resend's
//     Resend-Idempotency-Key, EmailEngine's X-EE-Idempotency-Key, 24 hours
//     each; another header needs dedupe_window=).
//   - http with neither, and smtp without probe: no way to ask. An attempt in doubt (a
//     crash during the call, a timeout or reset after the request left, an
//     HTTP 5xx) becomes unknown and waits for a human, who says whether it
//     arrived. SMTP has no dedupe and no probe: a relay keeps no record it
//     will answer questions about, and a repeat is a second message. The
//     Message-ID is stable, so a mailbox can at least recognise a duplicate.
//
// resend and postmark with batch=N are [Batcher]s (batch.go): one call of
// the service's batch endpoint carries up to N effects, each the same
// message a single Send posts, with its own verdict; Resend's call has an
// idempotency key derived from its effect ids ([BatchKey]), so recovery
// re-sends the stored request byte for byte, and Postmark's members are
// probed one by one by their metadata.
//
// Nothing here retries on its own: one Send is at most one attempt at the
// provider (an SMTP Send dials again only when a reused connection turns
// out dead before MAIL FROM was answered; Go's HTTP transport resends only
// a request of which nothing was written). Retries, backoff and quota
// pauses are the executor's.
//
// Providers are configured by URL ([Parse], [ParseFlag]); [Redacted] and
// String never show a password.
package provider
