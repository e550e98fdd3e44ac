package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/onceplan/onceplan/plan"
)

// MaxWebhookBody is how much of a webhook's answer body is kept.
const MaxWebhookBody = 64 << 10

// Raw webhook answers. A response is framed like HTTP/1.1:
//
//	HTTP/1.1 200 OK\r\n
//	Content-Type: application/json\r\n       (every header as received, sorted,
//	X-Receipt: r-42\r\n                        Set-Cookie left out)
//	\r\n
//	{"receipt":"r-42"}                        (the body, at most 64 KiB)
//
// When the body was cut at 64 KiB the header "Onceplan-Body-Truncated: true"
// is added; when reading it failed, "Onceplan-Body-Error: <error>". The
// status line is Go's resp.Proto and resp.Status. A transport error (no
// status line received) is one line, with whether the request had been
// fully written:
//
//	transport-error wrote-request=false error="dial tcp …: connection refused"
//	transport-error wrote-request=true error="… (Client.Timeout exceeded while awaiting headers)"
const (
	transportErrorTag = "transport-error"
	bodyTruncated     = "Onceplan-Body-Truncated"
	bodyError         = "Onceplan-Body-Error"
)

type webhookProvider struct {
	*limiter
	name     string
	url      string // redacted, with options
	endpoint string // the URL posted to (no options)
	probe    string // "" when not probed
	dedupe   bool
	settle   time.Duration
	// dedupeWindow and probeRetention are the receiver's windows
	// (dedupe_window=, probe_retention=; 0: for ever).
	dedupeWindow, probeRetention time.Duration
	client                       *http.Client
	transport                    *http.Transport
}

func newWebhookFromURL(name string, u *url.URL, o options) (Provider, error) {
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return nil, errorf(name, "webhook URL has no host (want %s://host/path)", strings.ToLower(u.Scheme))
	}
	if o.settleSet && o.probe == "" {
		return nil, errorf(name, "settle applies only to a provider that can be probed (maildir, or http with probe=URL)")
	}
	if o.dedupeWindowSet && !o.dedupe {
		return nil, errorf(name, "dedupe_window applies only with dedupe=true (how long the receiver honours Idempotency-Key)")
	}
	if o.probeRetentionSet && o.probe == "" {
		return nil, errorf(name, "probe_retention applies only with probe=URL (how long the receiver can be asked)")
	}
	endpoint := *u
	endpoint.Scheme = strings.ToLower(u.Scheme)
	endpoint.RawQuery = ""
	endpoint.ForceQuery = false
	endpoint.Fragment, endpoint.RawFragment = "", ""
	client, tr := newHTTPClient(o.concurrency, o.timeout)
	p := &webhookProvider{
		limiter:  newLimiter(o.perSecond, o.concurrency, o.rateScope),
		name:     name,
		url:      Redacted(u.String()), // the probe option may carry a password too
		endpoint: endpoint.String(),
		probe:    strings.TrimRight(o.probe, "/"),
		dedupe:   o.dedupe,
		settle:   DefaultHTTPSettle,
		// A receiver of ours remembers for ever unless the URL says not.
		dedupeWindow: o.dedupeWindow, probeRetention: o.probeRetention,
		transport: tr,
		client:    client,
	}
	if o.settleSet {
		p.settle = o.settle
	}
	return p, nil
}

func (p *webhookProvider) Name() string   { return p.name }
func (p *webhookProvider) Kind() string   { return "http" }
func (p *webhookProvider) String() string { return p.name + "=" + p.url }

// Capabilities: what the URL's options declared about the endpoint.
func (p *webhookProvider) Capabilities() Capabilities {
	c := Capabilities{Dedupe: p.dedupe, Probe: p.probe != "", DedupeWindow: p.dedupeWindow, ProbeRetention: p.probeRetention}
	if c.Probe {
		c.SettleWindow = p.settle
	}
	return c
}

func (p *webhookProvider) Close() error {
	p.transport.CloseIdleConnections()
	return nil
}

// webhookBody is the JSON posted for one effect.
type webhookBody struct {
	Key      string       `json:"key"`
	Epoch    int          `json:"epoch"`
	EffectID string       `json:"effect_id"`
	Target   string       `json:"target"`
	Message  plan.Message `json:"message"`
}

// Send posts the effect as JSON with the header Idempotency-Key: EffectID.
// Go's transport may resend a request on its own only when nothing of it
// was written (the body is not replayable), and redirects are not
// followed, so the endpoint sees at most one POST per Send.
func (p *webhookProvider) Send(ctx context.Context, r Request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := EffectID(r.Key, r.Epoch)
	body, err := json.Marshal(webhookBody{Key: r.Key, Epoch: r.Epoch, EffectID: id, Target: r.Target, Message: r.Message})
	if err != nil {
		return encodeLine(transportErrorTag, field{"wrote-request", "false"}, field{"error", "encoding the request: " + err.Error()}), nil
	}
	return postOnce(ctx, p.client, p.endpoint, body, http.Header{"Idempotency-Key": {id}}, nil), nil
}

// postOnce POSTs a JSON body at most once — the request is not
// replayable, so the transport never sends it twice — and returns the raw
// answer as the ledger records it: the framed response (frameResponse), or
// a transport error saying whether the request had been written (an
// answer lost after that is unknown, not failed). scrub, when set, cleans
// an error's text of a secret it should never hold. Every HTTP provider
// sends through it.
func postOnce(ctx context.Context, client *http.Client, endpoint string, body []byte, headers http.Header, scrub func(string) string) []byte {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	if scrub == nil {
		scrub = func(s string) string { return s }
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return encodeLine(transportErrorTag, field{"wrote-request", "false"}, field{"error", scrub(redactURLError(err))})
	}
	req.GetBody = nil // not replayable: the transport must not post twice
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "onceplan")
	for k, vs := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return encodeLine(transportErrorTag,
			field{"wrote-request", strconv.FormatBool(wrote.Load())},
			field{"error", scrub(redactURLError(err))})
	}
	return frameResponse(resp)
}

// getOnce GETs u with headers (besides Accept and User-Agent) for a probe
// and returns the framed answer (frameResponse); a request that could not
// be made or answered is an error naming the provider, the URL's password
// hidden. Every HTTP probe asks through it.
func getOnce(ctx context.Context, client *http.Client, name, u string, headers http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("probe of provider %q: %s", name, redactURLError(err))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "onceplan")
	for k, vs := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probe of provider %q: %s", name, redactURLError(err))
	}
	return frameResponse(resp), nil
}

// redactURLError is err's text with the URL's password hidden.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + strconv.Quote(Redacted(ue.URL)) + ": " + ue.Err.Error()
	}
	return err.Error()
}

// frameResponse reads resp (at most MaxWebhookBody of its body), closes it
// and frames it as documented above.
func frameResponse(resp *http.Response) []byte {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookBody+1))
	h := resp.Header.Clone()
	h.Del("Set-Cookie")
	h.Del(bodyTruncated)
	h.Del(bodyError)
	if len(body) > MaxWebhookBody {
		body = body[:MaxWebhookBody]
		h.Set(bodyTruncated, "true")
		// Drain a little so the connection may be reused; not unboundedly.
		_, _ = io.CopyN(io.Discard, resp.Body, 256<<10)
	}
	if err != nil {
		h.Set(bodyError, err.Error())
	}
	var b bytes.Buffer
	b.WriteString(resp.Proto + " " + resp.Status + "\r\n")
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// framed is a parsed framed response.
type framed struct {
	code   int
	status string // the status line after the protocol
	header textproto.MIMEHeader
	body   []byte
}

// parseFramed reads a framed response. It accepts CRLF or LF line ends.
func parseFramed(raw []byte) (framed, bool) {
	var f framed
	br := bufio.NewReader(bytes.NewReader(raw))
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return f, false
	}
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/") {
		return f, false
	}
	codeText, _, _ := strings.Cut(status, " ")
	if len(codeText) != 3 {
		return f, false
	}
	code, err := strconv.Atoi(codeText)
	if err != nil || code < 100 || code > 999 {
		return f, false
	}
	f.code, f.status = code, status
	f.header, err = tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return f, false
	}
	f.body, _ = io.ReadAll(br)
	return f, true
}

// transportVerdict classifies a transport-error line of postOnce: failed,
// retryable, when the request had not been written (notSent: why), else
// unknown (lostAfter). Each HTTP provider words the two for its service.
func transportVerdict(f map[string]string, notSent, lostAfter string) Verdict {
	errText := oneLine(f["error"])
	if f["wrote-request"] == "false" {
		return Verdict{Outcome: OutcomeFailed, Retryable: true, NotSent: true, Reason: notSent + ": " + errText}
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: lostAfter + ": " + errText}
}

// Classify interprets a webhook raw answer; see [ClassifyWebhook].
func (p *webhookProvider) Classify(raw []byte) Verdict { return ClassifyWebhook(raw) }

// ClassifyWebhook interprets a raw answer of a webhook Send:
//   - 2xx → done, receipt from the JSON body's "receipt" or "id", else the
//     X-Receipt or Location header, else "HTTP <code>"; but a 2xx whose
//     JSON body has "status":"stranded" → stranded (reason: body "reason");
//   - 409 → retry_later after Retry-After (default 5s);
//   - 429 → quota for Retry-After (seconds, or an HTTP-date measured from
//     the response's Date header; default 60s);
//   - 408 → failed, retryable (the server did not process the request);
//   - other 4xx → failed for good;
//   - 5xx, 3xx (redirects are not followed) and other codes → unknown;
//   - a transport error before the request was fully written → failed,
//     retryable; after → unknown;
//   - anything unrecognised → unknown.
func ClassifyWebhook(raw []byte) Verdict {
	if f, ok := parseLine(raw, transportErrorTag); ok {
		return transportVerdict(f, "the request could not be sent", "the connection failed after the request was sent")
	}
	f, ok := parseFramed(raw)
	if !ok {
		return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised webhook answer: " + oneLine(string(raw))}
	}
	said := "the webhook answered HTTP " + oneLine(f.status) + bodySnippet(f.body)
	switch {
	case f.code >= 200 && f.code <= 299:
		obj := jsonObject(f.body)
		receipt := jsonString(obj, "receipt")
		if receipt == "" {
			receipt = jsonString(obj, "id")
		}
		if receipt == "" {
			receipt = oneLine(f.header.Get("X-Receipt"))
		}
		if receipt == "" {
			receipt = oneLine(f.header.Get("Location"))
		}
		if receipt == "" {
			receipt = "HTTP " + strconv.Itoa(f.code)
		}
		if jsonString(obj, "status") == "stranded" {
			reason := jsonString(obj, "reason")
			if reason == "" {
				reason = "the webhook says the effect is stranded"
			}
			return Verdict{Outcome: OutcomeStranded, Receipt: receipt, Reason: reason}
		}
		return Verdict{Outcome: OutcomeDone, Receipt: receipt}
	case f.code == 409:
		return Verdict{Outcome: OutcomeRetryLater, Reason: said,
			RetryAfter: retryAfter(f.header, DefaultRetryLaterAfter)}
	case f.code == 429:
		return Verdict{Outcome: OutcomeQuota, Reason: said,
			RetryAfter: retryAfter(f.header, DefaultQuotaRetryAfter)}
	}
	return statusVerdict(f.code, said)
}

func bodySnippet(body []byte) string {
	s := oneLine(string(body[:min(len(body), 200)]))
	if s == "" {
		return ""
	}
	return ": " + s
}

// maxRetryAfter bounds a provider's Retry-After.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads Retry-After as seconds or as an HTTP-date; a date is
// measured from the response's own Date header (so the same bytes always
// give the same wait) and, without one, gives def. The result is at least
// one second and at most a day.
func retryAfter(h textproto.MIMEHeader, def time.Duration) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return def
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else {
		at, err := http.ParseTime(v)
		if err != nil {
			return def
		}
		now, err := http.ParseTime(strings.TrimSpace(h.Get("Date")))
		if err != nil {
			return def
		}
		d = at.Sub(now)
	}
	return min(max(d, time.Second), maxRetryAfter)
}

// jsonObject decodes body as a JSON object, or returns nil.
func jsonObject(body []byte) map[string]json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	return obj
}

// jsonString is obj[key] as text: a JSON string, or a number's literal.
func jsonString(obj map[string]json.RawMessage, key string) string {
	v, ok := obj[key]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return oneLine(s)
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String()
	}
	return ""
}

// Probe asks GET <probe>/<EffectID>: 200 → found (receipt from the JSON
// body's "receipt" or "id", else X-Receipt), 404 → not found, anything else
// → an error (the probe says nothing).
func (p *webhookProvider) Probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	if p.probe == "" {
		return ProbeResult{}, ErrNoProbe
	}
	return ProbeHTTP(ctx, p.client, p.name, p.probe+"/"+url.PathEscape(EffectID(key, epoch)))
}

// ProbeHTTP asks GET u whether an effect exists, by the HTTP probe rule
// every probe here follows (webhook providers, and the tool calls of
// package toolcall): 200 → found (receipt from the JSON body's "receipt"
// or "id", else X-Receipt), 404 → not found, anything else → an error
// (the probe says nothing). Raw is the framed answer (frameResponse),
// whatever it said; name names the asker in errors.
func ProbeHTTP(ctx context.Context, client *http.Client, name, u string) (ProbeResult, error) {
	raw, err := getOnce(ctx, client, name, u, nil)
	if err != nil {
		return ProbeResult{}, err
	}
	// frameResponse's framing of a response always parses back, with the
	// response's code, status and headers.
	f, _ := parseFramed(raw)
	switch f.code {
	case http.StatusOK:
		obj := jsonObject(f.body)
		receipt := jsonString(obj, "receipt")
		if receipt == "" {
			receipt = jsonString(obj, "id")
		}
		if receipt == "" {
			receipt = oneLine(f.header.Get("X-Receipt"))
		}
		return ProbeResult{Found: true, Raw: raw, Receipt: receipt}, nil
	case http.StatusNotFound:
		return ProbeResult{Raw: raw}, nil
	}
	return ProbeResult{Raw: raw}, fmt.Errorf("probe of provider %q answered HTTP %s", name, f.status)
}

// statusVerdict is the verdict on an HTTP answer of status code (said says
// it, for the reason) that no provider-specific rule decided: 408 is worth
// another try, another 4xx a rejection, a redirect (not followed) and
// anything else leave the request's fate unknown.
func statusVerdict(code int, said string) Verdict {
	switch {
	case code == 408:
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: said}
	case code >= 400 && code <= 499:
		return Verdict{Outcome: OutcomeFailed, Reason: said}
	case code >= 300 && code <= 399:
		return Verdict{Outcome: OutcomeUnknown, Reason: said + " (a redirect, not followed: the request may have been processed)"}
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: said}
}
