package provider

// Postmark's batch call, POST /email/batch (postmarkapp.com/developer/
// user-guide/send-email-with-api/batch-emails): a JSON array of up to 500
// messages, each the object POST /email takes, answered 200 — even when
// some messages fail — with one result per message, in order, each shaped
// as POST /email's answer ({ErrorCode, Message, MessageID, …}). Postmark
// takes no idempotency key: each message carries its effect id in
// Metadata, as a single send does, so recovery probes each member by it.

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
)

// MaxPostmarkBatch is the most messages one POST /email/batch carries
// (Postmark's documented limit), and so the largest batch= of postmark://.
const MaxPostmarkBatch = 500

// MaxPostmarkCallBytes is the largest body one POST /email/batch may have:
// Postmark takes "up to 50 MB payload size, including attachments" and
// rejects a larger call whole
// (postmarkapp.com/developer/user-guide/send-email-with-api/batch-emails).
const MaxPostmarkCallBytes = 50_000_000

// BatchSize is the batch=N option (0: one message per call).
func (p *postmarkProvider) BatchSize() int { return p.batch }

// EncodeBatch is the JSON array of the messages Send would post for reqs,
// in order; the key is "" (Postmark takes none).
func (p *postmarkProvider) EncodeBatch(reqs []Request) (BatchRequest, error) {
	body, err := encodeBatch("Postmark", MaxPostmarkBatch, MaxPostmarkCallBytes, reqs, func(r Request) ([]byte, error) {
		return postmarkBody(r, p.api.stream)
	})
	if err != nil {
		return BatchRequest{}, err
	}
	return BatchRequest{Body: body}, nil
}

// SendBatch posts b to /email/batch with the server token; the raw answer
// is framed as Send's. b.Key is not sent: Postmark takes no key.
func (p *postmarkProvider) SendBatch(ctx context.Context, b BatchRequest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return postOnce(ctx, p.api.client, p.api.endpoint+"/email/batch", b.Body, http.Header{"X-Postmark-Server-Token": {p.api.token}}, nil), nil
}

// ClassifyBatch interprets a raw answer of SendBatch; see
// [ClassifyPostmarkBatch].
func (p *postmarkProvider) ClassifyBatch(raw []byte, n int) []Verdict {
	return ClassifyPostmarkBatch(raw, n)
}

// ClassifyPostmarkBatch interprets a raw answer of a postmark SendBatch of
// n messages, one verdict per position:
//   - 2xx with a JSON array of n results: each result by the rule
//     ClassifyPostmark applies to a 2xx answer of one message (ErrorCode 0
//     and a MessageID → done; ErrorCode 100 → failed, retryable; another
//     ErrorCode → failed for good; ErrorCode 429 → quota; neither →
//     unknown, the probe will tell);
//   - a 2xx whose body is not an array of n results → unknown for every
//     message, Unmatched (nothing is guessed; the probe will tell);
//   - any other answer is the whole call's, the same for every message,
//     as ClassifyPostmark says of it (429 quota, 401 and 422 with an
//     ErrorCode failed, 5xx and a transport error after writing unknown, a
//     transport error before writing failed and retryable).
func ClassifyPostmarkBatch(raw []byte, n int) []Verdict {
	if n <= 0 {
		return []Verdict{}
	}
	f, ok := parseFramed(raw)
	if !ok || f.code < 200 || f.code > 299 {
		return sameVerdicts(ClassifyPostmark(raw), n)
	}
	var results []json.RawMessage
	if json.Unmarshal(f.body, &results) != nil || len(results) != n {
		got := "not a list of results"
		if results != nil {
			got = strconv.Itoa(len(results)) + " results"
		}
		return sameVerdicts(Verdict{Outcome: OutcomeUnknown, Unmatched: true, Reason: "Postmark answered HTTP " + oneLine(f.status) + bodySnippet(f.body) +
			" (" + got + " for a batch of " + strconv.Itoa(n) + " messages: which was sent cannot be told; the probe will tell)"}, n)
	}
	out := make([]Verdict, n)
	for i, r := range results {
		a, code := decodePostmarkAnswer(r)
		said := "Postmark answered HTTP " + oneLine(f.status) + " for this message of the batch" + bodySnippet(r)
		out[i] = postmarkResult(a, code, said, f.header)
	}
	return out
}
