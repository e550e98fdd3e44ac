package provider

// The resend:// kind sends through Resend's HTTP API, POST /emails, with
// the effect id as the Idempotency-Key: Resend remembers a key for 24 hours
// from the first request with it and answers a repeat with the same body
// with the same response ({"id": …}) without sending again, so recovery
// may send again, with the same key, while that window is open.
//
// It is a small net/http client rather than Resend's Go SDK
// (github.com/resend/resend-go): the SDK is not among the modules this
// project can take, and it would hide what the ledger needs — the answer's
// raw bytes as received, and whether a failed request had been written.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Resend defaults.
const (
	// DefaultResendHost is the API host of resend://KEY@ without one.
	DefaultResendHost = "api.resend.com"
	// DefaultResendDedupeWindow is how long Resend honours an
	// Idempotency-Key, from the first request with it (its documentation:
	// "we keep idempotency keys in our system for 24 hours").
	DefaultResendDedupeWindow = 24 * time.Hour
	// maxResendIdempotencyKey is Resend's limit on a key's length.
	maxResendIdempotencyKey = 256
)

// resendBuildTag starts the raw answer of a message that could not be put
// into a request (nothing was sent):
//
//	resend-build error="the unsubscribe link contains a line break"
const resendBuildTag = "resend-build"

type resendProvider struct {
	*limiter
	name      string
	url       string // redacted
	endpoint  string // POST endpoint + "/emails"
	apiKey    string
	window    time.Duration
	batch     int // batch=N; 0: one email per call
	client    *http.Client
	transport *http.Transport
}

// newResendFromURL builds resend://API_KEY@[host][?endpoint=URL][&dedupe_window=D][&batch=N].
func newResendFromURL(name string, u *url.URL, o options) (Provider, error) {
	if u.Opaque != "" {
		return nil, errorf(name, "resend URL must be resend://API_KEY@[host] (the API key before the '@')")
	}
	if u.User == nil || u.User.Username() == "" {
		return nil, errorf(name, "resend URL has no API key (want resend://API_KEY@%s)", DefaultResendHost)
	}
	if _, hasPass := u.User.Password(); hasPass {
		return nil, errorf(name, "resend URL must carry the API key alone before the '@', without ':'")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, errorf(name, "resend URL must not have a path (got %q)", u.Path)
	}
	if o.settleSet {
		return nil, errorf(name, "settle applies only to a provider that can be probed (maildir, or http with probe=URL)")
	}
	base := "https://" + DefaultResendHost
	switch {
	case o.endpoint != "" && u.Host != "":
		return nil, errorf(name, "resend URL gives both a host and endpoint=; give one")
	case o.endpoint != "":
		base = o.endpoint // apiEndpoint trimmed it
	case u.Host != "":
		if u.Hostname() == "" {
			return nil, errorf(name, "resend URL has no host name")
		}
		if ps := u.Port(); ps != "" {
			if n, err := strconv.Atoi(ps); err != nil || n < 1 || n > 65535 {
				return nil, errorf(name, "resend URL port %q is not a number from 1 to 65535", ps)
			}
		}
		base = "https://" + u.Host
	}
	window := DefaultResendDedupeWindow
	if o.dedupeWindowSet {
		window = o.dedupeWindow
	}
	client, tr := newHTTPClient(o.concurrency, o.timeout)
	return &resendProvider{
		limiter:   newLimiter(o.perSecond, o.concurrency, o.rateScope),
		name:      name,
		url:       Redacted(u.String()), // the key is the whole userinfo: Redacted hides it
		endpoint:  base + "/emails",
		apiKey:    u.User.Username(),
		window:    window,
		batch:     o.batch,
		transport: tr,
		client:    client,
	}, nil
}

func (p *resendProvider) Name() string   { return p.name }
func (p *resendProvider) Kind() string   { return "resend" }
func (p *resendProvider) String() string { return p.name + "=" + p.url }

// Capabilities: Resend deduplicates by Idempotency-Key for its window
// (24 hours unless dedupe_window= says otherwise); it cannot be asked by
// our key.
func (p *resendProvider) Capabilities() Capabilities {
	return Capabilities{Dedupe: true, DedupeWindow: p.window}
}

// Probe is not possible: Resend finds an email only by its own id.
func (p *resendProvider) Probe(context.Context, string, int) (ProbeResult, error) {
	return ProbeResult{}, ErrNoProbe
}

func (p *resendProvider) Close() error {
	p.transport.CloseIdleConnections()
	return nil
}

// resendEmail is the JSON body of POST /emails. It is a function of the
// request alone (no date, no random boundary), so a repeat with the same
// key has the same body, as Resend requires of a repeat.
type resendEmail struct {
	From    string            `json:"from"`
	To      []string          `json:"to"`
	Subject string            `json:"subject"`
	Text    string            `json:"text,omitempty"`
	HTML    string            `json:"html,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

func resendBody(r Request) ([]byte, error) {
	to := r.Message.To
	if to == "" {
		to = r.Target
	}
	if strings.ContainsAny(r.Message.Subject, "\r\n") {
		return nil, errorText("the subject contains a line break")
	}
	e := resendEmail{From: r.Message.From, To: []string{to}, Subject: r.Message.Subject, Text: r.Message.Text, HTML: r.Message.HTML,
		Headers: map[string]string{string(effectHeader): EffectID(r.Key, r.Epoch)}}
	if link := r.Message.ListUnsubscribe; link != "" {
		if strings.ContainsAny(link, "\r\n<> ") {
			return nil, errorText("the unsubscribe link contains a line break, a space or an angle bracket")
		}
		e.Headers["List-Unsubscribe"] = "<" + link + ">"
		e.Headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
	}
	return json.Marshal(e)
}

// resendRequest is r's Idempotency-Key (its effect id) and the body of
// POST /emails, or why r cannot be put into a request: what Send answers
// as a resend-build line, and EncodeBatch as a *BatchMemberError.
func resendRequest(r Request) (id string, body []byte, err error) {
	id = EffectID(r.Key, r.Epoch)
	if len(id) > maxResendIdempotencyKey {
		return "", nil, errorText("the effect id is longer than Resend's 256 characters")
	}
	if body, err = resendBody(r); err != nil {
		return "", nil, err
	}
	return id, body, nil
}

type errorText string

func (e errorText) Error() string { return string(e) }

// Send posts the message with "Authorization: Bearer API_KEY" and
// "Idempotency-Key: EffectID". The raw answer is framed like a webhook's
// (see the webhook provider), or is a transport-error line, or a
// resend-build line when no request could be made. As for webhooks, the
// transport never posts twice and redirects are not followed.
func (p *resendProvider) Send(ctx context.Context, r Request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, body, err := resendRequest(r)
	if err != nil {
		return encodeLine(resendBuildTag, field{"error", err.Error()}), nil
	}
	return postOnce(ctx, p.client, p.endpoint, body, http.Header{
		"Authorization": {"Bearer " + p.apiKey}, "Idempotency-Key": {id},
	}, p.scrub), nil
}

// scrub removes the API key from a text that should never hold it (an
// error from the transport), should it ever.
func (p *resendProvider) scrub(s string) string {
	if p.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.apiKey, redactedPasswordMarker)
}

// Classify interprets a Resend raw answer; see [ClassifyResend].
func (p *resendProvider) Classify(raw []byte) Verdict { return ClassifyResend(raw) }

// ClassifyResend interprets a raw answer of a resend Send, after Resend's
// documented answers:
//   - 2xx → done, receipt the body's "id" (else "HTTP <code>");
//   - 409 "invalid_idempotent_request" (the key was used with another
//     body: a message with this effect id was already accepted, with other
//     content) → unknown, for a person to look at;
//   - 409 "concurrent_idempotent_requests" (the first request with the key
//     is still in progress), or any other 409 → retry_later after
//     Retry-After (default 5s): nothing to settle yet;
//   - 429 (rate_limit_exceeded, daily or monthly quota) → quota for
//     Retry-After, else ratelimit-reset, in seconds (default 60s);
//   - 408 → failed, retryable; other 4xx (validation, API key, from
//     address) → failed for good;
//   - 5xx, 3xx and other codes → unknown (the request may have been
//     processed; a re-send with the same key settles it);
//   - a transport error before the request was fully written → failed,
//     retryable; after → unknown;
//   - a message that could not be put into a request → failed for good;
//   - anything unrecognised → unknown.
func ClassifyResend(raw []byte) Verdict {
	return classifyResend(raw, "this effect id was already used with a different message: one was probably sent, with other content")
}

// classifyResend is ClassifyResend's rule, for one email's answer or a
// batch's whole answer; keyReused says what a 409
// invalid_idempotent_request means for the key the call carried.
func classifyResend(raw []byte, keyReused string) Verdict {
	if f, ok := parseLine(raw, resendBuildTag); ok {
		return Verdict{Outcome: OutcomeFailed, Reason: "the message could not be sent through Resend: " + oneLine(f["error"])}
	}
	if f, ok := parseLine(raw, transportErrorTag); ok {
		return transportVerdict(f, "the request to Resend could not be sent", "the connection failed after the request to Resend was sent")
	}
	f, ok := parseFramed(raw)
	if !ok {
		return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised Resend answer: " + oneLine(string(raw))}
	}
	obj := jsonObject(f.body)
	said := resendSaid(f, obj)
	switch {
	case f.code >= 200 && f.code <= 299:
		receipt := jsonString(obj, "id")
		if receipt == "" {
			receipt = "HTTP " + strconv.Itoa(f.code)
		}
		return Verdict{Outcome: OutcomeDone, Receipt: receipt}
	case f.code == 409 && jsonString(obj, "name") == "invalid_idempotent_request":
		return Verdict{Outcome: OutcomeUnknown, Reason: said + " (" + keyReused + ")"}
	case f.code == 409:
		return Verdict{Outcome: OutcomeRetryLater, Reason: said, RetryAfter: retryAfter(f.header, DefaultRetryLaterAfter)}
	case f.code == 429:
		h := f.header
		if strings.TrimSpace(h.Get("Retry-After")) == "" && strings.TrimSpace(h.Get("Ratelimit-Reset")) != "" {
			h = textproto.MIMEHeader{"Retry-After": {h.Get("Ratelimit-Reset")}}
		}
		return Verdict{Outcome: OutcomeQuota, Reason: said, RetryAfter: retryAfter(h, DefaultQuotaRetryAfter)}
	}
	return statusVerdict(f.code, said)
}

// resendSaid is what Resend answered, for a reason: the status, the
// error's name and message (else the start of the body).
func resendSaid(f framed, obj map[string]json.RawMessage) string {
	said := "Resend answered HTTP " + oneLine(f.status)
	if name := jsonString(obj, "name"); name != "" {
		said += " " + name
	}
	if msg := jsonString(obj, "message"); msg != "" {
		return said + ": " + msg
	}
	return said + bodySnippet(f.body)
}
