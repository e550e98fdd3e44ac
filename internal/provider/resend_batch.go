package provider

// Resend's batch call, POST /emails/batch (resend.com/docs/api-reference/
// emails/send-batch-emails): a JSON array of up to 100 emails, each the
// object POST /emails takes, under one Idempotency-Key that Resend honours
// as for one email — the same key and body within the window answer the
// first answer again without sending; the same key with another body is
// 409 invalid_idempotent_request. With "x-batch-validation: permissive"
// each email is validated on its own: 200 {"data": [{"id"}…], "errors":
// [{"index", "message"}…]}, data listing the emails created in the order
// of their positions, errors the refused ones by position.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// MaxResendBatch is the most emails one POST /emails/batch carries
// (Resend's documented limit), and so the largest batch= of resend://.
const MaxResendBatch = 100

// BatchSize is the batch=N option (0: one email per call).
func (p *resendProvider) BatchSize() int { return p.batch }

// EncodeBatch is the JSON array of the emails Send would post for reqs,
// in order, under the key [BatchKey] derives from their effect ids.
func (p *resendProvider) EncodeBatch(reqs []Request) (BatchRequest, error) {
	body, err := encodeBatch("Resend", MaxResendBatch, 0, reqs, func(r Request) ([]byte, error) {
		_, body, err := resendRequest(r)
		return body, err
	})
	if err != nil {
		return BatchRequest{}, err
	}
	return BatchRequest{Key: BatchKey(reqs), Body: body}, nil
}

// SendBatch posts b to /emails/batch with "Authorization: Bearer API_KEY",
// "Idempotency-Key: b.Key" and "x-batch-validation: permissive" (so one
// email Resend refuses does not fail the others). The raw answer is
// framed as Send's.
func (p *resendProvider) SendBatch(ctx context.Context, b BatchRequest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := http.Header{"Authorization": {"Bearer " + p.apiKey}, "X-Batch-Validation": {"permissive"}}
	if b.Key != "" {
		h["Idempotency-Key"] = []string{b.Key}
	}
	return postOnce(ctx, p.client, p.endpoint+"/batch", b.Body, h, p.scrub), nil
}

// ClassifyBatch interprets a raw answer of SendBatch; see
// [ClassifyResendBatch].
func (p *resendProvider) ClassifyBatch(raw []byte, n int) []Verdict {
	return ClassifyResendBatch(raw, n)
}

// ClassifyResendBatch interprets a raw answer of a resend SendBatch of n
// emails, one verdict per position:
//   - 2xx {"data", "errors"} that adds up (as many ids and errors as
//     emails, each error's index a distinct position): a position in
//     errors → failed for good, with its message; the others take the ids
//     in order → done, receipt the id (else "HTTP <code>", as
//     ClassifyResend's);
//   - a 2xx that does not add up → unknown for every email, Unmatched:
//     which email is which cannot be told, and nothing is guessed;
//   - any other answer is the whole call's, the same for every email, by
//     ClassifyResend's rules (429 quota, 409 retry_later, 408 and a
//     transport error before writing failed and retryable, other 4xx
//     failed, 5xx, 3xx and a transport error after writing unknown); 409
//     invalid_idempotent_request says the batch's key was used with
//     another body.
func ClassifyResendBatch(raw []byte, n int) []Verdict {
	if n <= 0 {
		return []Verdict{}
	}
	f, ok := parseFramed(raw)
	if !ok || f.code < 200 || f.code > 299 {
		return sameVerdicts(classifyResend(raw, "this batch's key was already used with a different request: those emails, or others, were probably sent"), n)
	}
	obj := jsonObject(f.body)
	doesNotAddUp := func(why string) []Verdict {
		return sameVerdicts(Verdict{Outcome: OutcomeUnknown, Unmatched: true, Reason: resendSaid(f, obj) +
			" (" + why + " for a batch of " + strconv.Itoa(n) + " emails: which was sent cannot be told)"}, n)
	}
	var data, errs []json.RawMessage
	if obj == nil || json.Unmarshal(obj["data"], &data) != nil {
		return doesNotAddUp("no list of ids")
	}
	if e, listed := obj["errors"]; listed && json.Unmarshal(e, &errs) != nil {
		return doesNotAddUp("errors that are not a list")
	}
	if len(data)+len(errs) != n {
		return doesNotAddUp(fmt.Sprintf("%d ids and %d errors", len(data), len(errs)))
	}
	out := make([]Verdict, n)
	refused := make([]bool, n)
	for _, e := range errs {
		eobj := jsonObject(e)
		var i int
		if json.Unmarshal(eobj["index"], &i) != nil || i < 0 || i >= n || refused[i] {
			return doesNotAddUp("an error whose index is not a position of its own")
		}
		refused[i] = true
		reason := "Resend refused this email of the batch"
		if msg := jsonString(eobj, "message"); msg != "" {
			reason += ": " + msg
		}
		out[i] = Verdict{Outcome: OutcomeFailed, Reason: reason}
	}
	next := 0
	for i := range out {
		if refused[i] {
			continue
		}
		receipt := jsonString(jsonObject(data[next]), "id")
		if receipt == "" {
			receipt = "HTTP " + strconv.Itoa(f.code)
		}
		out[i] = Verdict{Outcome: OutcomeDone, Receipt: receipt}
		next++
	}
	return out
}
