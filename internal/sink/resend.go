package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ResendOpts configure a Resend sink.
type ResendOpts struct {
	// APIKey is the key the sink accepts as "Authorization: Bearer KEY"
	// (default "re_sink_test_key").
	APIKey string
	// Window is how long an Idempotency-Key is honoured from the first
	// request with it (default 24h, Resend's).
	Window time.Duration
	// Now is the sink's clock (default time.Now), for window tests.
	Now func() time.Time
	// Limit is the request rate enforced (default none): past it, 429
	// rate_limit_exceeded with Resend's ratelimit-* and Retry-After
	// headers, creating nothing. Resend documents 2 requests per second
	// per team by default.
	Limit RateLimit
}

// DefaultResendSinkKey is the API key a Resend sink accepts by default.
const DefaultResendSinkKey = "re_sink_test_key"

// ResendEmail is one email the Resend sink accepted (created).
type ResendEmail struct {
	ID             string // the id answered ("49a3999c-…"-like)
	IdempotencyKey string // "" when the request had none
	To             []string
	From           string
	Subject        string
	Headers        map[string]string
	Body           []byte // the request body as received
	At             time.Time
}

// ResendRequest is one request the Resend sink received.
type ResendRequest struct {
	Method         string
	Path           string
	Authorization  string
	IdempotencyKey string
	Body           []byte
	Status         int // the status answered (0: no answer, the connection was closed)
	Replayed       bool
	At             time.Time
}

// resendKey is what the sink remembers of an Idempotency-Key.
type resendKey struct {
	first      time.Time
	bodyHash   [32]byte
	inProgress bool
	status     int
	answer     []byte
}

// Resend is an HTTP server on 127.0.0.1 that behaves as Resend's email
// API does in what Onceplan relies on (its documentation, "Idempotency
// Keys" and "Errors"):
//
//   - POST /emails with "Authorization: Bearer KEY" creates an email and
//     answers 200 {"id": "…"}; without the header 401 missing_api_key, with
//     another key 403 invalid_api_key; a body without from, to or subject
//     422 missing_required_field.
//   - Idempotency-Key (1–256 characters, else 400 invalid_idempotency_key)
//     is honoured for Window from the first request with it: the same key
//     and the same body → the first answer again, no second email; the same
//     key and another body → 409 invalid_idempotent_request; the same key
//     while the first request is still in progress → 409
//     concurrent_idempotent_requests. After the window the key is new.
//   - Errors are {"statusCode", "message", "name"}.
//   - POST /emails/batch takes up to 100 emails under one Idempotency-Key,
//     validated strictly (one invalid fails the batch) or, with
//     "x-batch-validation: permissive", each on its own (sendBatch).
//
// On command it answers 429 with Retry-After (or any status) without
// creating anything, creates the email and then answers 5xx, creates it
// and then hangs, or creates it and closes the connection unanswered.
type Resend struct {
	srv    *httptest.Server
	apiKey string
	window time.Duration
	now    func() time.Time

	mu       sync.Mutex
	requests []ResendRequest
	emails   []ResendEmail
	keys     map[string]*resendKey
	seq      int

	fail  cannedFailure
	after afterApply
	limit RateLimit
	gate  *limitGate
}

// NewResend starts a Resend sink.
func NewResend(opts ResendOpts) *Resend {
	s := &Resend{apiKey: opts.APIKey, window: opts.Window, now: opts.Now, keys: map[string]*resendKey{},
		limit: opts.Limit, gate: newLimitGate(opts.Limit)}
	if s.apiKey == "" {
		s.apiKey = DefaultResendSinkKey
	}
	if s.window <= 0 {
		s.window = 24 * time.Hour
	}
	if s.now == nil {
		s.now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /emails", s.send)
	mux.HandleFunc("POST /emails/batch", s.sendBatch)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		s.record(r, nil, http.StatusNotFound, false)
		resendError(rw, http.StatusNotFound, "not_found", "The requested endpoint does not exist.")
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// Endpoint is the sink's base URL, for the provider option endpoint=.
func (s *Resend) Endpoint() string { return s.srv.URL }

// APIKey is the key the sink accepts.
func (s *Resend) APIKey() string { return s.apiKey }

// URL is the provider URL of the sink:
// resend://KEY@?endpoint=http%3A%2F%2F127.0.0.1%3APORT&rate=…, the rate
// the sink's own (rate=none when it enforces none).
func (s *Resend) URL() string {
	return "resend://" + url.PathEscape(s.apiKey) + "@?endpoint=" + url.QueryEscape(s.srv.URL) + "&" + providerRateOption(s.limit)
}

// RateLimited is how many requests the sink refused for its rate limit.
func (s *Resend) RateLimited() int { return s.gate.count() }

// Close stops the server (waiting for requests in progress).
func (s *Resend) Close() { s.srv.Close() }

// Effects returns the emails created, in order.
func (s *Resend) Effects() []ResendEmail {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ResendEmail, len(s.emails))
	copy(out, s.emails)
	return out
}

// CountByIdempotencyKey counts the emails created per Idempotency-Key.
func (s *Resend) CountByIdempotencyKey() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, e := range s.emails {
		out[e.IdempotencyKey]++
	}
	return out
}

// EffectHeader is the header in which Onceplan's messages carry their
// effect id.
const EffectHeader = "X-Onceplan-Effect"

// CountByEffect counts the emails created per EffectHeader ("" for those
// without one). It counts effects whichever call created them: the
// emails of a batch share the batch's Idempotency-Key, each keeps its own
// effect id.
func (s *Resend) CountByEffect() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, e := range s.emails {
		out[e.HeaderOf(EffectHeader)]++
	}
	return out
}

// CountByRecipient counts the emails created per "to" address.
func (s *Resend) CountByRecipient() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, e := range s.emails {
		for _, to := range e.To {
			out[to]++
		}
	}
	return out
}

// Requests is the number of requests received (any method and path).
func (s *Resend) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// RequestLog returns the requests received, in order.
func (s *Resend) RequestLog() []ResendRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ResendRequest, len(s.requests))
	copy(out, s.requests)
	return out
}

// FailNext answers the next n POSTs with status, headers and body, creating
// nothing and remembering no key (e.g. 429 with Retry-After, 422, 500).
// An empty body is answered with Resend's error shape for the status.
func (s *Resend) FailNext(n, status int, headers map[string]string, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.set(n, status, headers, body)
}

// RateLimitNext answers the next n POSTs 429 rate_limit_exceeded with
// "Retry-After: retryAfter" (seconds) and Resend's ratelimit-* headers.
func (s *Resend) RateLimitNext(n, retryAfter int) {
	s.FailNext(n, http.StatusTooManyRequests, map[string]string{
		"Retry-After": fmt.Sprint(retryAfter), "Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": fmt.Sprint(retryAfter),
	}, "")
}

// ApplyThenFail creates the next n emails (their keys remembered with a
// 200 answer) and then answers status (e.g. 500): sent, but the client
// cannot know.
func (s *Resend) ApplyThenFail(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after.failN, s.after.failStatus = n, status
}

// ApplyThenHang creates the next n emails and then waits d (or until the
// client goes away) before answering 200; meanwhile their keys are in
// progress (a repeat is answered 409 concurrent_idempotent_requests).
func (s *Resend) ApplyThenHang(n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after.hangN, s.after.hangFor = n, d
}

// ApplyThenDrop creates the next n emails and closes the connection
// without answering: a lost response.
func (s *Resend) ApplyThenDrop(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after.dropN = n
}

func (s *Resend) record(r *http.Request, body []byte, status int, replayed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, ResendRequest{
		Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body, Status: status, Replayed: replayed, At: time.Now(),
	})
}

// resendErrorBody is Resend's error shape.
func resendErrorBody(status int, name, message string) []byte {
	b, _ := json.Marshal(map[string]any{"statusCode": status, "message": message, "name": name})
	return b
}

func resendError(rw http.ResponseWriter, status int, name, message string) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = rw.Write(resendErrorBody(status, name, message))
}

// resendPayload is the part of POST /emails the sink looks at. "to" is a
// string or a list of strings.
type resendPayload struct {
	From    string            `json:"from"`
	To      json.RawMessage   `json:"to"`
	Subject string            `json:"subject"`
	Headers map[string]string `json:"headers"`
}

func recipients(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil && one != "" {
		return []string{one}
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

func (s *Resend) send(rw http.ResponseWriter, r *http.Request) {
	body, key, hasKey, ok := s.admit(rw, r)
	if !ok {
		return
	}
	var p resendPayload
	if err := json.Unmarshal(body, &p); err != nil {
		s.record(r, body, http.StatusBadRequest, false)
		resendError(rw, http.StatusBadRequest, "validation_error", "The request body is not valid JSON.")
		return
	}
	if msg := p.invalid(); msg != "" {
		s.record(r, body, http.StatusUnprocessableEntity, false)
		resendError(rw, http.StatusUnprocessableEntity, "missing_required_field", msg)
		return
	}
	s.apply(rw, r, body, key, hasKey, func() []byte {
		e := s.create(key, p, body)
		answer, _ := json.Marshal(map[string]string{"id": e.ID})
		return answer
	})
}

// MaxResendBatch is how many emails one POST /emails/batch may carry
// (Resend's documented limit).
const MaxResendBatch = 100

// sendBatch is POST /emails/batch: a JSON array of up to MaxResendBatch
// emails, created together under one Idempotency-Key. With
// "x-batch-validation: strict" (the default) one invalid email fails the
// whole batch (422, nothing created); with "permissive" the valid ones are
// created and the invalid ones are answered in "errors" by their index:
// {"data": [{"id"}…] (the created, in order), "errors": [{"index",
// "message"}…]}.
func (s *Resend) sendBatch(rw http.ResponseWriter, r *http.Request) {
	body, key, hasKey, ok := s.admit(rw, r)
	if !ok {
		return
	}
	mode := r.Header.Get("X-Batch-Validation")
	if mode == "" {
		mode = "strict"
	}
	if mode != "strict" && mode != "permissive" {
		s.record(r, body, http.StatusUnprocessableEntity, false)
		resendError(rw, http.StatusUnprocessableEntity, "validation_error", "x-batch-validation must be strict or permissive.")
		return
	}
	var raws []json.RawMessage
	err := json.Unmarshal(body, &raws)
	ps := make([]resendPayload, len(raws))
	for i := range raws {
		if err == nil {
			err = json.Unmarshal(raws[i], &ps[i])
		}
	}
	if err != nil {
		s.record(r, body, http.StatusBadRequest, false)
		resendError(rw, http.StatusBadRequest, "validation_error", "The request body must be a JSON array of emails.")
		return
	}
	if len(ps) == 0 || len(ps) > MaxResendBatch {
		s.record(r, body, http.StatusUnprocessableEntity, false)
		resendError(rw, http.StatusUnprocessableEntity, "validation_error", fmt.Sprintf("A batch holds 1 to %d emails; this one has %d.", MaxResendBatch, len(ps)))
		return
	}
	type batchError struct {
		Index   int    `json:"index"`
		Message string `json:"message"`
	}
	var errs []batchError
	for i, p := range ps {
		if msg := p.invalid(); msg != "" {
			errs = append(errs, batchError{Index: i, Message: fmt.Sprintf("emails[%d]: %s", i, msg)})
		}
	}
	if mode == "strict" && len(errs) > 0 {
		s.record(r, body, http.StatusUnprocessableEntity, false)
		resendError(rw, http.StatusUnprocessableEntity, "validation_error", errs[0].Message)
		return
	}
	s.apply(rw, r, body, key, hasKey, func() []byte {
		type created struct {
			ID string `json:"id"`
		}
		data := []created{}
		bad := map[int]bool{}
		for _, e := range errs {
			bad[e.Index] = true
		}
		for i, p := range ps {
			if !bad[i] {
				data = append(data, created{ID: s.create(key, p, raws[i]).ID})
			}
		}
		out := map[string]any{"data": data}
		if mode == "permissive" {
			out["errors"] = append([]batchError{}, errs...)
		}
		answer, _ := json.Marshal(out)
		return answer
	})
}

// admit reads a POST's body and applies what comes before its content:
// the API key, the rate limit and the Idempotency-Key's length. It answers and returns false when the request
// stops there.
func (s *Resend) admit(rw http.ResponseWriter, r *http.Request) (body []byte, key string, hasKey, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 40<<20))
	if err != nil {
		s.record(r, body, http.StatusBadRequest, false)
		resendError(rw, http.StatusBadRequest, "validation_error", "reading the body: "+err.Error())
		return nil, "", false, false
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		s.record(r, body, http.StatusUnauthorized, false)
		resendError(rw, http.StatusUnauthorized, "missing_api_key", "Missing API key in the authorization header.")
		return nil, "", false, false
	case auth != "Bearer "+s.apiKey:
		s.record(r, body, http.StatusForbidden, false)
		resendError(rw, http.StatusForbidden, "invalid_api_key", "API key is invalid.")
		return nil, "", false, false
	}
	if allowed, after := s.gate.allow(); !allowed {
		s.record(r, body, http.StatusTooManyRequests, false)
		h := rw.Header()
		h.Set("Retry-After", strconv.Itoa(after))
		h.Set("Ratelimit-Limit", strconv.Itoa(max(1, int(math.Ceil(s.limit.PerSecond)))))
		h.Set("Ratelimit-Remaining", "0")
		h.Set("Ratelimit-Reset", strconv.Itoa(after))
		resendError(rw, http.StatusTooManyRequests, "rate_limit_exceeded", fmt.Sprintf("Too many requests. You can only make %s requests per second. See rate limit response headers for more information. Or contact support to increase rate limit.", strconv.FormatFloat(s.limit.PerSecond, 'f', -1, 64)))
		return nil, "", false, false
	}
	key, hasKey = r.Header.Get("Idempotency-Key"), len(r.Header.Values("Idempotency-Key")) > 0
	if hasKey && (len(key) < 1 || len(key) > 256) {
		s.record(r, body, http.StatusBadRequest, false)
		resendError(rw, http.StatusBadRequest, "invalid_idempotency_key", "The key must be between 1-256 chars.")
		return nil, "", false, false
	}
	return body, key, hasKey, true
}

// invalid is why Resend refuses the email, or "".
func (p resendPayload) invalid() string {
	if p.From == "" || len(recipients(p.To)) == 0 || p.Subject == "" {
		return "The request body is missing one or more required fields: from, to and subject."
	}
	return ""
}

// create records one email created under key (s.mu held).
func (s *Resend) create(key string, p resendPayload, body []byte) ResendEmail {
	s.seq++
	e := ResendEmail{
		ID:             fmt.Sprintf("4ef9a417-02e9-4d39-ad75-%012d", s.seq),
		IdempotencyKey: key, To: recipients(p.To), From: p.From, Subject: p.Subject, Headers: p.Headers,
		Body: bytes.Clone(body), At: time.Now(),
	}
	s.emails = append(s.emails, e)
	return e
}

// apply is a valid request's effect: a canned failure, else the
// Idempotency-Key's earlier answer within the window, else build (which
// creates the emails, s.mu held, and returns the answer), remembered
// under the key, then answered as the sink was told (after-apply faults).
func (s *Resend) apply(rw http.ResponseWriter, r *http.Request, body []byte, key string, hasKey bool, build func() []byte) {
	s.mu.Lock()
	if f, ok := s.fail.take(); ok {
		s.mu.Unlock()
		s.record(r, body, f.status, false)
		if f.body == "" {
			name := "application_error"
			if f.status == http.StatusTooManyRequests {
				name = "rate_limit_exceeded"
			}
			f.body = string(resendErrorBody(f.status, name, "the sink was told to fail this request"))
		}
		f.write(rw, "application/json")
		return
	}
	now := s.now()
	hash := sha256.Sum256(body)
	if k, seen := s.keys[key]; hasKey && seen && now.Before(k.first.Add(s.window)) {
		switch {
		case k.inProgress:
			s.mu.Unlock()
			s.record(r, body, http.StatusConflict, false)
			resendError(rw, http.StatusConflict, "concurrent_idempotent_requests", "Same idempotency key used while original request is still in progress.")
		case k.bodyHash != hash:
			s.mu.Unlock()
			s.record(r, body, http.StatusConflict, false)
			resendError(rw, http.StatusConflict, "invalid_idempotent_request", "Same idempotency key used with a different request payload.")
		default:
			status, answer := k.status, k.answer
			s.mu.Unlock()
			s.record(r, body, status, true)
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(status)
			_, _ = rw.Write(answer)
		}
		return
	}
	answer := append(build(), '\n')
	k := &resendKey{first: now, bodyHash: hash, status: http.StatusOK, answer: answer}
	if hasKey {
		s.keys[key] = k
	}
	then := s.after.next()
	k.inProgress = then.hang
	s.mu.Unlock()

	switch {
	case then.failStatus != 0:
		s.record(r, body, then.failStatus, false)
		resendError(rw, then.failStatus, "internal_server_error", "the sink created the email and then failed")
	case then.drop:
		s.record(r, body, 0, false)
		dropConnection(rw)
	default:
		sleepCtx(r, then.hangFor)
		s.mu.Lock()
		k.inProgress = false
		s.mu.Unlock()
		s.record(r, body, http.StatusOK, false)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusOK)
		_, _ = rw.Write(answer)
	}
}

// HeaderOf returns header name (case-insensitive) of e's request, or "".
func (e ResendEmail) HeaderOf(name string) string {
	for k, v := range e.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
