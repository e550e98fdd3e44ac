package provider_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
)

func newResendSink(t *testing.T, opts sink.ResendOpts) *sink.Resend {
	t.Helper()
	s := sink.NewResend(opts)
	t.Cleanup(s.Close)
	return s
}

// newResend parses a resend provider called "mail"; it is closed before
// the sink.
func newResend(t *testing.T, rawURL string) provider.Provider {
	t.Helper()
	p, err := provider.Parse("mail", rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

const resendSecret = "re_123456789_secret"

func TestResendParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url    string
		window time.Duration
		shown  string
	}{
		{"resend://" + resendSecret + "@", 24 * time.Hour, "mail=resend://xxxxx@"},
		{"resend://" + resendSecret + "@api.resend.com", 24 * time.Hour, "mail=resend://xxxxx@api.resend.com"},
		{"RESEND://" + resendSecret + "@api.resend.com?dedupe_window=1h&rate=2/s", time.Hour, "mail=resend://xxxxx@api.resend.com?dedupe_window=1h&rate=2/s"},
		{"resend://" + resendSecret + "@?endpoint=http%3A%2F%2F127.0.0.1%3A8025&concurrency=1", 24 * time.Hour, "mail=resend://xxxxx@?endpoint=http%3A%2F%2F127.0.0.1%3A8025&concurrency=1"},
		{"resend://" + resendSecret + "@?endpoint=https%3A%2F%2Fresend.example.test%2Fv1", 24 * time.Hour, "mail=resend://xxxxx@?endpoint=https%3A%2F%2Fresend.example.test%2Fv1"},
	} {
		p, err := provider.Parse("mail", c.url)
		require.NoError(t, err, c.url)
		require.Equal(t, "resend", p.Kind())
		require.Equal(t, provider.Capabilities{Dedupe: true, DedupeWindow: c.window}, p.Capabilities(), c.url)
		require.Equal(t, c.shown, p.String())
		require.NotContains(t, p.String(), resendSecret)
		// What String shows parses again as the same provider.
		again, err := provider.ParseFlag(p.String())
		require.NoError(t, err)
		require.Equal(t, p.Capabilities(), again.Capabilities())
		require.Equal(t, p.String(), again.String())
		_, err = p.Probe(context.Background(), testKey("x"), 0)
		require.ErrorIs(t, err, provider.ErrNoProbe)
		require.NoError(t, p.Close())
		require.NoError(t, again.Close())
	}
}

func TestResendParseBad(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"resend://api.resend.com", "has no API key"},
		{"resend://", "has no API key"},
		{"resend://user:" + resendSecret + "@api.resend.com", "without ':'"},
		{"resend://" + resendSecret + "@api.resend.com/emails", "must not have a path"},
		{"resend://" + resendSecret + "@api.resend.com?endpoint=https%3A%2F%2Fx.test", "both a host and endpoint="},
		{"resend://" + resendSecret + "@?endpoint=http%3A%2F%2Fresend.example.test", "plain http is allowed only to 127.0.0.1 or localhost"},
		{"resend://" + resendSecret + "@?endpoint=ftp%3A%2F%2F127.0.0.1", "is not an http(s) URL"},
		{"resend://" + resendSecret + "@?dedupe_window=forever", "dedupe_window \"forever\" is not a positive duration"},
		{"resend://" + resendSecret + "@?dedupe_window=0s", "is not a positive duration"},
		{"resend://" + resendSecret + "@?settle=1m", "settle applies only"},
		{"resend://" + resendSecret + "@?dedupe=true", "unknown option \"dedupe\" for a resend provider"},
		{"resend://" + resendSecret + "@?probe=https%3A%2F%2Fx.test", "unknown option \"probe\""},
		{"resend://" + resendSecret + "@api.resend.com:99999", "port \"99999\" is not a number"},
		{"resend://" + resendSecret + "@api.resend.com\n", "not valid"},
	} {
		p, err := provider.Parse("mail", c.url)
		require.Error(t, err, c.url)
		require.Nil(t, p)
		require.ErrorIs(t, err, provider.ErrInvalidProvider)
		require.Contains(t, err.Error(), c.want, c.url)
		require.NotContains(t, err.Error(), resendSecret, "the API key in the error for %q", c.url)
		require.NotContains(t, err.Error(), "\n")
	}
	_, err := provider.ParseFlag("mail resend://" + resendSecret + "@")
	require.Error(t, err)
	require.NotContains(t, err.Error(), resendSecret)
}

// TestResendKeyIsRedacted: the API key is the whole userinfo, so Redacted
// hides it (an SMTP URL hides only the password).
func TestResendKeyIsRedacted(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"resend://" + resendSecret + "@api.resend.com",
		"resend://" + resendSecret + "@",
		"Resend://" + resendSecret + "@api.resend.com?dedupe_window=1h",
		"resend://" + resendSecret + "@api.resend.com:99999",     // does not parse
		"resend://" + resendSecret + "@api.resend.com/%zz?x=1#f", // does not parse
	} {
		r := provider.Redacted(raw)
		require.NotContains(t, r, resendSecret, raw)
		require.Contains(t, r, "xxxxx@", raw)
	}
}

func TestResendHappyPathAndRepeat(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, s.URL())
	r := testRequest("resend-happy")
	r.Message.ListUnsubscribe = "https://onceplan.example.test/u/tok-123"
	raw, v := send(t, p, r)
	require.Equal(t, provider.OutcomeDone, v.Outcome, "%s", raw)
	require.Regexp(t, `^4ef9a417-`, v.Receipt)
	require.NotContains(t, string(raw), s.APIKey(), "the raw answer holds no API key")

	// The request is the documented one: Bearer key, the effect id as the
	// Idempotency-Key, and the documented body fields.
	log := s.RequestLog()
	require.Len(t, log, 1)
	require.Equal(t, "Bearer "+s.APIKey(), log[0].Authorization)
	id := provider.EffectID(r.Key, r.Epoch)
	require.Equal(t, id, log[0].IdempotencyKey)
	var body map[string]any
	require.NoError(t, json.Unmarshal(log[0].Body, &body))
	require.Equal(t, map[string]any{
		"from": "Onceplan News <news@onceplan.test>", "to": []any{"ada@example.test"},
		"subject": "Your November invoice, Ada", "text": r.Message.Text, "html": r.Message.HTML,
		"headers": map[string]any{
			"X-Onceplan-Effect":     id,
			"List-Unsubscribe":      "<https://onceplan.example.test/u/tok-123>",
			"List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
		},
	}, body)

	// A repeat with the same key and body: the same id, no second email.
	_, again := send(t, p, r)
	require.Equal(t, v, again)
	require.Equal(t, map[string]int{id: 1}, s.CountByIdempotencyKey())
	require.Equal(t, map[string]int{"ada@example.test": 1}, s.CountByRecipient())
	require.True(t, s.RequestLog()[1].Replayed)

	// A transactional message: no List-Unsubscribe, text only.
	t2 := testRequest("resend-transactional")
	t2.Message.HTML = ""
	_, v2 := send(t, p, t2)
	require.Equal(t, provider.OutcomeDone, v2.Outcome)
	e := s.Effects()[1]
	require.Empty(t, e.HeaderOf("List-Unsubscribe"))
	require.NotContains(t, string(e.Body), `"html"`)
}

func TestResendSameKeyOtherBodyIsUnknown(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, s.URL())
	r := testRequest("resend-other-body")
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	r.Message.Subject = "Edited after the first send"
	raw, v := send(t, p, r)
	require.Contains(t, string(raw), `"name":"invalid_idempotent_request"`)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	require.Contains(t, v.Reason, "invalid_idempotent_request")
	require.Len(t, s.Effects(), 1)
}

func TestResendAcceptedThenFailedIsUnknownAndARepeatSettlesIt(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, s.URL())
	s.ApplyThenFail(1, 500)
	s.ApplyThenDrop(1) // applies to the request after the failed one's
	r := testRequest("resend-5xx")
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	require.Contains(t, v.Reason, "HTTP 500")
	_, again := send(t, p, r) // recovery: the same key
	require.Equal(t, provider.OutcomeDone, again.Outcome)
	require.Len(t, s.Effects(), 1)

	lost := testRequest("resend-lost")
	raw, v := send(t, p, lost)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome, "%s", raw)
	require.Contains(t, string(raw), "wrote-request=true")
	_, again = send(t, p, lost)
	require.Equal(t, provider.OutcomeDone, again.Outcome)
	require.Equal(t, s.Effects()[1].ID, again.Receipt)
	require.Len(t, s.Effects(), 2)
}

func TestResendHangIsUnknownAndARepeatMeanwhileWaits(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	s.ApplyThenHang(1, 3*time.Second)
	p := newResend(t, sink.WithOption(s.URL(), "timeout=300ms"))
	r := testRequest("resend-hang")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw, err := p.Send(context.Background(), r)
		require.NoError(t, err)
		require.Equal(t, provider.OutcomeUnknown, p.Classify(raw).Outcome, "%s", raw)
	}()
	await.Until(t, time.Minute, "the server creating the hanging request's email", func() bool { return len(s.Effects()) == 1 })
	// While the first request is in progress, a repeat is told so: ask later.
	raw, v := send(t, p, r)
	if v.Outcome == provider.OutcomeRetryLater {
		require.Contains(t, string(raw), "concurrent_idempotent_requests")
		require.Equal(t, provider.DefaultRetryLaterAfter, v.RetryAfter)
	} else { // the first request's timeout ended the hang first
		require.Equal(t, provider.OutcomeDone, v.Outcome)
	}
	await.Group(t, &wg, time.Minute, "the first, hanging request to end")
	await.Until(t, time.Minute, "a repeat answered done once the first request ended", func() bool {
		_, v := send(t, p, r)
		return v.Outcome == provider.OutcomeDone
	})
	require.Len(t, s.Effects(), 1)
}

func TestResendRateLimitIsQuota(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, s.URL())
	s.RateLimitNext(1, 3)
	r := testRequest("resend-429")
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeQuota, v.Outcome)
	require.Equal(t, 3*time.Second, v.RetryAfter)
	require.Contains(t, v.Reason, "rate_limit_exceeded")
	require.Empty(t, s.Effects(), "a 429 creates nothing")
	_, v = send(t, p, r)
	require.Equal(t, provider.OutcomeDone, v.Outcome)
}

func TestResendWrongKeyFailsWithoutShowingIt(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, "resend://"+resendSecret+"@?endpoint="+url.QueryEscape(s.Endpoint()))
	raw, v := send(t, p, testRequest("resend-403"))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Resend answered HTTP 403 Forbidden invalid_api_key: API key is invalid."}, v)
	require.NotContains(t, string(raw), resendSecret)
	require.Equal(t, "Bearer "+resendSecret, s.RequestLog()[0].Authorization, "the key was sent, as a bearer token")
}

func TestResendUnreachableIsRetryableAndShowsNoKey(t *testing.T) {
	t.Parallel()
	p := newResend(t, "resend://"+resendSecret+"@?endpoint="+url.QueryEscape("http://"+closedAddr(t)))
	raw, v := send(t, p, testRequest("resend-refused"))
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.True(t, v.Retryable)
	require.Contains(t, v.Reason, "the request to Resend could not be sent")
	require.NotContains(t, string(raw), resendSecret)
	require.NotContains(t, v.Reason, resendSecret)
}

// TestResendSinkWindow: the sink honours a key for its window from the
// first request, and a repeat after it is a new email (as Resend's is):
// why recovery never sends again once the window has closed.
func TestResendSinkWindow(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := newResendSink(t, sink.ResendOpts{Window: time.Hour, Now: clock})
	p := newResend(t, s.URL())
	r := testRequest("resend-window")
	_, first := send(t, p, r)
	mu.Lock()
	now = now.Add(59 * time.Minute)
	mu.Unlock()
	_, v := send(t, p, r)
	require.Equal(t, first, v)
	require.Len(t, s.Effects(), 1)
	mu.Lock()
	now = now.Add(2 * time.Minute) // 61 minutes after the first request
	mu.Unlock()
	_, v = send(t, p, r)
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.NotEqual(t, first.Receipt, v.Receipt)
	require.Equal(t, map[string]int{provider.EffectID(r.Key, r.Epoch): 2}, s.CountByIdempotencyKey())
}

// TestClassifyResend: Resend's documented answers, with the
// documentation's example payloads.
func TestClassifyResend(t *testing.T) {
	t.Parallel()
	resp := func(status, headers, body string) []byte {
		return []byte("HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\n" + headers + "\r\n" + body)
	}
	for _, c := range []struct {
		raw  []byte
		want provider.Verdict
	}{
		{resp("200 OK", "", `{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}`),
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}},
		{resp("200 OK", "", ``), provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 200"}},
		{resp("409 Conflict", "", `{"statusCode":409,"message":"Same idempotency key used with a different request payload.","name":"invalid_idempotent_request"}`),
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Resend answered HTTP 409 Conflict invalid_idempotent_request: Same idempotency key used with a different request payload. (this effect id was already used with a different message: one was probably sent, with other content)"}},
		{resp("409 Conflict", "", `{"statusCode":409,"message":"Same idempotency key used while original request is still in progress.","name":"concurrent_idempotent_requests"}`),
			provider.Verdict{Outcome: provider.OutcomeRetryLater, RetryAfter: provider.DefaultRetryLaterAfter, Reason: "Resend answered HTTP 409 Conflict concurrent_idempotent_requests: Same idempotency key used while original request is still in progress."}},
		{resp("429 Too Many Requests", "Retry-After: 2\r\nRatelimit-Reset: 7\r\n", `{"statusCode":429,"message":"Too many requests. Please limit the number of requests per second.","name":"rate_limit_exceeded"}`),
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 2 * time.Second, Reason: "Resend answered HTTP 429 Too Many Requests rate_limit_exceeded: Too many requests. Please limit the number of requests per second."}},
		{resp("429 Too Many Requests", "Ratelimit-Reset: 7\r\n", `{"statusCode":429,"message":"You have reached your daily email sending quota.","name":"daily_quota_exceeded"}`),
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 7 * time.Second, Reason: "Resend answered HTTP 429 Too Many Requests daily_quota_exceeded: You have reached your daily email sending quota."}},
		{resp("429 Too Many Requests", "", `{}`),
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: provider.DefaultQuotaRetryAfter, Reason: "Resend answered HTTP 429 Too Many Requests: {}"}},
		{resp("422 Unprocessable Entity", "", `{"statusCode":422,"message":"The request body is missing one or more required fields.","name":"missing_required_field"}`),
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Resend answered HTTP 422 Unprocessable Entity missing_required_field: The request body is missing one or more required fields."}},
		{resp("400 Bad Request", "", `{"statusCode":400,"message":"The key must be between 1-256 chars.","name":"invalid_idempotency_key"}`),
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Resend answered HTTP 400 Bad Request invalid_idempotency_key: The key must be between 1-256 chars."}},
		{resp("401 Unauthorized", "", `{"statusCode":401,"message":"Missing API key in the authorization header.","name":"missing_api_key"}`),
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "Resend answered HTTP 401 Unauthorized missing_api_key: Missing API key in the authorization header."}},
		{resp("408 Request Timeout", "", ``), provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "Resend answered HTTP 408 Request Timeout"}},
		{resp("500 Internal Server Error", "", `{"statusCode":500,"message":"An unexpected error occurred.","name":"internal_server_error"}`),
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Resend answered HTTP 500 Internal Server Error internal_server_error: An unexpected error occurred."}},
		{resp("302 Found", "Location: https://x.test\r\n", ``),
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "Resend answered HTTP 302 Found (a redirect, not followed: the request may have been processed)"}},
		{[]byte(`transport-error wrote-request=false error="dial tcp 127.0.0.1:1: connect: connection refused"`),
			provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true, Reason: "the request to Resend could not be sent: dial tcp 127.0.0.1:1: connect: connection refused"}},
		{[]byte(`transport-error wrote-request=true error="EOF"`),
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed after the request to Resend was sent: EOF"}},
		{[]byte(`resend-build error="the subject contains a line break"`),
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the message could not be sent through Resend: the subject contains a line break"}},
		{[]byte(`garbage`), provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised Resend answer: garbage"}},
		{nil, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised Resend answer: "}},
	} {
		got := provider.ClassifyResend(c.raw)
		require.Equal(t, c.want, got, "%q", c.raw)
		require.Equal(t, got, provider.ClassifyResend(c.raw), "deterministic")
	}
}

func TestResendBuildErrors(t *testing.T) {
	t.Parallel()
	s := newResendSink(t, sink.ResendOpts{})
	p := newResend(t, s.URL())
	r := testRequest("resend-bad-subject")
	r.Message.Subject = "two\nlines"
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.False(t, v.Retryable)
	r = testRequest("resend-bad-link")
	r.Message.ListUnsubscribe = "https://x.test/u/a b"
	_, v = send(t, p, r)
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.Zero(t, s.Requests(), "nothing was sent")
}

// FuzzClassifyResend: any bytes give a verdict, the same one twice, with a
// one-line reason.
func FuzzClassifyResend(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\n\r\n{\"id\":\"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794\"}",
		"HTTP/1.1 409 Conflict\r\n\r\n{\"name\":\"invalid_idempotent_request\"}",
		"HTTP/1.1 429 Too Many Requests\r\nRatelimit-Reset: 99999999999\r\n\r\n",
		"transport-error wrote-request=true error=\"EOF\"",
		"resend-build error=\"x\"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := provider.ClassifyResend(raw)
		require.Equal(t, v, provider.ClassifyResend(raw))
		require.Contains(t, []provider.Outcome{provider.OutcomeDone, provider.OutcomeFailed, provider.OutcomeUnknown,
			provider.OutcomeQuota, provider.OutcomeRetryLater}, v.Outcome)
		require.NotContains(t, v.Reason, "\n")
		require.False(t, strings.ContainsRune(v.Receipt, '\n'))
		require.LessOrEqual(t, v.RetryAfter, 24*time.Hour)
	})
}
