package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// Postmark, through its HTTP API (https://postmarkapp.com/developer). There
// is no official Postmark SDK for Go, so this is a small net/http client of
// the two calls we rely on:
//
//   - POST /email (header X-Postmark-Server-Token) sends one message, with
//     Metadata {"onceplan_effect": EffectID}. Postmark does not deduplicate.
//   - GET /messages/outbound?count=1&offset=0&metadata_onceplan_effect=ID
//     finds it again: the probe. Postmark keeps outbound messages (and
//     their metadata) for its retention, 45 days by default (7–365 with
//     the Retention Add-on); after it, a search finds nothing, which proves
//     nothing, so recovery stops probing (Capabilities.ProbeRetention).
//
// Over SMTP (smtp:// with probe=postmark) the effect id goes in the header
// X-PM-Metadata-onceplan_effect, which Postmark turns into the same
// metadata, and the probe is the same API call.
const (
	// DefaultPostmarkHost is where postmark:// sends without a host.
	DefaultPostmarkHost = "api.postmarkapp.com"
	// DefaultPostmarkRetention is Postmark's default retention of outbound
	// messages (and so of what a probe can find): 45 days.
	DefaultPostmarkRetention = 45 * 24 * time.Hour
	// DefaultPostmarkSettle: how long after a send the search may still
	// not show the message. Postmark documents no bound; the messages API
	// shows a message once it is processed, normally within seconds. Like
	// the http probe's default.
	DefaultPostmarkSettle = DefaultHTTPSettle
	// PostmarkMetadataKey is the metadata field that carries the effect id
	// (Postmark allows names up to 20 characters and values up to 80; an
	// effect id is 68 characters plus the epoch's digits).
	PostmarkMetadataKey = "onceplan_effect"
	// PostmarkSMTPMetadataHeader carries the effect id over Postmark's SMTP.
	PostmarkSMTPMetadataHeader = "X-PM-Metadata-" + PostmarkMetadataKey
)

// Postmark API error codes (the body's ErrorCode) that Classify tells
// apart; every other non-zero code is a definite rejection.
const (
	postmarkOK            = 0
	postmarkBadToken      = 10
	postmarkMaintenance   = 100
	postmarkInvalidEmail  = 300
	postmarkInactiveRcpt  = 406
	postmarkRateLimitCode = 429
)

// postmarkBuildTag starts the raw answer of a message that could not be
// built into a request (nothing was sent):
//
//	postmark-build error="the subject contains a line break"
const postmarkBuildTag = "postmark-build"

// tokenUserinfoSchemes are the schemes whose whole userinfo is a secret (an
// API token written as postmark://TOKEN@host), redacted by [Redacted] to
// "xxxxx".
var tokenUserinfoSchemes = []string{"postmark", "resend"}

// redactTokenUserinfo redacts the whole userinfo of a URL of a scheme in
// tokenUserinfoSchemes; ok is false for other schemes. It works by hand, so
// a URL that does not parse is redacted too.
func redactTokenUserinfo(rawURL string) (string, bool) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return "", false
	}
	// The scheme is what precedes "://" back to the first byte a scheme
	// cannot hold ("name postmark://…" is redacted too).
	start := strings.LastIndexFunc(rawURL[:i], func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	}) + 1
	scheme := strings.ToLower(rawURL[start:i])
	known := false
	for _, s := range tokenUserinfoSchemes {
		known = known || s == scheme
	}
	if !known {
		return "", false
	}
	rest := rawURL[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	// The query may hold a URL with a password (endpoint=…), too.
	tail := rest[end:]
	if q := strings.IndexByte(tail, '?'); q >= 0 {
		query, fragment, hasFragment := strings.Cut(tail[q+1:], "#")
		tail = tail[:q+1] + redactQuery(query)
		if hasFragment {
			tail += "#" + fragment
		}
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return rawURL[:i+3] + rest[:end] + tail, true
	}
	return rawURL[:i+3] + redactedPasswordMarker + rest[at:end] + tail, true
}

// postmarkAPI is Postmark's HTTP API for one server token: the sender of
// postmark:// and the probe of smtp:// with probe=postmark.
type postmarkAPI struct {
	name     string // the provider's name, for errors
	endpoint string // "https://api.postmarkapp.com", no trailing slash
	token    string
	stream   string // MessageStream; "" = Postmark's default ("outbound")
	client   *http.Client
}

// apiEndpoint checks an endpoint= (or probe_endpoint=) option: an http(s)
// URL without userinfo, query or fragment; plain http only to this machine.
func apiEndpoint(name, option, v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", errorf(name, "%s %q is not an http(s) URL without credentials or query", option, Redacted(v))
	}
	if u.Scheme == "http" && !IsLoopbackHost(u.Hostname()) {
		return "", errorf(name, "%s %q: plain http is allowed only to 127.0.0.1 or localhost (the API token would travel in clear)", option, v)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// IsLoopbackHost reports whether h (a URL's host name, without port) is
// localhost or a loopback IP address: the only hosts plain http:// may
// reach.
func IsLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func newHTTPClient(concurrency int, timeout time.Duration) (*http.Client, *http.Transport) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = concurrency
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect is an answer: following it would turn a POST into a
		// GET of something else (301–303) or repeat it (307, 308).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, tr
}

type postmarkProvider struct {
	*limiter
	name      string
	url       string // redacted
	api       *postmarkAPI
	settle    time.Duration
	retention time.Duration
	batch     int // batch=N; 0: one message per call
	transport *http.Transport
}

func newPostmarkFromURL(name string, u *url.URL, o options) (Provider, error) {
	if u.Opaque != "" {
		return nil, errorf(name, "postmark URL must be postmark://SERVER_TOKEN@%s", DefaultPostmarkHost)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, errorf(name, "postmark URL must not have a path (got %q)", u.Path)
	}
	if u.User == nil || u.User.Username() == "" {
		return nil, errorf(name, "postmark URL has no server token (want postmark://SERVER_TOKEN@%s)", DefaultPostmarkHost)
	}
	if _, hasPass := u.User.Password(); hasPass {
		return nil, errorf(name, "postmark URL: write the server token alone before '@' (postmark://SERVER_TOKEN@%s), not user:password", DefaultPostmarkHost)
	}
	host := u.Host
	if host == "" {
		host = DefaultPostmarkHost
	}
	endpoint := "https://" + host
	if o.endpoint != "" {
		endpoint = o.endpoint
	}
	client, tr := newHTTPClient(o.concurrency, o.timeout)
	p := &postmarkProvider{
		limiter: newLimiter(o.perSecond, o.concurrency, o.rateScope),
		name:    name,
		url:     Redacted(u.String()),
		api: &postmarkAPI{
			name: name, endpoint: endpoint, token: u.User.Username(),
			stream: o.messageStream, client: client,
		},
		settle:    DefaultPostmarkSettle,
		retention: DefaultPostmarkRetention,
		batch:     o.batch,
		transport: tr,
	}
	if o.settleSet {
		p.settle = o.settle
	}
	if o.probeRetentionSet {
		p.retention = o.probeRetention
	}
	return p, nil
}

func (p *postmarkProvider) Name() string   { return p.name }
func (p *postmarkProvider) Kind() string   { return "postmark" }
func (p *postmarkProvider) String() string { return p.name + "=" + p.url }

// Capabilities: Postmark can be asked (by the metadata search) for as long
// as it keeps the message; it does not deduplicate.
func (p *postmarkProvider) Capabilities() Capabilities {
	return Capabilities{Probe: true, SettleWindow: p.settle, ProbeRetention: p.retention}
}

func (p *postmarkProvider) Close() error {
	p.transport.CloseIdleConnections()
	return nil
}

// postmarkHeader is one entry of the request's Headers.
type postmarkHeader struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

// postmarkEmail is the body of POST /email.
type postmarkEmail struct {
	From          string            `json:"From"`
	To            string            `json:"To"`
	Subject       string            `json:"Subject"`
	TextBody      string            `json:"TextBody,omitempty"`
	HTMLBody      string            `json:"HtmlBody,omitempty"`
	Headers       []postmarkHeader  `json:"Headers,omitempty"`
	Metadata      map[string]string `json:"Metadata"`
	MessageStream string            `json:"MessageStream,omitempty"`
}

func postmarkBody(r Request, stream string) ([]byte, error) {
	to := r.Message.To
	if to == "" {
		to = r.Target
	}
	if strings.ContainsAny(r.Message.Subject, "\r\n") {
		return nil, errors.New("the subject contains a line break")
	}
	if r.Message.Text == "" && r.Message.HTML == "" {
		return nil, errors.New("the message has neither a text nor an HTML body")
	}
	id := EffectID(r.Key, r.Epoch)
	e := postmarkEmail{
		From: r.Message.From, To: to, Subject: r.Message.Subject,
		TextBody: r.Message.Text, HTMLBody: r.Message.HTML,
		Headers: []postmarkHeader{
			{Name: "Message-ID", Value: MessageID(r.Key, r.Epoch)},
			{Name: string(effectHeader), Value: id},
		},
		Metadata:      map[string]string{PostmarkMetadataKey: id},
		MessageStream: stream,
	}
	if link := r.Message.ListUnsubscribe; link != "" {
		if strings.ContainsAny(link, "\r\n<> ") {
			return nil, errors.New("the unsubscribe link contains a line break, a space or an angle bracket")
		}
		e.Headers = append(e.Headers,
			postmarkHeader{Name: "List-Unsubscribe", Value: "<" + link + ">"},
			postmarkHeader{Name: "List-Unsubscribe-Post", Value: "List-Unsubscribe=One-Click"})
	}
	return json.Marshal(e)
}

// Send posts the message to /email. The raw answer is the framed HTTP
// response (as for webhooks), or a transport-error line saying whether the
// request had been written, or a postmark-build line when the message could
// not be made into a request (nothing sent). Redirects are not followed
// and the body is not replayable, so Postmark sees at most one POST.
func (p *postmarkProvider) Send(ctx context.Context, r Request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	body, err := postmarkBody(r, p.api.stream)
	if err != nil {
		return encodeLine(postmarkBuildTag, field{"error", err.Error()}), nil
	}
	return postOnce(ctx, p.api.client, p.api.endpoint+"/email", body, http.Header{"X-Postmark-Server-Token": {p.api.token}}, nil), nil
}

// Classify interprets a raw answer of Send; see [ClassifyPostmark].
func (p *postmarkProvider) Classify(raw []byte) Verdict { return ClassifyPostmark(raw) }

// postmarkAnswer is the JSON body of an answer of POST /email.
type postmarkAnswer struct {
	ErrorCode *int   `json:"ErrorCode"`
	Message   string `json:"Message"`
	MessageID string `json:"MessageID"`
}

// ClassifyPostmark interprets a raw answer of a postmark:// Send, following
// Postmark's documented answers:
//   - 200 with ErrorCode 0 and a MessageID → done, receipt the MessageID;
//   - 200 without them → unknown (the probe will tell);
//   - 429 (or ErrorCode 429) → quota for Retry-After; Postmark documents
//     none, and without one the wait is 0: the queue backs off on its own
//     (see [Verdict].RetryAfter) rather than resting a flat minute;
//   - 422 (or 200) with an ErrorCode: 100 (maintenance) → failed,
//     retryable; any other code → failed for good (300 invalid email
//     request, 406 inactive recipient, 10 bad token, 4xx sender and
//     account problems): Postmark created nothing;
//   - 401 → failed for good (missing or wrong server token);
//   - 408 → failed, retryable; any other 4xx → failed for good;
//   - 5xx (500 internal error, 503 unavailable), 3xx and other codes →
//     unknown: Postmark may have accepted the message;
//   - a transport error before the request was fully written → failed,
//     retryable; after → unknown;
//   - a message that could not be built → failed for good;
//   - anything unrecognised → unknown.
func ClassifyPostmark(raw []byte) Verdict {
	if f, ok := parseLine(raw, postmarkBuildTag); ok {
		return Verdict{Outcome: OutcomeFailed, Reason: "the message could not be built: " + oneLine(f["error"])}
	}
	if f, ok := parseLine(raw, transportErrorTag); ok {
		return transportVerdict(f, "the request could not be sent to Postmark", "the connection to Postmark failed after the request was sent")
	}
	f, ok := parseFramed(raw)
	if !ok {
		return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised Postmark answer: " + oneLine(string(raw))}
	}
	said := "Postmark answered HTTP " + oneLine(f.status) + bodySnippet(f.body)
	a, code := decodePostmarkAnswer(f.body)
	switch {
	case f.code >= 200 && f.code <= 299:
		return postmarkResult(a, code, said, f.header)
	case f.code == 429 || code == postmarkRateLimitCode:
		return Verdict{Outcome: OutcomeQuota, Reason: said, RetryAfter: retryAfter(f.header, 0)}
	case f.code == 401:
		return Verdict{Outcome: OutcomeFailed, Reason: "Postmark refused the server token (HTTP 401)"}
	case f.code == 422 && code > 0:
		return postmarkRejected(code, said)
	case f.code == 408:
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: said}
	case f.code >= 400 && f.code <= 499:
		return Verdict{Outcome: OutcomeFailed, Reason: said}
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: said}
}

// decodePostmarkAnswer reads one answer object (the body of POST
// /email's answer, or one result of /email/batch's); code is its
// ErrorCode, -1 when it has none or is not one.
func decodePostmarkAnswer(body []byte) (a postmarkAnswer, code int) {
	if json.Unmarshal(body, &a) != nil || a.ErrorCode == nil {
		return a, -1
	}
	return a, *a.ErrorCode
}

// postmarkResult is the verdict on one answer object of a 2xx response
// (said says it, h is the response's header): ErrorCode 429 → quota;
// ErrorCode 0 with a MessageID → done; another ErrorCode → rejected
// (postmarkRejected); else unknown, for the probe to tell.
func postmarkResult(a postmarkAnswer, code int, said string, h textproto.MIMEHeader) Verdict {
	switch {
	case code == postmarkRateLimitCode:
		return Verdict{Outcome: OutcomeQuota, Reason: said, RetryAfter: retryAfter(h, 0)}
	case code == postmarkOK && oneLine(a.MessageID) != "":
		return Verdict{Outcome: OutcomeDone, Receipt: oneLine(a.MessageID)}
	case code > 0:
		return postmarkRejected(code, said)
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: said + " (no ErrorCode 0 and MessageID: accepted or not, the probe will tell)"}
}

func postmarkRejected(code int, said string) Verdict {
	switch code {
	case postmarkMaintenance:
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: said + " (Postmark is under maintenance)"}
	case postmarkInactiveRcpt:
		return Verdict{Outcome: OutcomeFailed, Reason: said + " (the recipient is inactive at Postmark: it bounced or complained)"}
	case postmarkInvalidEmail:
		return Verdict{Outcome: OutcomeFailed, Reason: said + " (invalid email request)"}
	case postmarkBadToken:
		return Verdict{Outcome: OutcomeFailed, Reason: "Postmark refused the server token (ErrorCode 10)"}
	}
	return Verdict{Outcome: OutcomeFailed, Reason: said}
}

// Probe searches the outbound messages by the effect id's metadata.
func (p *postmarkProvider) Probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	return p.api.probe(ctx, key, epoch)
}

// postmarkSearch is the answer of GET /messages/outbound.
type postmarkSearch struct {
	TotalCount *int `json:"TotalCount"`
	Messages   []struct {
		MessageID string            `json:"MessageID"`
		Status    string            `json:"Status"`
		Metadata  map[string]string `json:"Metadata"`
	} `json:"Messages"`
}

// probe asks GET /messages/outbound?count=1&offset=0&metadata_onceplan_effect=ID
// (and messagestream=S when a stream is configured: the search covers the
// default stream otherwise). 200 with TotalCount > 0 → found, receipt the
// first (newest) message's MessageID, and TotalCount messages: two or
// more are a duplicate; TotalCount 0 → not found; anything else → an
// error (the probe says nothing). One message listed is enough: the count
// is TotalCount, which covers the messages not listed.
func (api *postmarkAPI) probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	id := EffectID(key, epoch)
	q := url.Values{}
	q.Set("count", "1")
	q.Set("offset", "0")
	q.Set("metadata_"+PostmarkMetadataKey, id)
	if api.stream != "" {
		q.Set("messagestream", api.stream)
	}
	raw, err := getOnce(ctx, api.client, api.name, api.endpoint+"/messages/outbound?"+q.Encode(),
		http.Header{"X-Postmark-Server-Token": {api.token}})
	if err != nil {
		return ProbeResult{}, err
	}
	matches, receipt, err := decodePostmarkSearch(raw, id)
	if err != nil {
		return ProbeResult{Raw: raw}, fmt.Errorf("probe of provider %q: %w", api.name, err)
	}
	return ProbeResult{Found: matches > 0, Matches: matches, Raw: raw, Receipt: receipt}, nil
}

// decodePostmarkSearch reads a framed answer of the outbound search for
// effect id: how many messages Postmark holds with it, and the MessageID
// of the first one listed. A message listed whose metadata names another
// effect is not a match (the search is Postmark's; the check is ours);
// those counted in TotalCount but not listed (past the page) are taken on
// the search's word, so that a second message with the effect id counts
// even when the page shows only one.
func decodePostmarkSearch(raw []byte, id string) (matches int, receipt string, err error) {
	f, ok := parseFramed(raw)
	if !ok {
		return 0, "", errors.New("unrecognised answer")
	}
	if f.code != http.StatusOK {
		//lint:ignore ST1005 Postmark is a proper noun (the provider's name)
		return 0, "", fmt.Errorf("Postmark answered HTTP %s%s", oneLine(f.status), bodySnippet(f.body))
	}
	var s postmarkSearch
	if err := json.Unmarshal(f.body, &s); err != nil || s.TotalCount == nil {
		//lint:ignore ST1005 Postmark is a proper noun (the provider's name)
		return 0, "", fmt.Errorf("Postmark's search answer is not {TotalCount, Messages}%s", bodySnippet(f.body))
	}
	for _, m := range s.Messages {
		// Listed with metadata that is not ours: not a match. Listed
		// without metadata: the search's word is taken.
		if len(m.Metadata) > 0 && m.Metadata[PostmarkMetadataKey] != id {
			continue
		}
		if matches == 0 {
			receipt = oneLine(m.MessageID)
		}
		matches++
	}
	if matches == 0 && len(s.Messages) > 0 {
		//lint:ignore ST1005 Postmark is a proper noun (the provider's name)
		return 0, "", errors.New("Postmark's search listed only messages of other effects")
	}
	if unlisted := *s.TotalCount - len(s.Messages); unlisted > 0 {
		matches += unlisted
	}
	return matches, receipt, nil
}
