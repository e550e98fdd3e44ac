package provider

// Batch calls: several effects in one request, for the services that take
// them (resend_batch.go, postmark_batch.go). Each effect keeps its own
// identity inside the call — the message in a batch is the same JSON
// object a single Send posts, with the effect id in its headers (and
// Postmark's Metadata) — so probes, the stand-ins' duplicate counting and
// a person reading the service's log see the same thing either way.
//
// The executor stores a BatchRequest before the call and the raw answer
// before it parses it (docs/ARCHITECTURE.md, "A job of several targets");
// recovery re-sends the stored bytes with the stored key, or probes each
// member by its effect id. EncodeBatch is therefore a pure function of the
// requests, and ClassifyBatch of the answer.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// BatchRequest is one call carrying several effects, exactly as sent: it
// is stored before the call and re-sent byte for byte by recovery.
type BatchRequest struct {
	// Key is the service's idempotency key for the call (Resend's
	// Idempotency-Key); "" when the service takes none (Postmark).
	Key string
	// Body is the request body.
	Body []byte
}

// Batcher is a Provider that can send several effects in one call (option
// batch=N).
type Batcher interface {
	Provider
	// BatchSize is the batch=N option: at most N effects per call; 0 when
	// batch= was not given (then the executor sends one call per effect).
	BatchSize() int
	// EncodeBatch returns the exact request for reqs, in order. It is a
	// pure function of reqs: the same reqs give the same bytes and key,
	// the key derived from the ordered effect ids ([BatchKey]). A request
	// that cannot be put into a call (what makes a single Send answer a
	// build line: a subject with a line break, a bad unsubscribe link)
	// gives a *BatchMemberError naming its position. Requests over the
	// bytes the service takes in one call give a *CallTooLargeError saying
	// how many of the first fit. Otherwise only a caller's mistake fails:
	// no requests, more than the service takes in one call, or one effect
	// twice.
	EncodeBatch(reqs []Request) (BatchRequest, error)
	// SendBatch posts b exactly as given and returns the raw answer framed
	// as Send's are (a framed response or a transport-error line). Like
	// Send it interprets nothing, never posts twice, and its error is only
	// for "could not even try" (ctx already done): then nothing was sent.
	SendBatch(ctx context.Context, b BatchRequest) (raw []byte, err error)
	// ClassifyBatch interprets a raw answer of SendBatch for a batch of n
	// effects: exactly n verdicts, by position (none for n <= 0). It is
	// pure and deterministic, and never panics on any input.
	ClassifyBatch(raw []byte, n int) []Verdict
}

// The kinds with a batch endpoint.
var (
	_ Batcher = (*resendProvider)(nil)
	_ Batcher = (*postmarkProvider)(nil)
)

// BatchSizeOf is p's batch=N (at most N effects per call), or 0 when p
// sends one effect per call.
func BatchSizeOf(p Provider) int {
	if b, ok := p.(Batcher); ok {
		return b.BatchSize()
	}
	return 0
}

// BatchMemberError says which request of a batch cannot be put into a
// call, and why. Position is the request's index in the batch, from 0.
type BatchMemberError struct {
	Position int
	Err      error
}

func (e *BatchMemberError) Error() string {
	return fmt.Sprintf("the message at position %d of the batch cannot be sent: %v", e.Position, e.Err)
}

func (e *BatchMemberError) Unwrap() error { return e.Err }

// CallTooLargeError says a batch would be larger than the service takes in
// one call (Postmark: 50 MB). Fits is how many of its first requests do fit
// in one call (0 when the first alone does not); the caller sends those and
// the rest in calls of their own.
type CallTooLargeError struct {
	Service string
	Limit   int
	Fits    int
}

func (e *CallTooLargeError) Error() string {
	return fmt.Sprintf("a %s batch call carries at most %d bytes; only its first %d messages fit", e.Service, e.Limit, e.Fits)
}

// batchKeyPrefix starts every batch key, so a key in a service's log says
// it is a batch's, not an effect's.
const batchKeyPrefix = "onceplan-batch-"

// BatchKey is the idempotency key of a call carrying reqs: "onceplan-batch-"
// and the hex SHA-256 of their effect ids, in order, joined by line feeds
// (79 characters, within Resend's 256). Another order, another member or
// another epoch is another key; the same effects in the same order are
// the same key, so a re-sent batch is recognised as the first.
func BatchKey(reqs []Request) string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = EffectID(r.Key, r.Epoch)
	}
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return batchKeyPrefix + hex.EncodeToString(sum[:])
}

// encodeBatch is the JSON array of the bodies encode makes of reqs, in
// order, each exactly as a single Send of it posts: at most most of them
// and at most maxBytes bytes (the service's limits; maxBytes 0: none
// documented), each effect once. A request encode refuses is a
// *BatchMemberError at its position; an array over maxBytes is a
// *CallTooLargeError, once every request was found encodable.
func encodeBatch(service string, most, maxBytes int, reqs []Request, encode func(Request) ([]byte, error)) ([]byte, error) {
	if len(reqs) == 0 || len(reqs) > most {
		return nil, fmt.Errorf("a %s batch holds 1 to %d messages, not %d", service, most, len(reqs))
	}
	seen := make(map[string]int, len(reqs))
	var b []byte
	fits := -1 // how many of the first requests fit in maxBytes, once one does not
	for i, r := range reqs {
		id := EffectID(r.Key, r.Epoch)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("effect %s is at positions %d and %d of one batch: it would be sent twice", id, j, i)
		}
		seen[id] = i
		body, err := encode(r)
		if err != nil {
			return nil, &BatchMemberError{Position: i, Err: err}
		}
		if i == 0 {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		b = append(b, body...)
		if fits < 0 && maxBytes > 0 && len(b)+1 > maxBytes {
			fits = i
		}
	}
	if fits >= 0 {
		return nil, &CallTooLargeError{Service: service, Limit: maxBytes, Fits: fits}
	}
	return append(b, ']'), nil
}

// sameVerdicts is v for each of n members: what a whole answer (a 429, a
// 5xx, a lost connection) says of every effect the call carried.
func sameVerdicts(v Verdict, n int) []Verdict {
	out := make([]Verdict, max(n, 0))
	for i := range out {
		out[i] = v
	}
	return out
}
