package sink_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
)

// docEmail is the example body of Resend's "Send Email" documentation.
const docEmail = `{"from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"hello world","html":"<p>it works!</p>"}`

type resendBundle struct {
	sink   *sink.Resend
	client *http.Client
}

func setupResend(t *testing.T, opts sink.ResendOpts) *resendBundle {
	t.Helper()
	s := sink.NewResend(opts)
	t.Cleanup(s.Close)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return &resendBundle{sink: s, client: client}
}

type resendAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

func (b *resendBundle) post(t *testing.T, auth, key, body string) resendAnswer {
	t.Helper()
	return b.postTo(t, "/emails", auth, key, body, nil)
}

func (b *resendBundle) postTo(t *testing.T, path, auth, key, body string, header map[string]string) resendAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.sink.Endpoint()+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := resendAnswer{status: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.body), "%s", raw)
	return a
}

func (b *resendBundle) bearer() string { return "Bearer " + b.sink.APIKey() }

// TestResendSinkIdempotencyAsDocumented: the documentation's example
// payloads and answers — the same key and body give the same id and one
// email; the same key with another body is 409 invalid_idempotent_request;
// a key of more than 256 characters is 400 invalid_idempotency_key.
func TestResendSinkIdempotencyAsDocumented(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{})
	first := b.post(t, b.bearer(), "welcome-user/123456789", docEmail)
	require.Equal(t, http.StatusOK, first.status)
	id, _ := first.body["id"].(string)
	require.NotEmpty(t, id)
	again := b.post(t, b.bearer(), "welcome-user/123456789", docEmail)
	require.Equal(t, first.body, again.body, "the same response, without sending again")
	require.Equal(t, map[string]int{"welcome-user/123456789": 1}, b.sink.CountByIdempotencyKey())
	require.Equal(t, map[string]int{"delivered@resend.dev": 1}, b.sink.CountByRecipient())

	other := b.post(t, b.bearer(), "welcome-user/123456789", strings.Replace(docEmail, "hello world", "hello again", 1))
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, map[string]any{"statusCode": 409.0, "name": "invalid_idempotent_request",
		"message": "Same idempotency key used with a different request payload."}, other.body)

	long := b.post(t, b.bearer(), strings.Repeat("k", 257), docEmail)
	require.Equal(t, http.StatusBadRequest, long.status)
	require.Equal(t, "invalid_idempotency_key", long.body["name"])

	// Without a key every request is an email.
	b.post(t, b.bearer(), "", docEmail)
	b.post(t, b.bearer(), "", docEmail)
	require.Equal(t, 3, b.sink.CountByRecipient()["delivered@resend.dev"])
	require.Len(t, b.sink.Effects(), 3)
}

func TestResendSinkAuthAndValidation(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{APIKey: "re_custom"})
	require.Equal(t, "resend://re_custom@?endpoint="+strings.NewReplacer(":", "%3A", "/", "%2F").Replace(b.sink.Endpoint()), b.sink.URL()[:strings.Index(b.sink.URL(), "&")])
	require.True(t, strings.HasSuffix(b.sink.URL(), "&rate=none"), "a stand-in without a limit says so in its URL: %s", b.sink.URL())
	a := b.post(t, "", "k1", docEmail)
	require.Equal(t, http.StatusUnauthorized, a.status)
	require.Equal(t, "missing_api_key", a.body["name"])
	a = b.post(t, "Bearer re_wrong", "k1", docEmail)
	require.Equal(t, http.StatusForbidden, a.status)
	require.Equal(t, "invalid_api_key", a.body["name"])
	a = b.post(t, "Bearer re_custom", "k1", `{"from":"Acme <onboarding@resend.dev>","subject":"hello world"}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Equal(t, "missing_required_field", a.body["name"])
	// "to" may be a single string.
	a = b.post(t, "Bearer re_custom", "k1", `{"from":"Acme <onboarding@resend.dev>","to":"delivered@resend.dev","subject":"hello world","text":"it works!"}`)
	require.Equal(t, http.StatusOK, a.status)
	require.Len(t, b.sink.Effects(), 1, "refused requests create nothing")
	require.Equal(t, 4, b.sink.Requests())
}

func TestResendSinkFaults(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{})

	b.sink.RateLimitNext(1, 2)
	a := b.post(t, b.bearer(), "k-429", docEmail)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, "2", a.header.Get("Retry-After"))
	require.Equal(t, "rate_limit_exceeded", a.body["name"])
	require.Empty(t, b.sink.Effects(), "a 429 creates nothing and keeps no key")
	a = b.post(t, b.bearer(), "k-429", docEmail)
	require.Equal(t, http.StatusOK, a.status)

	b.sink.ApplyThenFail(1, 500)
	a = b.post(t, b.bearer(), "k-500", docEmail)
	require.Equal(t, http.StatusInternalServerError, a.status)
	a = b.post(t, b.bearer(), "k-500", docEmail)
	require.Equal(t, http.StatusOK, a.status, "the key was kept with the email it created")
	require.Equal(t, 1, b.sink.CountByIdempotencyKey()["k-500"])

	b.sink.ApplyThenDrop(1)
	req, err := http.NewRequest(http.MethodPost, b.sink.Endpoint()+"/emails", strings.NewReader(docEmail))
	require.NoError(t, err)
	req.Header.Set("Authorization", b.bearer())
	req.Header.Set("Idempotency-Key", "k-drop")
	req.GetBody = nil // else Go's transport replays a request with an Idempotency-Key on its own
	_, err = b.client.Do(req)
	require.Error(t, err, "the connection is closed unanswered")
	a = b.post(t, b.bearer(), "k-drop", docEmail)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, 1, b.sink.CountByIdempotencyKey()["k-drop"])

	b.sink.ApplyThenHang(1, 2*time.Second)
	done := make(chan resendAnswer, 1)
	go func() { done <- b.post(t, b.bearer(), "k-hang", docEmail) }()
	await.Until(t, time.Minute, "the server creating the hanging request's email", func() bool { return b.sink.CountByIdempotencyKey()["k-hang"] == 1 })
	a = b.post(t, b.bearer(), "k-hang", docEmail)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, "concurrent_idempotent_requests", a.body["name"])
	require.Equal(t, http.StatusOK, await.Recv(t, done, time.Minute, "the hanging request's answer").status)
	a = b.post(t, b.bearer(), "k-hang", docEmail)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, 1, b.sink.CountByIdempotencyKey()["k-hang"])
}

func TestSMTPSinkDedupeByHeaderWindow(t *testing.T) {
	t.Parallel()
	s, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	s.DedupeByHeader("X-EE-Idempotency-Key", 300*time.Millisecond)
	msg := func(key string) string {
		return "From: a@example.test\r\nTo: b@example.test\r\nSubject: s\r\nX-EE-Idempotency-Key: " + key + "\r\n\r\nbody\r\n"
	}
	sendRaw(t, s, msg("k1"))
	sendRaw(t, s, msg("k1"))
	sendRaw(t, s, msg("k2"))
	require.Len(t, s.Messages(), 2)
	require.Equal(t, 1, s.Deduplicated())
	time.Sleep(400 * time.Millisecond) // past the window: a repeat is a message again
	sendRaw(t, s, msg("k1"))
	require.Equal(t, map[string]int{"k1": 2, "k2": 1}, s.CountByHeader("X-EE-Idempotency-Key"))
}

// sendRaw sends one message over a fresh connection and requires a 250.
func sendRaw(t *testing.T, s *sink.SMTP, data string) {
	t.Helper()
	c := mustDialSMTP(t, s)
	require.Regexp(t, `^250 `, c.send("a@example.test", []string{"b@example.test"}, data))
}

// TestResendSinkEnforcesItsRateLimit: a stand-in given a rate limit (one
// request every 20 s, two at once, so that a slow machine cannot earn a
// third in time) answers a third request 429 rate_limit_exceeded with the
// ratelimit-* and Retry-After headers, creating nothing; its URL carries
// the rate, so a provider built from it paces to it.
func TestResendSinkEnforcesItsRateLimit(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{Limit: sink.RateLimit{PerSecond: 0.05, Burst: 2}})
	require.True(t, strings.HasSuffix(b.sink.URL(), "&rate=0.05/s"), b.sink.URL())
	for i := range 2 {
		a := b.post(t, b.bearer(), "", docEmail)
		require.Equal(t, http.StatusOK, a.status, "request %d", i+1)
	}
	third := b.post(t, b.bearer(), "", docEmail)
	require.Equal(t, http.StatusTooManyRequests, third.status)
	require.Equal(t, "rate_limit_exceeded", third.body["name"])
	require.Equal(t, "1", third.header.Get("Ratelimit-Limit"))
	require.Equal(t, "0", third.header.Get("Ratelimit-Remaining"))
	after, err := strconv.Atoi(third.header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, after >= 1 && after <= 20, "Retry-After %d, want the seconds to the next token", after)
	require.Equal(t, third.header.Get("Retry-After"), third.header.Get("Ratelimit-Reset"))
	require.Len(t, b.sink.Effects(), 2, "the refused request created nothing")
	require.Equal(t, 1, b.sink.RateLimited())
}

// TestResendSinkBatchAsDocumented: POST /emails/batch creates every email
// of the array and answers their ids in order; the same Idempotency-Key
// and body answer the same ids without creating again, another body under
// it is 409; strict validation (the default) fails the whole batch for one
// invalid email, permissive creates the valid ones and names the invalid
// by index; more than 100 is refused.
func TestResendSinkBatchAsDocumented(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{})
	two := `[` + docEmail + `,` + strings.Replace(docEmail, "delivered@", "other@", 1) + `]`
	first := b.postTo(t, "/emails/batch", b.bearer(), "team-quota/1", two, nil)
	require.Equal(t, http.StatusOK, first.status, "%v", first.body)
	data, _ := first.body["data"].([]any)
	require.Len(t, data, 2)
	again := b.postTo(t, "/emails/batch", b.bearer(), "team-quota/1", two, nil)
	require.Equal(t, first.body, again.body, "the same ids, without sending again")
	require.Equal(t, map[string]int{"delivered@resend.dev": 1, "other@resend.dev": 1}, b.sink.CountByRecipient())
	other := b.postTo(t, "/emails/batch", b.bearer(), "team-quota/1", `[`+docEmail+`]`, nil)
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, "invalid_idempotent_request", other.body["name"])

	bad := `[` + docEmail + `,{"from":"a@resend.dev","subject":"no one"}]`
	strict := b.postTo(t, "/emails/batch", b.bearer(), "", bad, nil)
	require.Equal(t, http.StatusUnprocessableEntity, strict.status)
	require.Contains(t, strict.body["message"], "emails[1]")
	require.Len(t, b.sink.Effects(), 2, "a strict batch with an invalid email creates nothing")

	permissive := b.postTo(t, "/emails/batch", b.bearer(), "", bad, map[string]string{"x-batch-validation": "permissive"})
	require.Equal(t, http.StatusOK, permissive.status)
	require.Len(t, permissive.body["data"], 1)
	errs, _ := permissive.body["errors"].([]any)
	require.Len(t, errs, 1)
	require.Equal(t, 1.0, errs[0].(map[string]any)["index"])
	require.Len(t, b.sink.Effects(), 3, "permissive: the valid email is created")

	many := "[" + strings.TrimSuffix(strings.Repeat(docEmail+",", 101), ",") + "]"
	tooMany := b.postTo(t, "/emails/batch", b.bearer(), "", many, nil)
	require.Equal(t, http.StatusUnprocessableEntity, tooMany.status)
	require.Len(t, b.sink.Effects(), 3)
}

// TestResendSinkCountsByEffect: emails sent one by one and in a batch are
// counted by the effect id each carries, not by the call's key.
func TestResendSinkCountsByEffect(t *testing.T) {
	t.Parallel()
	b := setupResend(t, sink.ResendOpts{})
	withEffect := func(id string) string {
		return strings.Replace(docEmail, `"html"`, `"headers":{"X-Onceplan-Effect":"`+id+`"},"html"`, 1)
	}
	one := b.post(t, b.bearer(), "v1:a:0", withEffect("v1:a:0"))
	require.Equal(t, http.StatusOK, one.status, "%v", one.body)
	batch := `[` + withEffect("v1:b:0") + `,` + withEffect("v1:a:0") + `,` + docEmail + `]`
	two := b.postTo(t, "/emails/batch", b.bearer(), "onceplan-batch-1", batch, nil)
	require.Equal(t, http.StatusOK, two.status, "%v", two.body)
	require.Equal(t, map[string]int{"v1:a:0": 2, "v1:b:0": 1, "": 1}, b.sink.CountByEffect())
	require.Equal(t, map[string]int{"v1:a:0": 1, "onceplan-batch-1": 3}, b.sink.CountByIdempotencyKey())
}
