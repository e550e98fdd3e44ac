package provider_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
)

func newWebhookSink(t *testing.T, opts sink.WebhookOpts) *sink.Webhook {
	t.Helper()
	w := sink.NewWebhook(opts)
	t.Cleanup(w.Close)
	return w
}

// newWebhook parses a webhook provider called "hook". Register the server
// first: cleanups run last-in first-out, so the provider's idle connections
// are closed before the server waits for them.
func newWebhook(t *testing.T, rawURL string) provider.Provider {
	t.Helper()
	p, err := provider.Parse("hook", rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// closedAddr is a loopback host:port where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// rawBody is the body part of a framed webhook answer.
func rawBody(t *testing.T, raw []byte) string {
	t.Helper()
	_, body, ok := strings.Cut(string(raw), "\r\n\r\n")
	require.True(t, ok, "no header/body separator in %q", raw)
	return body
}

func TestWebhookHappyPath(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	require.Equal(t, "http", p.Kind())
	require.Equal(t, "hook="+s.URL(), p.String())
	require.Equal(t, provider.Capabilities{}, p.Capabilities())
	_, err := p.Probe(context.Background(), testKey("x"), 0)
	require.ErrorIs(t, err, provider.ErrNoProbe)
	require.Zero(t, s.Requests(), "a provider without probe asks nothing")

	r := testRequest("webhook-happy")
	id := provider.EffectID(r.Key, r.Epoch)
	raw, v := send(t, p, r)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "wh-000001"}, v)
	// The raw answer is the HTTP response as received: status line, the
	// headers sorted, then the body byte for byte.
	require.Regexp(t, regexp.MustCompile(`\AHTTP/1\.1 200 OK\r\n`+
		`Content-Length: \d+\r\n`+
		`Content-Type: application/json\r\n`+
		`Date: [^\r\n]+ GMT\r\n`+
		`\r\n`+
		`\{"receipt":"wh-000001","status":"done"\}\n\z`), string(raw))

	// The sink saw one POST to the hook, keyed by the effect's identity,
	// carrying the key, epoch, target and the rendered message.
	reqs := s.RequestLog()
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPost, reqs[0].Method)
	require.Equal(t, "/hook", reqs[0].Path)
	require.Equal(t, id, reqs[0].IdempotencyKey)
	require.JSONEq(t, `{
		"key": "`+r.Key+`",
		"epoch": 0,
		"effect_id": "`+id+`",
		"target": "ada@example.test",
		"message": {
			"from": "Onceplan News <news@onceplan.test>",
			"to": "ada@example.test",
			"subject": "Your November invoice, Ada",
			"text": "Hello Ada,\nyour invoice is attached.\n",
			"html": "<p>Hello <b>Ada</b>, your invoice is attached.</p>"
		}
	}`, string(reqs[0].Body))

	effects := s.Effects()
	require.Len(t, effects, 1)
	require.Equal(t, "ada@example.test", effects[0].Target)
	require.Equal(t, "wh-000001", effects[0].Receipt)
	require.Equal(t, map[string]int{id: 1}, s.CountByEffectID())
}

func TestWebhookRequestHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		got <- r
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	p := newWebhook(t, srv.URL+"/in/effects")

	r := testRequest("webhook-headers")
	r.Epoch = 2
	_, v := send(t, p, r)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 204"}, v)

	req := await.Recv(t, got, time.Minute, "the request at the receiver")
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "/in/effects", req.URL.Path)
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, "application/json", req.Header.Get("Accept"))
	require.Equal(t, "onceplan", req.Header.Get("User-Agent"))
	require.Equal(t, r.Key+":2", req.Header.Get("Idempotency-Key"), "the epoch is part of the key")
	var body struct {
		Key      string `json:"key"`
		Epoch    int    `json:"epoch"`
		EffectID string `json:"effect_id"`
	}
	require.NoError(t, json.NewDecoder(req.Body).Decode(&body))
	require.Equal(t, r.Key, body.Key)
	require.Equal(t, 2, body.Epoch)
	require.Equal(t, r.Key+":2", body.EffectID)
}

func TestWebhookRawKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Date", "Tue, 03 Jun 2025 10:00:00 GMT")
		h.Set("X-Receipt", "r-42")
		h.Add("X-Trace", "b")
		h.Add("X-Trace", "a")
		h.Set("Set-Cookie", "session=do-not-store-me")
		h.Set("Onceplan-Body-Truncated", "false") // the server cannot forge our markers
		h.Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created\r\n\r\nsee you")
	}))
	t.Cleanup(srv.Close)
	p := newWebhook(t, srv.URL)

	raw, v := send(t, p, testRequest("webhook-raw"))
	require.Equal(t, "HTTP/1.1 201 Created\r\n"+
		"Content-Length: 18\r\n"+
		"Content-Type: text/plain\r\n"+
		"Date: Tue, 03 Jun 2025 10:00:00 GMT\r\n"+
		"X-Receipt: r-42\r\n"+
		"X-Trace: b\r\n"+
		"X-Trace: a\r\n"+
		"\r\n"+
		"created\r\n\r\nsee you", string(raw))
	require.NotContains(t, string(raw), "do-not-store-me", "cookies are not recorded")
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "r-42"}, v)
}

func TestWebhookLargeAnswerIsCut(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", provider.MaxWebhookBody+10_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(srv.Close)
	p := newWebhook(t, srv.URL)

	raw, v := send(t, p, testRequest("webhook-big"))
	require.Contains(t, string(raw), "\r\nOnceplan-Body-Truncated: true\r\n")
	require.Equal(t, big[:provider.MaxWebhookBody], rawBody(t, raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 200"}, v)
}

func TestWebhookShortAnswerIsMarked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, `{"receipt":`) // and the connection ends
	}))
	t.Cleanup(srv.Close)
	p := newWebhook(t, srv.URL)

	raw, v := send(t, p, testRequest("webhook-short"))
	require.Contains(t, string(raw), "\r\nOnceplan-Body-Error: unexpected EOF\r\n")
	require.Equal(t, `{"receipt":`, rawBody(t, raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 200"}, v,
		"a 2xx status line is the acceptance; the body only names it")
}

// TestWebhookAnswers drives every kind of answer through the sink and
// checks what it means. FailNext answers without applying, so the sink
// holds no effect whatever the answer said.
func TestWebhookAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		want    provider.Verdict
	}{
		{"422 is a definite rejection", 422, map[string]string{"Content-Type": "application/json"}, `{"error":"bad address"}`,
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `the webhook answered HTTP 422 Unprocessable Entity: {"error":"bad address"}`}},
		{"400", 400, nil, "",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `the webhook answered HTTP 400 Bad Request`}},
		{"403", 403, nil, "forbidden\n",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `the webhook answered HTTP 403 Forbidden: forbidden`}},
		{"404", 404, nil, "",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `the webhook answered HTTP 404 Not Found`}},
		{"408 may be tried again", 408, nil, "",
			provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: `the webhook answered HTTP 408 Request Timeout`}},
		{"409 in progress", 409, map[string]string{"Retry-After": "7"}, "in progress",
			provider.Verdict{Outcome: provider.OutcomeRetryLater, RetryAfter: 7 * time.Second, Reason: `the webhook answered HTTP 409 Conflict: in progress`}},
		{"409 without Retry-After", 409, nil, "",
			provider.Verdict{Outcome: provider.OutcomeRetryLater, RetryAfter: provider.DefaultRetryLaterAfter, Reason: `the webhook answered HTTP 409 Conflict`}},
		{"429 Retry-After seconds", 429, map[string]string{"Retry-After": "30"}, "",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 30 * time.Second, Reason: `the webhook answered HTTP 429 Too Many Requests`}},
		{"429 Retry-After HTTP-date", 429, map[string]string{"Date": "Tue, 03 Jun 2025 10:00:00 GMT", "Retry-After": "Tue, 03 Jun 2025 10:02:30 GMT"}, "",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 150 * time.Second, Reason: `the webhook answered HTTP 429 Too Many Requests`}},
		{"429 Retry-After 0 rests a second", 429, map[string]string{"Retry-After": "0"}, "",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: time.Second, Reason: `the webhook answered HTTP 429 Too Many Requests`}},
		{"429 Retry-After a year rests a day", 429, map[string]string{"Retry-After": "31536000"}, "",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 24 * time.Hour, Reason: `the webhook answered HTTP 429 Too Many Requests`}},
		{"429 Retry-After garbage", 429, map[string]string{"Retry-After": "soon"}, "",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: provider.DefaultQuotaRetryAfter, Reason: `the webhook answered HTTP 429 Too Many Requests`}},
		{"429 without Retry-After", 429, nil, "slow down",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: provider.DefaultQuotaRetryAfter, Reason: `the webhook answered HTTP 429 Too Many Requests: slow down`}},
		{"500", 500, nil, "boom",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `the webhook answered HTTP 500 Internal Server Error: boom`}},
		{"502", 502, nil, "",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `the webhook answered HTTP 502 Bad Gateway`}},
		{"503", 503, map[string]string{"Retry-After": "5"}, "",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `the webhook answered HTTP 503 Service Unavailable`}},
		{"307 is not followed", 307, map[string]string{"Location": "/elsewhere"}, "",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `the webhook answered HTTP 307 Temporary Redirect (a redirect, not followed: the request may have been processed)`}},
		{"202 with a Location", 202, map[string]string{"Location": "/effects/77"}, "",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "/effects/77"}},
		{"200 with an id", 200, map[string]string{"Content-Type": "application/json"}, `{"id":12345}`,
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "12345"}},
		{"200 stranded", 200, map[string]string{"Content-Type": "application/json"}, `{"status":"stranded","reason":"mailbox deleted","id":"m-9"}`,
			provider.Verdict{Outcome: provider.OutcomeStranded, Receipt: "m-9", Reason: "mailbox deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newWebhookSink(t, sink.WebhookOpts{})
			p := newWebhook(t, s.URL())
			s.FailNext(1, tt.status, tt.headers, tt.body)
			raw, v := send(t, p, testRequest("webhook-answer"))
			require.Equal(t, tt.want, v, string(raw))
			require.True(t, strings.HasPrefix(string(raw), "HTTP/1.1 "+strconv.Itoa(tt.status)+" "), string(raw))
			require.Equal(t, tt.body, rawBody(t, raw), "the body is kept as received")
			require.Equal(t, 1, s.Requests(), "one Send is one request; a redirect is not followed")
			require.Empty(t, s.Effects())
		})
	}
}

func TestWebhookRetryAfterDateFromTheServersClock(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	// The server stamps its own Date; Retry-After is a date 90s after it.
	s.FailNext(1, 429, map[string]string{"Retry-After": time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}, "")
	raw, v := send(t, p, testRequest("webhook-429-date"))
	require.Contains(t, string(raw), "\r\nDate: ")
	require.Equal(t, provider.OutcomeQuota, v.Outcome)
	// 90s, less however long the answer took to be written (and a second
	// of rounding either way).
	require.GreaterOrEqual(t, v.RetryAfter, 80*time.Second)
	require.LessOrEqual(t, v.RetryAfter, 91*time.Second)
}

func TestWebhookStranded(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	s.Stranded(1)
	raw, v := send(t, p, testRequest("webhook-stranded"))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeStranded, Receipt: "wh-000001",
		Reason: "the sink was told to strand this effect"}, v)
	require.JSONEq(t, `{"status":"stranded","reason":"the sink was told to strand this effect","receipt":"wh-000001"}`,
		rawBody(t, raw), "the stranded answer is kept whole")
	effects := s.Effects()
	require.Len(t, effects, 1)
	require.True(t, effects[0].Stranded)

	_, v = send(t, p, testRequest("webhook-after-stranded"))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "wh-000002"}, v)
}

func TestWebhookAppliedThenFailedIsUnknown(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	s.ApplyThenFail(1, 500)
	raw, v := send(t, p, testRequest("webhook-apply-fail"))
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	require.Equal(t, `the webhook answered HTTP 500 Internal Server Error: {"error":"the sink applied the effect and then failed"}`, v.Reason)
	require.Contains(t, string(raw), `{"error":"the sink applied the effect and then failed"}`)
	require.Len(t, s.Effects(), 1, "the effect happened although the answer was a 5xx")
}

func TestWebhookTimeoutAfterTheRequestLeftIsUnknown(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, sink.WithOption(s.URL(), "timeout=300ms"))
	s.ApplyThenHang(1, time.Minute)
	start := time.Now()
	raw, v := send(t, p, testRequest("webhook-timeout"))
	require.Less(t, time.Since(start), 10*time.Second, "the timeout bounds the call")
	require.True(t, strings.HasPrefix(string(raw), "transport-error wrote-request=true error="), string(raw))
	require.Contains(t, string(raw), "Client.Timeout exceeded")
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	require.True(t, strings.HasPrefix(v.Reason, "the connection failed after the request was sent: "), v.Reason)
	require.Len(t, s.Effects(), 1, "the sink applied the effect the client gave up on")
}

func TestWebhookCancelledDuringTheCallIsUnknown(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	s.ApplyThenHang(1, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // cancel once the sink has the request (a worker shutting down)
		for len(s.Effects()) == 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	raw, err := p.Send(ctx, testRequest("webhook-cancelled-mid-call"))
	require.NoError(t, err, "the request left: the answer is an outcome, not an error")
	require.True(t, strings.HasPrefix(string(raw), "transport-error wrote-request=true error="), string(raw))
	require.Equal(t, provider.OutcomeUnknown, p.Classify(raw).Outcome)
	require.Len(t, s.Effects(), 1)
}

func TestWebhookContextDoneBeforeSend(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, s.URL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	raw, err := p.Send(ctx, testRequest("webhook-cancelled"))
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, raw)
	require.Zero(t, s.Requests())
}

func TestWebhookConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	p := newWebhook(t, "http://mailer:pa55-secret@"+addr+"/hook")
	require.Equal(t, "hook=http://mailer:xxxxx@"+addr+"/hook", p.String())
	raw, v := send(t, p, testRequest("webhook-refused"))
	require.True(t, strings.HasPrefix(string(raw), `transport-error wrote-request=false error="Post \"http://mailer:xxxxx@`+addr+`/hook\": dial tcp `), string(raw))
	require.Contains(t, string(raw), "connection refused")
	require.NotContains(t, string(raw), "pa55-secret", "the recorded answer never holds the password")
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.True(t, v.Retryable)
	require.True(t, v.NotSent, "a refused connection never reached the provider")
	require.True(t, strings.HasPrefix(v.Reason, "the request could not be sent: "), v.Reason)
	require.NotContains(t, v.Reason, "pa55-secret")
}

// TestWebhookHostThatDoesNotResolveNeverReachedTheProvider: a host no DNS
// resolves (.invalid, RFC 6761) fails before any request is written: a
// temporary failure that never reached the provider (Verdict.NotSent), as
// a refused connection is — never one the provider answered.
func TestWebhookHostThatDoesNotResolveNeverReachedTheProvider(t *testing.T) {
	t.Parallel()
	p := newWebhook(t, "http://hooks.onceplan-test.invalid/hook")
	raw, v := send(t, p, testRequest("webhook-no-such-host"))
	require.True(t, strings.HasPrefix(string(raw), `transport-error wrote-request=false `), string(raw))
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.True(t, v.Retryable)
	require.True(t, v.NotSent)
	require.Contains(t, v.Reason, "hooks.onceplan-test.invalid")
}

// rawHTTP is a minimal HTTP/1.1 server on loopback that answers 200 with a
// receipt, except that it resets the connection (RST, no answer) after
// reading the requests resetOn says. It counts connections and requests.
type rawHTTP struct {
	ln       net.Listener
	resetOn  func(n int) bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]struct{}
	conns    int
	requests int
}

func startRawHTTP(t *testing.T, resetOn func(n int) bool) *rawHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawHTTP{ln: ln, resetOn: resetOn, open: map[net.Conn]struct{}{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.open[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawHTTP) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.mu.Lock()
		s.requests++
		n := s.requests
		s.mu.Unlock()
		if s.resetOn(n) {
			_ = c.(*net.TCPConn).SetLinger(0)
			return
		}
		body := `{"receipt":"r-` + strconv.Itoa(n) + `"}`
		_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if err != nil {
			return
		}
	}
}

func (s *rawHTTP) counts() (conns, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.requests
}

func TestWebhookResetAfterTheRequestIsUnknown(t *testing.T) {
	t.Parallel()
	srv := startRawHTTP(t, func(int) bool { return true })
	p := newWebhook(t, "http://"+srv.ln.Addr().String()+"/hook")
	raw, v := send(t, p, testRequest("webhook-reset"))
	require.True(t, strings.HasPrefix(string(raw), "transport-error wrote-request=true error="), string(raw))
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	conns, requests := srv.counts()
	require.Equal(t, 1, requests, "the POST is not sent again")
	require.Equal(t, 1, conns)
}

func TestWebhookResetOnAReusedConnectionIsNotResent(t *testing.T) {
	t.Parallel()
	// Go's transport silently retries a replayable request that fails on a
	// reused connection; a POST carrying an Idempotency-Key counts as
	// replayable to it. The provider must not let that happen.
	srv := startRawHTTP(t, func(n int) bool { return n == 2 })
	p := newWebhook(t, "http://"+srv.ln.Addr().String()+"/hook")
	_, v := send(t, p, testRequest("webhook-reuse-1"))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "r-1"}, v)

	raw, v := send(t, p, testRequest("webhook-reuse-2"))
	require.True(t, strings.HasPrefix(string(raw), "transport-error wrote-request=true error="), string(raw))
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	conns, requests := srv.counts()
	require.Equal(t, 1, conns, "the second POST went over the first connection")
	require.Equal(t, 2, requests, "the reset POST was not sent again")
}

func TestWebhookDedupeRecovery(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{Dedupe: true})
	p := newWebhook(t, s.URL())
	require.Equal(t, provider.Capabilities{Dedupe: true}, p.Capabilities())

	// The effect lands but the answer is lost to a 5xx: unknown. Recovery
	// sends again with the same key and settles from the answer.
	r := testRequest("webhook-dedupe")
	s.ApplyThenFail(1, 502)
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	_, v = send(t, p, r)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "wh-000001"}, v, "the first effect's receipt")
	require.Equal(t, 2, s.Requests())
	require.Equal(t, map[string]int{provider.EffectID(r.Key, 0): 1}, s.CountByEffectID())

	// A bumped epoch is a deliberate second effect, not a repeat.
	r.Epoch = 1
	_, v = send(t, p, r)
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "wh-000002"}, v)
	require.Equal(t, map[string]int{provider.EffectID(r.Key, 0): 1, provider.EffectID(r.Key, 1): 1}, s.CountByEffectID())
}

func TestWebhookProbe(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{Probe: true})
	p := newWebhook(t, s.URL())
	require.Equal(t, provider.Capabilities{Probe: true, SettleWindow: provider.DefaultHTTPSettle}, p.Capabilities())
	r := testRequest("webhook-probe")
	id := provider.EffectID(r.Key, r.Epoch)

	pr, err := p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err, "not found is an answer, not an error")
	require.False(t, pr.Found)
	require.True(t, strings.HasPrefix(string(pr.Raw), "HTTP/1.1 404 Not Found\r\n"), string(pr.Raw))
	require.Empty(t, s.Effects())

	s.ApplyThenFail(1, 503)
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)

	pr, err = p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.True(t, pr.Found)
	require.Equal(t, "wh-000001", pr.Receipt)
	require.True(t, strings.HasPrefix(string(pr.Raw), "HTTP/1.1 200 OK\r\n"), string(pr.Raw))
	require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, rawBody(t, pr.Raw))

	// Another epoch of the same key is another effect: not found.
	pr, err = p.Probe(context.Background(), r.Key, r.Epoch+1)
	require.NoError(t, err)
	require.False(t, pr.Found)

	var probes []string
	for _, req := range s.RequestLog() {
		if req.Method == http.MethodGet {
			probes = append(probes, req.Path)
		}
	}
	require.Equal(t, []string{"/effects/" + id, "/effects/" + id, "/effects/" + provider.EffectID(r.Key, r.Epoch+1)}, probes)
	require.Len(t, s.Effects(), 1, "probing creates nothing")
}

func TestWebhookProbeOptions(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	// A trailing slash on the probe URL does not double the slash, and
	// settle sets the window.
	p := newWebhook(t, s.URL()+"?probe="+s.ProbeURL()+"/&settle=5s")
	require.Equal(t, provider.Capabilities{Probe: true, SettleWindow: 5 * time.Second}, p.Capabilities())
	r := testRequest("webhook-probe-slash")
	send(t, p, r)
	pr, err := p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.Equal(t, "wh-000001", pr.Receipt)
	log := s.RequestLog()
	require.Equal(t, "/effects/"+provider.EffectID(r.Key, r.Epoch), log[len(log)-1].Path)

	p0 := newWebhook(t, s.URL()+"?probe="+s.ProbeURL()+"&settle=0s")
	require.Equal(t, provider.Capabilities{Probe: true}, p0.Capabilities(), "settle=0: not found is final at once")
}

func TestWebhookProbeOtherAnswersAreErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status  int
		headers map[string]string
		body    string
		found   bool
		receipt string
		err     string
	}{
		{status: 200, headers: map[string]string{"X-Receipt": "r-7"}, body: "yes", found: true, receipt: "r-7"},
		{status: 200, body: `{"id":"m-3"}`, found: true, receipt: "m-3"},
		{status: 404, body: "no"},
		{status: 410, err: `probe of provider "hook" answered HTTP 410 Gone`},
		{status: 403, err: `probe of provider "hook" answered HTTP 403 Forbidden`},
		{status: 500, err: `probe of provider "hook" answered HTTP 500 Internal Server Error`},
		{status: 204, err: `probe of provider "hook" answered HTTP 204 No Content`},
		{status: 302, headers: map[string]string{"Location": "/login"}, err: `probe of provider "hook" answered HTTP 302 Found`},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status)+" "+tt.body, func(t *testing.T) {
			t.Parallel()
			var gets atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				gets.Add(1)
				for k, v := range tt.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			p := newWebhook(t, srv.URL+"/hook?probe="+srv.URL+"/effects")
			pr, err := p.Probe(context.Background(), testKey("probe-answers"), 0)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				require.False(t, pr.Found, "an error is not \"not found\"")
			} else {
				require.NoError(t, err)
				require.Equal(t, tt.found, pr.Found)
				require.Equal(t, tt.receipt, pr.Receipt)
			}
			require.True(t, strings.HasPrefix(string(pr.Raw), "HTTP/1.1 "+strconv.Itoa(tt.status)+" "), string(pr.Raw))
			require.Equal(t, int32(1), gets.Load(), "a redirect is not followed")
		})
	}
}

func TestWebhookProbeUnreachableIsAnError(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	p := newWebhook(t, "http://"+addr+"/hook?probe=http://u:pr0be-secret@"+addr+"/effects")
	pr, err := p.Probe(context.Background(), testKey("probe-refused"), 0)
	require.Error(t, err)
	require.False(t, pr.Found)
	require.Contains(t, err.Error(), `probe of provider "hook": Get "http://u:xxxxx@`+addr+`/effects/`)
	require.Contains(t, err.Error(), "connection refused")
	require.NotContains(t, err.Error(), "pr0be-secret")
}

func TestWebhookConcurrency(t *testing.T) {
	t.Parallel()
	// The first two requests wait for each other, so two calls are in
	// flight together; no third may join them.
	var inflight, most atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for m := most.Load(); n > m; m = most.Load() {
			if most.CompareAndSwap(m, n) {
				break
			}
		}
		if n >= 2 {
			once.Do(func() { close(both) })
		}
		select {
		case <-both:
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
		inflight.Add(-1) // before the answer is flushed, so the slot is free only after
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	p := newWebhook(t, srv.URL+"?concurrency=2")

	var wg sync.WaitGroup
	outcomes := make([]provider.Outcome, 6)
	for i := range outcomes {
		wg.Go(func() {
			release, err := p.Acquire(context.Background())
			if err != nil {
				return
			}
			defer release()
			raw, err := p.Send(context.Background(), testRequest("webhook-concurrency-"+strconv.Itoa(i)))
			if err == nil {
				outcomes[i] = p.Classify(raw).Outcome
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the concurrent sends to end")
	for _, o := range outcomes {
		require.Equal(t, provider.OutcomeDone, o)
	}
	require.Equal(t, int32(2), most.Load(), "at most concurrency=2 calls at once, and two did run together")
}

func TestWebhookRate(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, sink.WithOption(s.URL(), "rate=20/s"))
	start := time.Now()
	for i := range 4 {
		send(t, p, testRequest("webhook-rate-"+strconv.Itoa(i)))
	}
	// 20/s with a burst of one: a send every 50ms, so the sink sees the
	// k-th request no sooner than k×50ms after the first Acquire.
	log := s.RequestLog()
	require.Len(t, log, 4)
	for k, req := range log {
		require.GreaterOrEqual(t, req.At.Sub(start), time.Duration(k)*50*time.Millisecond-2*time.Millisecond, "request %d", k)
	}
}

func TestWebhookParallelSendsMakeOneEffectEach(t *testing.T) {
	t.Parallel()
	s := newWebhookSink(t, sink.WebhookOpts{})
	p := newWebhook(t, sink.WithOption(s.URL(), "concurrency=8"))
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			release, err := p.Acquire(context.Background())
			if err != nil {
				return
			}
			defer release()
			_, _ = p.Send(context.Background(), testRequest("webhook-parallel-"+strconv.Itoa(i)))
		})
	}
	await.Group(t, &wg, time.Minute, "the parallel sends to end")
	counts := s.CountByEffectID()
	require.Len(t, counts, n)
	for id, c := range counts {
		require.Equal(t, 1, c, id)
	}
	require.Equal(t, n, s.Requests())
}

func TestWebhookParseRejectsBadLimits(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://127.0.0.1:1/hook?rate=fast":         `provider "hook": rate "fast" is not N/s, N/m, N/h or none`,
		"http://127.0.0.1:1/hook?concurrency=2000":  `provider "hook": concurrency "2000" is not a whole number from 1 to 1024`,
		"http://127.0.0.1:1/hook?timeout=0s":        `provider "hook": timeout "0s" is not a positive duration like 30s`,
		"http://127.0.0.1:1/hook?probe=/effects":    `provider "hook": probe "/effects" is not an http(s) URL without query`,
		"http://127.0.0.1:1/hook?probe=http://x/?a": `provider "hook": probe "http://x/?a" is not an http(s) URL without query`,
	} {
		_, err := provider.Parse("hook", raw)
		require.EqualError(t, err, want, raw)
		require.ErrorIs(t, err, provider.ErrInvalidProvider)
	}
}

func TestClassifyWebhook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want provider.Verdict
	}{
		// Receipts: body "receipt", then "id", then X-Receipt, then Location.
		{"HTTP/1.1 200 OK\r\nX-Receipt: h-1\r\n\r\n{\"receipt\":\"b-1\",\"id\":\"i-1\"}",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "b-1"}},
		{"HTTP/1.1 200 OK\r\nX-Receipt: h-1\r\n\r\n{\"id\":\"i-1\"}",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "i-1"}},
		{"HTTP/1.1 201 Created\r\nLocation: /e/1\r\nX-Receipt: h-1\r\n\r\nok",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "h-1"}},
		{"HTTP/1.1 201 Created\r\nLocation: /e/1\r\n\r\n[1,2]",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "/e/1"}},
		{"HTTP/1.1 200 OK\r\n\r\n{\"receipt\":{\"nested\":true}}",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 200"}},
		{"HTTP/1.1 299 Whatever\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "HTTP 299"}},
		// LF line ends are accepted too.
		{"HTTP/1.0 200 OK\nX-Receipt: lf-1\n\n",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "lf-1"}},
		// Stranded.
		{"HTTP/1.1 200 OK\r\n\r\n{\"status\":\"stranded\"}",
			provider.Verdict{Outcome: provider.OutcomeStranded, Receipt: "HTTP 200", Reason: "the webhook says the effect is stranded"}},
		{"HTTP/1.1 202 Accepted\r\n\r\n{\"status\":\"stranded\",\"reason\":\"line one\\nline two\",\"receipt\":\"s-1\"}",
			provider.Verdict{Outcome: provider.OutcomeStranded, Receipt: "s-1", Reason: "line one line two"}},
		{"HTTP/1.1 200 OK\r\n\r\n{\"status\":\"queued\",\"receipt\":\"q-1\"}",
			provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "q-1"}},
		{"HTTP/1.1 422 Unprocessable Entity\r\n\r\n{\"status\":\"stranded\"}",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: `the webhook answered HTTP 422 Unprocessable Entity: {"status":"stranded"}`}},
		// Retry-After as a date is measured from the answer's own Date.
		{"HTTP/1.1 409 Conflict\r\nDate: Tue, 03 Jun 2025 10:00:00 GMT\r\nRetry-After: Tue, 03 Jun 2025 10:00:20 GMT\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeRetryLater, RetryAfter: 20 * time.Second, Reason: "the webhook answered HTTP 409 Conflict"}},
		{"HTTP/1.1 429 Too Many Requests\r\nRetry-After: Tue, 03 Jun 2025 10:00:20 GMT\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: provider.DefaultQuotaRetryAfter, Reason: "the webhook answered HTTP 429 Too Many Requests"}},
		{"HTTP/1.1 429 Too Many Requests\r\nDate: Tue, 03 Jun 2025 10:00:00 GMT\r\nRetry-After: Tue, 03 Jun 2025 09:00:00 GMT\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: time.Second, Reason: "the webhook answered HTTP 429 Too Many Requests"}},
		{"HTTP/1.1 429 Too Many Requests\r\nRetry-After:  12 \r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: 12 * time.Second, Reason: "the webhook answered HTTP 429 Too Many Requests"}},
		{"HTTP/1.1 429 Too Many Requests\r\nRetry-After: -5\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: provider.DefaultQuotaRetryAfter, Reason: "the webhook answered HTTP 429 Too Many Requests"}},
		// Other codes.
		{"HTTP/1.1 451 Unavailable For Legal Reasons\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the webhook answered HTTP 451 Unavailable For Legal Reasons"}},
		{"HTTP/1.1 504 Gateway Timeout\r\n\r\n<html>\n<body>upstream\ttimed out</body>\n</html>",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the webhook answered HTTP 504 Gateway Timeout: <html> <body>upstream timed out</body> </html>"}},
		{"HTTP/1.1 100 Continue\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the webhook answered HTTP 100 Continue"}},
		{"HTTP/1.1 600 Beyond\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the webhook answered HTTP 600 Beyond"}},
		{"HTTP/1.1 418\r\n\r\n",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the webhook answered HTTP 418"}},
		{"HTTP/1.1 400 Bad Request\r\n\r\n" + strings.Repeat("é", 150),
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the webhook answered HTTP 400 Bad Request: " + strings.Repeat("é", 100)}},
		// Transport errors.
		{`transport-error wrote-request=false error="dial tcp 127.0.0.1:1: connect: connection refused"`,
			provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true, Reason: "the request could not be sent: dial tcp 127.0.0.1:1: connect: connection refused"}},
		{`transport-error wrote-request=true error="read tcp: connection reset by peer"`,
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed after the request was sent: read tcp: connection reset by peer"}},
		{`transport-error error=EOF`,
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed after the request was sent: EOF"}},
		// Unrecognised answers are unknown, never done or failed.
		{"", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised webhook answer: "}},
		{"HTTP/1.1 2000 OK\r\n\r\n", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised webhook answer: HTTP/1.1 2000 OK"}},
		{"HTTP/1.1 20x OK\r\n\r\n", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised webhook answer: HTTP/1.1 20x OK"}},
		{"HTTP/1.1 200 OK\r\nBad Header Line\r\n\r\n", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised webhook answer: HTTP/1.1 200 OK Bad Header Line"}},
		{"SPDY/3 200 OK\r\n\r\n", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised webhook answer: SPDY/3 200 OK"}},
		{`transport-error wrote-request=false error="unterminated`,
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `unrecognised webhook answer: transport-error wrote-request=false error="unterminated`}},
		{`smtp stage=data-close code=250 reply=ok`,
			provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `unrecognised webhook answer: smtp stage=data-close code=250 reply=ok`}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, provider.ClassifyWebhook([]byte(tt.raw)), tt.raw)
	}
}

// requireOneLine checks text meant for a person (a reason, a receipt): valid
// UTF-8 with no control characters and no white space but single spaces.
func requireOneLine(t *testing.T, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "%q is not UTF-8", s)
	for _, r := range s {
		require.False(t, unicode.IsControl(r) || (unicode.IsSpace(r) && r != ' '), "%q has %U", s, r)
	}
	require.NotContains(t, s, "  ")
}

// requireSaneVerdict checks what holds for every verdict of any answer.
func requireSaneVerdict(t *testing.T, v provider.Verdict) {
	t.Helper()
	requireOneLine(t, v.Reason)
	requireOneLine(t, v.Receipt)
	switch v.Outcome {
	case provider.OutcomeDone:
		require.NotEmpty(t, v.Receipt)
		require.Empty(t, v.Reason)
	case provider.OutcomeStranded:
		require.NotEmpty(t, v.Receipt)
		require.NotEmpty(t, v.Reason)
	case provider.OutcomeQuota, provider.OutcomeRetryLater:
		if v.Outcome == provider.OutcomeQuota && v.RetryAfter == 0 {
			require.NotEmpty(t, v.Reason) // no wait named: the queue backs off
			break
		}
		require.GreaterOrEqual(t, v.RetryAfter, time.Second)
		require.LessOrEqual(t, v.RetryAfter, 24*time.Hour)
		require.NotEmpty(t, v.Reason)
	case provider.OutcomeFailed, provider.OutcomeUnknown:
		require.NotEmpty(t, v.Reason)
	default:
		t.Fatalf("outcome %q is not one of the ledger's", v.Outcome)
	}
	if v.Outcome != provider.OutcomeQuota && v.Outcome != provider.OutcomeRetryLater {
		require.Zero(t, v.RetryAfter)
	}
	if v.Outcome != provider.OutcomeFailed {
		require.False(t, v.Retryable)
	}
}

// printable keeps the bytes an HTTP header value may hold that survive
// framing unchanged (printable ASCII).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
}

// FuzzClassifyWebhook frames a webhook answer from its parts and checks the
// verdict against the documented meaning of its status code and headers.
func FuzzClassifyWebhook(f *testing.F) {
	f.Fuzz(func(t *testing.T, code int, retryAfter, date, receipt string, body []byte) {
		var b strings.Builder
		fmt.Fprintf(&b, "HTTP/1.1 %03d Some Status\r\n", code)
		for _, h := range [][2]string{{"Date", date}, {"Retry-After", retryAfter}, {"X-Receipt", receipt}} {
			if v := strings.TrimSpace(printable(h[1])); v != "" {
				b.WriteString(h[0] + ": " + v + "\r\n")
			}
		}
		b.WriteString("\r\n")
		b.Write(body)
		raw := []byte(b.String())

		v := provider.ClassifyWebhook(raw)
		require.Equal(t, v, provider.ClassifyWebhook(raw), "deterministic")
		requireSaneVerdict(t, v)

		ra := strings.TrimSpace(printable(retryAfter))
		wantWait := func(def time.Duration) {
			t.Helper()
			if ra == "" {
				require.Equal(t, def, v.RetryAfter)
			} else if n, err := strconv.ParseUint(ra, 10, 64); err == nil {
				require.Equal(t, min(max(time.Duration(min(n, 86400))*time.Second, time.Second), 24*time.Hour), v.RetryAfter)
			}
		}
		said := fmt.Sprintf("the webhook answered HTTP %03d Some Status", code)
		switch {
		case code < 100 || code > 999:
			require.Equal(t, provider.OutcomeUnknown, v.Outcome)
		case code >= 200 && code <= 299:
			var obj map[string]json.RawMessage
			isObject := json.Unmarshal(body, &obj) == nil && obj != nil
			var status string
			_, hasStatus := obj["status"]
			if isObject && hasStatus && json.Unmarshal(obj["status"], &status) == nil && status == "stranded" {
				require.Equal(t, provider.OutcomeStranded, v.Outcome)
			} else if !hasStatus {
				require.Equal(t, provider.OutcomeDone, v.Outcome)
			} else {
				require.Contains(t, []provider.Outcome{provider.OutcomeDone, provider.OutcomeStranded}, v.Outcome)
			}
			if rc := strings.Join(strings.Fields(printable(receipt)), " "); !isObject && rc != "" {
				// A receipt is kept to a reason's length; the raw answer has it whole.
				if len(rc) <= 300 {
					require.Equal(t, rc, v.Receipt, "without a JSON body the receipt is X-Receipt")
				} else {
					require.Equal(t, rc[:300]+"…", v.Receipt)
				}
			}
			if !isObject && strings.TrimSpace(printable(receipt)) == "" {
				require.Equal(t, "HTTP "+strconv.Itoa(code), v.Receipt)
			}
		case code == 409:
			require.Equal(t, provider.OutcomeRetryLater, v.Outcome)
			require.True(t, strings.HasPrefix(v.Reason, said), v.Reason)
			wantWait(provider.DefaultRetryLaterAfter)
		case code == 429:
			require.Equal(t, provider.OutcomeQuota, v.Outcome)
			require.True(t, strings.HasPrefix(v.Reason, said), v.Reason)
			wantWait(provider.DefaultQuotaRetryAfter)
		case code == 408:
			require.Equal(t, provider.OutcomeFailed, v.Outcome)
			require.True(t, v.Retryable)
		case code >= 400 && code <= 499:
			require.Equal(t, provider.OutcomeFailed, v.Outcome)
			require.False(t, v.Retryable)
			require.True(t, strings.HasPrefix(v.Reason, said), v.Reason)
		default:
			require.Equal(t, provider.OutcomeUnknown, v.Outcome)
			require.True(t, strings.HasPrefix(v.Reason, said), v.Reason)
		}
	})
}

// FuzzClassifyWebhookRaw feeds arbitrary bytes (a corrupted or foreign
// recorded answer) to the classifier: it must not panic, must give the
// same verdict every time, and the verdict must make sense.
func FuzzClassifyWebhookRaw(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := provider.ClassifyWebhook(raw)
		require.Equal(t, v, provider.ClassifyWebhook(raw), "deterministic")
		requireSaneVerdict(t, v)
		if !strings.HasPrefix(string(raw), "HTTP/") && !strings.HasPrefix(string(raw), "transport-error ") {
			require.Equal(t, provider.OutcomeUnknown, v.Outcome, "only an HTTP answer can settle an effect")
		}
	})
}

// TestWebhookWindows: a receiver that forgets keys or messages declares
// how long it remembers (dedupe_window=, probe_retention=), recovery's
// windows; each only with its ability.
func TestWebhookWindows(t *testing.T) {
	p, err := provider.Parse("hook", "https://h.example.test/hook?dedupe=true&dedupe_window=15m")
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, provider.Capabilities{Dedupe: true, DedupeWindow: 15 * time.Minute}, p.Capabilities())
	q, err := provider.Parse("hook", "https://h.example.test/hook?probe=https://h.example.test/effects&probe_retention=72h")
	require.NoError(t, err)
	defer q.Close()
	require.Equal(t, 72*time.Hour, q.Capabilities().ProbeRetention)
	_, err = provider.Parse("hook", "https://h.example.test/hook?dedupe_window=15m")
	require.ErrorContains(t, err, "dedupe_window applies only with dedupe=true")
	_, err = provider.Parse("hook", "https://h.example.test/hook?probe_retention=1h")
	require.ErrorContains(t, err, "probe_retention applies only with probe=URL")
}
