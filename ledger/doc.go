// Package ledger owns effect keys, the effects table and the invariants that
// make one approved effect happen at most once per target.
//
// # Effect keys
//
// An effect key ([Key]) names one intended effect: "v1:" followed by the
// lower-case hex SHA-256 of a canonical JSON object built from the event
// (campaign or scheduler occurrence), the tool (provider kind), the resolved
// [Target], the amount in integer minor units and an optional scope. See
// [NewKey] and [CanonicalJSON] for the exact rule. Generated text (subject,
// body, HTML) is never part of a key: [KeyInput] has no field for it, so an
// edited draft of the same intent keeps its keys and a target that already got
// its effect is not sent again.
//
// The canonicalisation is versioned by the "v1:" prefix. Keys are stored in
// frozen plans and in the ledger, so a change in how a key is computed (a
// field, a normalisation step, the IDNA or Unicode tables, the hash) must be
// introduced as a new version ("v2:") beside v1, never as a silent change of
// v1 keys. The golden vectors in testdata/key_vectors.json fail when v1 output
// changes. Watch dependency and toolchain upgrades: the IDNA and NFC tables
// come from golang.org/x/net/idna and golang.org/x/text/unicode/norm, which
// pick their Unicode version by Go release (Unicode 15 before go1.27, 17
// from it); a mapping that moves between versions changes keys of addresses
// that use it.
//
// Targets are normalised by exactly one rule per kind ([NormalizeEmail] for
// email addresses), shared by the plan importer and the key, so the address a
// plan shows is the address its key was built from.
//
// # The effects table
//
// The ledger records one row per attempt at (key, epoch) with a state: pending,
// done, unknown, failed, stranded or revoked. Its guarantees are:
//
//   - at most one blocking row (pending, done, unknown, stranded) per key and
//     epoch;
//   - only legal transitions: pending→done|failed|unknown|stranded,
//     unknown→done|failed, done→revoked, stranded→revoked, and nothing leaves
//     failed or revoked;
//   - the raw provider response is written once, committed before anything
//     parses it;
//   - a row with epoch > 0 exists only with a recorded bump (actor, reason)
//     behind it.
//
// These are enforced by PostgreSQL (a partial unique index, triggers and
// grants in the migrations package), not by this package's code alone: a
// direct SQL statement that breaks one of them fails. Code here translates
// those failures into errors callers can test with [errors.Is].
package ledger
