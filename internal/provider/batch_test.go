package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
)

// newBatcher parses rawURL as a provider called "mail" and returns it as
// a Batcher; it is closed before the stand-in.
func newBatcher(t *testing.T, rawURL string) provider.Batcher {
	t.Helper()
	p, err := provider.Parse("mail", rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	b, ok := p.(provider.Batcher)
	require.True(t, ok, "%T is not a Batcher", p)
	return b
}

// batchOf is one request per seed, each to its own address.
func batchOf(seeds ...string) []provider.Request {
	reqs := make([]provider.Request, len(seeds))
	for i, s := range seeds {
		reqs[i] = testRequest(s)
		reqs[i].Target = s + "@example.test"
		reqs[i].Message.To = s + "@example.test"
		reqs[i].Message.ListUnsubscribe = "https://onceplan.example.test/u/" + s
	}
	return reqs
}

func effectIDs(reqs []provider.Request) []string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = provider.EffectID(r.Key, r.Epoch)
	}
	return ids
}

// TestBatchSizeIsTheOption: batch=N is what BatchSizeOf says; without it,
// and for a kind with no batch endpoint, 0 (one call per effect).
func TestBatchSizeIsTheOption(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]int{
		"resend://re_key@":                         0,
		"resend://re_key@?batch=1":                 1,
		"resend://re_key@?batch=100":               100,
		"postmark://tok@":                          0,
		"postmark://tok@?batch=500":                500,
		"postmark://tok@?message_stream=b&batch=7": 7,
		"smtp://mail.example.test:587":             0,
		"maildir:///x":                             0,
	} {
		p, err := provider.Parse("p", raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, provider.BatchSizeOf(p), raw)
		require.NoError(t, p.Close())
	}
	// The stand-ins refuse what the services refuse: the same limits.
	require.Equal(t, sink.MaxResendBatch, provider.MaxResendBatch)
	require.Equal(t, sink.MaxPostmarkBatch, provider.MaxPostmarkBatch)
}

// TestEncodeBatchIsAFunctionOfTheRequests: the same requests give the
// same bytes and key (what recovery re-sends is what was sent), another
// order another key; each element is the body a single Send posts; a
// request that cannot be put into a call names its position.
func TestEncodeBatchIsAFunctionOfTheRequests(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	rs := newBatcher(t, sink.WithOption(s.URL(), "batch=3"))
	pm := newBatcher(t, "postmark://tok@?batch=3&message_stream=broadcast")
	reqs := batchOf("enc-a", "enc-b", "enc-c")
	swapped := []provider.Request{reqs[1], reqs[0], reqs[2]}

	for _, p := range []provider.Batcher{rs, pm} {
		b, err := p.EncodeBatch(reqs)
		require.NoError(t, err, p.Kind())
		again, err := p.EncodeBatch(batchOf("enc-a", "enc-b", "enc-c"))
		require.NoError(t, err)
		require.Equal(t, b, again, "%s: the same requests, the same call", p.Kind())
		other, err := p.EncodeBatch(swapped)
		require.NoError(t, err)
		require.NotEqual(t, b.Body, other.Body)
		var elems []json.RawMessage
		require.NoError(t, json.Unmarshal(b.Body, &elems))
		require.Len(t, elems, 3)
		for i, e := range elems {
			require.Contains(t, string(e), effectIDs(reqs)[i], "%s: member %d carries its effect id", p.Kind(), i)
		}

		// A member that cannot be put into a call: its position.
		bad := batchOf("enc-a", "enc-b", "enc-c")
		bad[1].Message.Subject = "two\nlines"
		_, err = p.EncodeBatch(bad)
		var me *provider.BatchMemberError
		require.ErrorAs(t, err, &me, p.Kind())
		require.Equal(t, 1, me.Position)
		require.EqualError(t, err, "the message at position 1 of the batch cannot be sent: the subject contains a line break")
		bad = batchOf("enc-a", "enc-b", "enc-c")
		bad[2].Message.ListUnsubscribe = "https://x.test/u/a b"
		_, err = p.EncodeBatch(bad)
		require.ErrorAs(t, err, &me, p.Kind())
		require.Equal(t, 2, me.Position)

		// A caller's mistake is no member's fault.
		for _, mistake := range [][]provider.Request{nil, {reqs[0], reqs[1], reqs[0]}} {
			_, err = p.EncodeBatch(mistake)
			require.Error(t, err)
			require.False(t, errors.As(err, &me), "%s: %v", p.Kind(), err)
		}
	}
	tooMany := make([]provider.Request, provider.MaxResendBatch+1)
	for i := range tooMany {
		tooMany[i] = testRequest("many")
		tooMany[i].Epoch = i
	}
	_, err := rs.EncodeBatch(tooMany)
	require.EqualError(t, err, "a Resend batch holds 1 to 100 messages, not 101")
	_, err = pm.EncodeBatch(tooMany)
	require.NoError(t, err, "Postmark takes 500")

	// Resend's key: derived from the ordered effect ids, within 256
	// characters; Postmark takes none.
	b, _ := rs.EncodeBatch(reqs)
	o, _ := rs.EncodeBatch(swapped)
	require.Equal(t, provider.BatchKey(reqs), b.Key)
	require.Regexp(t, `^onceplan-batch-[0-9a-f]{64}$`, b.Key)
	require.NotEqual(t, b.Key, o.Key, "another order, another key")
	bumped := batchOf("enc-a", "enc-b", "enc-c")
	bumped[2].Epoch = 1
	require.NotEqual(t, b.Key, provider.BatchKey(bumped), "another epoch, another key")
	pb, _ := pm.EncodeBatch(reqs)
	require.Empty(t, pb.Key)
	require.NotContains(t, string(b.Body), s.APIKey(), "the stored request holds no API key")

	// Each element is byte for byte the body a single Send posts.
	for _, r := range reqs {
		_, v := send(t, rs, r)
		require.Equal(t, provider.OutcomeDone, v.Outcome)
	}
	var elems []json.RawMessage
	require.NoError(t, json.Unmarshal(b.Body, &elems))
	for i, req := range s.RequestLog() {
		require.Equal(t, "/emails", req.Path)
		require.Equal(t, string(req.Body), string(elems[i]))
	}
}

// TestResendBatchAgainstTheStandIn: one call of three emails, the second
// one Resend refuses: the others are created and settle done with their
// ids, the refused one fails with Resend's reason; the same call again
// answers the same ids and creates nothing; another body under the same
// key creates nothing and leaves every member unknown.
func TestResendBatchAgainstTheStandIn(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newBatcher(t, sink.WithOption(s.URL(), "batch=3"))
	reqs := batchOf("rb-a", "rb-b", "rb-c")
	reqs[1].Message.Subject = "" // Resend requires a subject
	b, err := p.EncodeBatch(reqs)
	require.NoError(t, err)
	ctx := context.Background()

	raw, err := p.SendBatch(ctx, b)
	require.NoError(t, err)
	vs := p.ClassifyBatch(raw, 3)
	created := s.Effects()
	require.Len(t, created, 2, "%s", raw)
	require.Equal(t, []provider.Verdict{
		{Outcome: provider.OutcomeDone, Receipt: created[0].ID},
		{Outcome: provider.OutcomeFailed, Reason: "Resend refused this email of the batch: emails[1]: The request body is missing one or more required fields: from, to and subject."},
		{Outcome: provider.OutcomeDone, Receipt: created[1].ID},
	}, vs)
	ids := effectIDs(reqs)
	require.Equal(t, ids[0], created[0].HeaderOf("X-Onceplan-Effect"))
	require.Equal(t, ids[2], created[1].HeaderOf("X-Onceplan-Effect"))
	require.Equal(t, map[string]int{"rb-a@example.test": 1, "rb-c@example.test": 1}, s.CountByRecipient())
	log := s.RequestLog()
	require.Len(t, log, 1)
	require.Equal(t, "/emails/batch", log[0].Path)
	require.Equal(t, b.Key, log[0].IdempotencyKey)
	require.Equal(t, "Bearer "+s.APIKey(), log[0].Authorization)
	require.Equal(t, b.Body, log[0].Body, "posted exactly as encoded")
	require.NotContains(t, string(raw), s.APIKey())

	// Recovery re-sends the stored request: the same answer, nothing new.
	raw2, err := p.SendBatch(ctx, b)
	require.NoError(t, err)
	require.Equal(t, vs, p.ClassifyBatch(raw2, 3))
	require.Len(t, s.Effects(), 2)
	require.True(t, s.RequestLog()[1].Replayed)

	// Other bytes under the same key: Resend's 409, every member unknown.
	other, err := p.EncodeBatch(batchOf("rb-a", "rb-b", "rb-c"))
	require.NoError(t, err)
	raw3, err := p.SendBatch(ctx, provider.BatchRequest{Key: b.Key, Body: other.Body})
	require.NoError(t, err)
	for _, v := range p.ClassifyBatch(raw3, 3) {
		require.Equal(t, provider.OutcomeUnknown, v.Outcome, "%s", raw3)
		require.Contains(t, v.Reason, "invalid_idempotent_request")
		require.Contains(t, v.Reason, "this batch's key was already used with a different request")
	}
	require.Equal(t, map[string]int{ids[0]: 1, ids[2]: 1}, s.CountByEffect(), "each effect once")

	// A context already done sends nothing.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.SendBatch(done, b)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, s.RequestLog(), 3)
}

// TestResendBatchInDoubtIsUnknownAndTheStoredRequestSettlesIt: an answer
// lost after Resend created the emails (a dropped connection, a 500)
// leaves every member unknown; re-sending the stored request settles each
// with its id, and Resend holds each email once.
func TestResendBatchInDoubtIsUnknownAndTheStoredRequestSettlesIt(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newBatcher(t, sink.WithOption(s.URL(), "batch=3"))
	ctx := context.Background()
	s.ApplyThenFail(1, 500) // the first call: created, then 500
	s.ApplyThenDrop(1)      // the second: created, then no answer
	for _, seeds := range [][]string{{"lost-a", "lost-b", "lost-c"}, {"five-a", "five-b"}} {
		reqs := batchOf(seeds...)
		b, err := p.EncodeBatch(reqs)
		require.NoError(t, err)
		raw, err := p.SendBatch(ctx, b)
		require.NoError(t, err)
		for _, v := range p.ClassifyBatch(raw, len(reqs)) {
			require.Equal(t, provider.OutcomeUnknown, v.Outcome, "%s", raw)
		}
		again, err := p.SendBatch(ctx, b)
		require.NoError(t, err)
		for i, v := range p.ClassifyBatch(again, len(reqs)) {
			require.Equal(t, provider.OutcomeDone, v.Outcome, "%s", again)
			require.Equal(t, effectIDs(reqs)[i], emailByID(t, s, v.Receipt).HeaderOf("X-Onceplan-Effect"))
		}
	}
	require.Len(t, s.Effects(), 5)
	for id, n := range s.CountByEffect() {
		require.Equal(t, 1, n, id)
	}
}

func emailByID(t *testing.T, s *sink.Resend, id string) sink.ResendEmail {
	t.Helper()
	for _, e := range s.Effects() {
		if e.ID == id {
			return e
		}
	}
	t.Fatalf("the stand-in holds no email %q", id)
	return sink.ResendEmail{}
}

// TestResendBatchWholeAnswers: an answer about the call is every member's.
func TestResendBatchWholeAnswers(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newBatcher(t, sink.WithOption(s.URL(), "batch=3"))
	reqs := batchOf("whole-a", "whole-b")
	b, err := p.EncodeBatch(reqs)
	require.NoError(t, err)
	s.RateLimitNext(1, 3)
	raw, err := p.SendBatch(context.Background(), b)
	require.NoError(t, err)
	vs := p.ClassifyBatch(raw, 2)
	require.Len(t, vs, 2)
	for _, v := range vs {
		require.Equal(t, provider.OutcomeQuota, v.Outcome)
		require.Equal(t, 3*time.Second, v.RetryAfter)
	}
	require.Empty(t, s.Effects(), "a 429 creates nothing")

	closed := newBatcher(t, "resend://"+resendSecret+"@?batch=2&endpoint="+url.QueryEscape("http://"+closedAddr(t)))
	raw, err = closed.SendBatch(context.Background(), b)
	require.NoError(t, err)
	for _, v := range closed.ClassifyBatch(raw, 2) {
		require.Equal(t, provider.OutcomeFailed, v.Outcome)
		require.True(t, v.Retryable)
		require.Contains(t, v.Reason, "the request to Resend could not be sent")
		require.NotContains(t, v.Reason, resendSecret)
	}
}

// TestClassifyResendBatch: Resend's documented batch answers, and answers
// that do not add up.
func TestClassifyResendBatch(t *testing.T) {
	t.Parallel()
	resp := func(status, headers, body string) []byte {
		return []byte("HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\n" + headers + "\r\n" + body)
	}
	done := func(id string) provider.Verdict { return provider.Verdict{Outcome: provider.OutcomeDone, Receipt: id} }
	all := func(v provider.Verdict, n int) []provider.Verdict {
		out := make([]provider.Verdict, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	unknown := func(body, why string) []provider.Verdict {
		return all(provider.Verdict{Outcome: provider.OutcomeUnknown, Unmatched: true, Reason: "Resend answered HTTP 200 OK: " + body + " (" + why + " for a batch of 3 emails: which was sent cannot be told)"}, 3)
	}
	for _, c := range []struct {
		raw  []byte
		want []provider.Verdict
	}{
		// The documentation's example answers.
		{resp("200 OK", "", `{"data":[{"id":"ae2014de-c168-4c61-8267-70d2662a1ce1"},{"id":"faccb7a5-8a28-4e9a-ac64-8da1cc3bc1cb"},{"id":"6e1e7c3e-0000-4000-8000-000000000003"}]}`),
			[]provider.Verdict{done("ae2014de-c168-4c61-8267-70d2662a1ce1"), done("faccb7a5-8a28-4e9a-ac64-8da1cc3bc1cb"), done("6e1e7c3e-0000-4000-8000-000000000003")}},
		{resp("200 OK", "", `{"data":[{"id":"ae2014de"},{"id":"faccb7a5"}],"errors":[{"index":0,"message":"The `+"`to`"+` field is missing."}]}`),
			[]provider.Verdict{{Outcome: provider.OutcomeFailed, Reason: "Resend refused this email of the batch: The `to` field is missing."}, done("ae2014de"), done("faccb7a5")}},
		{resp("200 OK", "", `{"data":[],"errors":[{"index":2,"message":"a"},{"index":0},{"index":1,"message":"c"}]}`),
			[]provider.Verdict{{Outcome: provider.OutcomeFailed, Reason: "Resend refused this email of the batch"},
				{Outcome: provider.OutcomeFailed, Reason: "Resend refused this email of the batch: c"},
				{Outcome: provider.OutcomeFailed, Reason: "Resend refused this email of the batch: a"}}},
		{resp("200 OK", "", `{"data":[{"id":"a"},{},{"id":"c"}],"errors":null}`), []provider.Verdict{done("a"), done("HTTP 200"), done("c")}},
		// Counts that do not add up: never guessed.
		{resp("200 OK", "", `{"data":[{"id":"a"}],"errors":[{"index":1,"message":"x"}]}`),
			unknown(`{"data":[{"id":"a"}],"errors":[{"index":1,"message":"x"}]}`, "1 ids and 1 errors")},
		{resp("200 OK", "", `{"data":[{"id":"a"},{"id":"b"}],"errors":[{"index":3,"message":"x"}]}`),
			unknown(`{"data":[{"id":"a"},{"id":"b"}],"errors":[{"index":3,"message":"x"}]}`, "an error whose index is not a position of its own")},
		{resp("200 OK", "", `{"data":[{"id":"a"}],"errors":[{"index":1},{"index":1}]}`),
			unknown(`{"data":[{"id":"a"}],"errors":[{"index":1},{"index":1}]}`, "an error whose index is not a position of its own")},
		{resp("200 OK", "", `{"data":[{"id":"a"},{"id":"b"}],"errors":[{"index":"1"}]}`),
			unknown(`{"data":[{"id":"a"},{"id":"b"}],"errors":[{"index":"1"}]}`, "an error whose index is not a position of its own")},
		{resp("200 OK", "", `{"id":"49a3999c"}`), unknown(`{"id":"49a3999c"}`, "no list of ids")},
		{resp("200 OK", "", `[{"id":"a"},{"id":"b"},{"id":"c"}]`), unknown(`[{"id":"a"},{"id":"b"},{"id":"c"}]`, "no list of ids")},
		{resp("200 OK", "", `{"data":[{"id":"a"},{"id":"b"},{"id":"c"}],"errors":{}}`),
			unknown(`{"data":[{"id":"a"},{"id":"b"},{"id":"c"}],"errors":{}}`, "errors that are not a list")},
		// Whole answers: every member's, by ClassifyResend's rules.
		{resp("429 Too Many Requests", "Retry-After: 2\r\n", `{"statusCode":429,"message":"Too many requests.","name":"rate_limit_exceeded"}`),
			all(provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 2 * time.Second, Reason: "Resend answered HTTP 429 Too Many Requests rate_limit_exceeded: Too many requests."}, 3)},
		{resp("429 Too Many Requests", "Ratelimit-Reset: 7\r\n", `{"statusCode":429,"message":"daily quota","name":"daily_quota_exceeded"}`),
			all(provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 7 * time.Second, Reason: "Resend answered HTTP 429 Too Many Requests daily_quota_exceeded: daily quota"}, 3)},
		{resp("409 Conflict", "", `{"statusCode":409,"message":"Same idempotency key used with a different request payload.","name":"invalid_idempotent_request"}`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Resend answered HTTP 409 Conflict invalid_idempotent_request: Same idempotency key used with a different request payload. (this batch's key was already used with a different request: those emails, or others, were probably sent)"}, 3)},
		{resp("409 Conflict", "Retry-After: 3\r\n", `{"statusCode":409,"message":"in progress","name":"concurrent_idempotent_requests"}`),
			all(provider.Verdict{Outcome: provider.OutcomeRetryLater, RetryAfter: 3 * time.Second, Reason: "Resend answered HTTP 409 Conflict concurrent_idempotent_requests: in progress"}, 3)},
		{resp("422 Unprocessable Entity", "", `{"statusCode":422,"message":"emails[1]: missing subject","name":"validation_error"}`),
			all(provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Resend answered HTTP 422 Unprocessable Entity validation_error: emails[1]: missing subject"}, 3)},
		{resp("408 Request Timeout", "", ``), all(provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "Resend answered HTTP 408 Request Timeout"}, 3)},
		{resp("500 Internal Server Error", "", `{"statusCode":500,"message":"oops","name":"internal_server_error"}`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Resend answered HTTP 500 Internal Server Error internal_server_error: oops"}, 3)},
		{[]byte(`transport-error wrote-request=false error="dial tcp 127.0.0.1:1: connect: connection refused"`),
			all(provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true, Reason: "the request to Resend could not be sent: dial tcp 127.0.0.1:1: connect: connection refused"}, 3)},
		{[]byte(`transport-error wrote-request=true error="EOF"`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed after the request to Resend was sent: EOF"}, 3)},
		{[]byte(`garbage`), all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised Resend answer: garbage"}, 3)},
	} {
		got := provider.ClassifyResendBatch(c.raw, 3)
		require.Equal(t, c.want, got, "%q", c.raw)
		require.Equal(t, got, provider.ClassifyResendBatch(c.raw, 3), "deterministic")
	}
	require.Empty(t, provider.ClassifyResendBatch(resp("200 OK", "", `{"data":[]}`), 0))
}

// TestPostmarkBatchAgainstTheStandIn: one call of three messages, the
// second one Postmark refuses: per-member verdicts in order, two messages
// at the stand-in, and the probe a recovery uses finds each sent member by
// its effect id (and not the refused one).
func TestPostmarkBatchAgainstTheStandIn(t *testing.T) {
	t.Parallel()
	srv := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(srv.Close)
	p := newBatcher(t, sink.WithOption(srv.URL(), "batch=3"))
	ctx := context.Background()
	reqs := batchOf("pb-a", "pb-b", "pb-c")
	reqs[1].Message.From = "" // Postmark: "Invalid 'From' address"
	b, err := p.EncodeBatch(reqs)
	require.NoError(t, err)
	raw, err := p.SendBatch(ctx, b)
	require.NoError(t, err)
	msgs := srv.Messages()
	require.Len(t, msgs, 2, "%s", raw)
	require.Equal(t, 1, srv.Requests(), "one call")
	vs := p.ClassifyBatch(raw, 3)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: msgs[0].MessageID}, vs[0])
	require.Equal(t, provider.OutcomeFailed, vs[1].Outcome)
	require.False(t, vs[1].Retryable)
	require.Equal(t, `Postmark answered HTTP 200 OK for this message of the batch: {"ErrorCode":300,"Message":"Invalid 'From' address: ''."} (invalid email request)`, vs[1].Reason)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: msgs[1].MessageID}, vs[2])

	ids := effectIDs(reqs)
	for i, want := range []struct {
		found   bool
		receipt string
	}{{true, msgs[0].MessageID}, {false, ""}, {true, msgs[1].MessageID}} {
		res, err := p.Probe(ctx, reqs[i].Key, reqs[i].Epoch)
		require.NoError(t, err)
		require.Equal(t, want.found, res.Found, "member %d", i)
		require.Equal(t, want.receipt, res.Receipt, "member %d", i)
	}
	require.Equal(t, map[string]int{ids[0]: 1, ids[2]: 1}, srv.Effects())
	require.Equal(t, "pb-c@example.test", msgs[1].To)
	require.Equal(t, provider.MessageID(reqs[2].Key, reqs[2].Epoch), msgs[1].Headers["Message-ID"], "the same message a single send posts")
	require.Equal(t, "<https://onceplan.example.test/u/pb-c>", msgs[1].Headers["List-Unsubscribe"])
}

// TestPostmarkBatchInDoubtIsProbedMemberByMember: Postmark accepted the
// call and then failed (or the answer was lost): every member unknown,
// and the probe finds each; a whole refusal fails or pauses every member.
func TestPostmarkBatchInDoubtIsProbedMemberByMember(t *testing.T) {
	t.Parallel()
	srv := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(srv.Close)
	p := newBatcher(t, sink.WithOption(srv.URL(), "batch=2"))
	ctx := context.Background()
	reqs := batchOf("pd-a", "pd-b")
	b, err := p.EncodeBatch(reqs)
	require.NoError(t, err)

	srv.AcceptThenFail(1, 503)
	raw, err := p.SendBatch(ctx, b)
	require.NoError(t, err)
	for _, v := range p.ClassifyBatch(raw, 2) {
		require.Equal(t, provider.OutcomeUnknown, v.Outcome, "%s", raw)
	}
	for _, r := range reqs {
		res, err := p.Probe(ctx, r.Key, r.Epoch)
		require.NoError(t, err)
		require.True(t, res.Found)
		require.Equal(t, 1, res.Count())
	}

	srv.FailNext(1, 429, nil, `{"ErrorCode":429,"Message":"Rate limit exceeded."}`)
	raw, err = p.SendBatch(ctx, b)
	require.NoError(t, err)
	require.Equal(t, []provider.Verdict{
		{Outcome: provider.OutcomeQuota, Reason: `Postmark answered HTTP 429 Too Many Requests: {"ErrorCode":429,"Message":"Rate limit exceeded."}`},
		{Outcome: provider.OutcomeQuota, Reason: `Postmark answered HTTP 429 Too Many Requests: {"ErrorCode":429,"Message":"Rate limit exceeded."}`},
	}, p.ClassifyBatch(raw, 2))

	wrong := newBatcher(t, "postmark://wrong-token@?batch=2&endpoint="+url.QueryEscape(srv.Endpoint()))
	raw, err = wrong.SendBatch(ctx, b)
	require.NoError(t, err)
	for _, v := range wrong.ClassifyBatch(raw, 2) {
		require.Equal(t, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Postmark refused the server token (HTTP 401)"}, v)
	}
	require.Len(t, srv.Messages(), 2, "only the first call was accepted")
}

// TestClassifyPostmarkBatch: per-result verdicts by ClassifyPostmark's
// rule for one answer, whole answers for every member, and a 200 whose
// results do not match the batch leaves every member to the probe.
func TestClassifyPostmarkBatch(t *testing.T) {
	t.Parallel()
	all := func(v provider.Verdict, n int) []provider.Verdict {
		out := make([]provider.Verdict, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	ok := func(id string) string {
		return `{"ErrorCode":0,"Message":"OK","MessageID":"` + id + `","SubmittedAt":"2010-11-26T12:01:05.1794748-05:00","To":"receiver1@example.com"}`
	}
	for _, c := range []struct {
		raw  []byte
		want []provider.Verdict
	}{
		{framed("200 OK", nil, `[`+ok("b7bc2f4a-e38e-4336-af7d-e6c392c2f817")+`,`+ok("e2ecbbfc-fe12-463d-b933-9fe22915106d")+`,`+ok("c3f5b1a0")+`]`),
			[]provider.Verdict{{Outcome: provider.OutcomeDone, Receipt: "b7bc2f4a-e38e-4336-af7d-e6c392c2f817"}, {Outcome: provider.OutcomeDone, Receipt: "e2ecbbfc-fe12-463d-b933-9fe22915106d"}, {Outcome: provider.OutcomeDone, Receipt: "c3f5b1a0"}}},
		{framed("200 OK", nil, `[{"ErrorCode":406,"Message":"inactive"},{"ErrorCode":100,"Message":"maintenance"},{"ErrorCode":0,"Message":"OK"}]`),
			[]provider.Verdict{
				{Outcome: provider.OutcomeFailed, Reason: `Postmark answered HTTP 200 OK for this message of the batch: {"ErrorCode":406,"Message":"inactive"} (the recipient is inactive at Postmark: it bounced or complained)`},
				{Outcome: provider.OutcomeFailed, Retryable: true, Reason: `Postmark answered HTTP 200 OK for this message of the batch: {"ErrorCode":100,"Message":"maintenance"} (Postmark is under maintenance)`},
				{Outcome: provider.OutcomeUnknown, Reason: `Postmark answered HTTP 200 OK for this message of the batch: {"ErrorCode":0,"Message":"OK"} (no ErrorCode 0 and MessageID: accepted or not, the probe will tell)`}}},
		{framed("200 OK", nil, `[{"ErrorCode":0,"MessageID":"a"},{"ErrorCode":0,"MessageID":"b"}]`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Unmatched: true, Reason: `Postmark answered HTTP 200 OK: [{"ErrorCode":0,"MessageID":"a"},{"ErrorCode":0,"MessageID":"b"}] (2 results for a batch of 3 messages: which was sent cannot be told; the probe will tell)`}, 3)},
		{framed("200 OK", nil, `{"ErrorCode":0,"Message":"OK","MessageID":"x"}`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Unmatched: true, Reason: `Postmark answered HTTP 200 OK: {"ErrorCode":0,"Message":"OK","MessageID":"x"} (not a list of results for a batch of 3 messages: which was sent cannot be told; the probe will tell)`}, 3)},
		{framed("422 Unprocessable Entity", nil, `{"ErrorCode":300,"Message":"Invalid email request"}`),
			all(provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `Postmark answered HTTP 422 Unprocessable Entity: {"ErrorCode":300,"Message":"Invalid email request"} (invalid email request)`}, 3)},
		{framed("429 Too Many Requests", map[string]string{"Retry-After": "4"}, ``),
			all(provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 4 * time.Second, Reason: "Postmark answered HTTP 429 Too Many Requests"}, 3)},
		{framed("500 Internal Server Error", nil, ``), all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Postmark answered HTTP 500 Internal Server Error"}, 3)},
		{[]byte(`transport-error wrote-request=false error="connection refused"`),
			all(provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true, Reason: "the request could not be sent to Postmark: connection refused"}, 3)},
		{[]byte(`transport-error wrote-request=true error="EOF"`),
			all(provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection to Postmark failed after the request was sent: EOF"}, 3)},
	} {
		got := provider.ClassifyPostmarkBatch(c.raw, 3)
		require.Equal(t, c.want, got, "%q", c.raw)
		require.Equal(t, got, provider.ClassifyPostmarkBatch(c.raw, 3), "deterministic")
	}
}

// FuzzClassifyBatch: whatever the answer and the batch's size, each kind
// gives exactly one verdict per member, the same ones twice, each sane.
func FuzzClassifyBatch(f *testing.F) {
	f.Add(true, []byte("HTTP/1.1 200 OK\r\n\r\n{\"data\":[{\"id\":\"a\"}],\"errors\":[{\"index\":1,\"message\":\"x\"}]}"), 2)
	f.Add(false, []byte("HTTP/1.1 200 OK\r\n\r\n[{\"ErrorCode\":0,\"MessageID\":\"m\"},{\"ErrorCode\":300}]"), 2)
	f.Add(true, []byte(`transport-error wrote-request=true error="EOF"`), 5)
	f.Fuzz(func(t *testing.T, resend bool, raw []byte, n int) {
		n %= 600 // a batch is at most 500; keep the allocation small
		classify := provider.ClassifyPostmarkBatch
		if resend {
			classify = provider.ClassifyResendBatch
		}
		vs := classify(raw, n)
		require.Len(t, vs, max(n, 0))
		require.Equal(t, vs, classify(raw, n))
		for _, v := range vs {
			require.Contains(t, []provider.Outcome{provider.OutcomeDone, provider.OutcomeFailed, provider.OutcomeUnknown,
				provider.OutcomeQuota, provider.OutcomeRetryLater}, v.Outcome)
			require.NotContains(t, v.Reason, "\n")
			require.False(t, strings.ContainsRune(v.Receipt, '\n'))
			require.LessOrEqual(t, v.RetryAfter, 24*time.Hour)
			if v.Outcome == provider.OutcomeDone {
				require.NotEmpty(t, v.Receipt)
				require.True(t, strings.HasPrefix(string(raw), "HTTP/"))
			}
		}
	})
}

// TestPostmarkBatchOverFiftyMegabytesSaysHowManyFit: Postmark rejects a
// call over 50 MB whole, so EncodeBatch refuses to make one and says how
// many of the first messages fit; those make a call the stand-in accepts.
// A message too large for any call fits none.
func TestPostmarkBatchOverFiftyMegabytesSaysHowManyFit(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	b := newBatcher(t, sink.WithOption(pm.URL(), "batch=100"))
	reqs := batchOf("a", "b", "c", "d", "e", "f", "g")
	for i := range reqs {
		reqs[i].Message.HTML = strings.Repeat("&", 1_400_000) // 8.4 MB of JSON
	}
	_, err := b.EncodeBatch(reqs)
	var big *provider.CallTooLargeError
	require.ErrorAs(t, err, &big)
	require.Equal(t, 5, big.Fits, "five messages of 8.4 MB fit in 50 MB, six do not")
	require.Equal(t, provider.MaxPostmarkCallBytes, big.Limit)
	require.EqualError(t, err, "a Postmark batch call carries at most 50000000 bytes; only its first 5 messages fit")

	call, err := b.EncodeBatch(reqs[:big.Fits])
	require.NoError(t, err)
	require.LessOrEqual(t, len(call.Body), provider.MaxPostmarkCallBytes)
	raw, err := b.SendBatch(context.Background(), call)
	require.NoError(t, err)
	for i, v := range b.ClassifyBatch(raw, big.Fits) {
		require.Equal(t, provider.OutcomeDone, v.Outcome, "message %d: %.300s", i, raw)
	}
	require.Len(t, pm.Messages(), big.Fits)

	huge := batchOf("h")
	huge[0].Message.HTML = strings.Repeat("&", 8_400_000)
	_, err = b.EncodeBatch(huge)
	require.ErrorAs(t, err, &big)
	require.Zero(t, big.Fits)

	// Resend documents no limit on a call's bytes.
	rs := sink.NewResend(sink.ResendOpts{})
	t.Cleanup(rs.Close)
	_, err = newBatcher(t, sink.WithOption(rs.URL(), "batch=100")).EncodeBatch(reqs)
	require.NoError(t, err)
}
