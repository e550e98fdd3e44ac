package sink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PostmarkToken is the server token a Postmark sink accepts when its opts
// name none.
const PostmarkToken = "sink-postmark-token"

// DefaultPostmarkRetention is Postmark's default retention of outbound
// messages: after it, the search no longer finds them.
const DefaultPostmarkRetention = 45 * 24 * time.Hour

// PostmarkOpts configure a Postmark sink.
type PostmarkOpts struct {
	// Token is the server token (X-Postmark-Server-Token) the sink
	// accepts; "" means PostmarkToken.
	Token string
	// Retention: messages older than this are no longer found by the
	// search (0: DefaultPostmarkRetention).
	Retention time.Duration
	// SMTP, when set, is Postmark's SMTP relay: the messages it accepted
	// are outbound messages too, with the metadata of their
	// X-PM-Metadata-* headers, and the search finds them.
	SMTP *SMTP
	// NowFunc is the sink's clock (nil: time.Now), for retention and lag.
	NowFunc func() time.Time
	// Limit is the request rate enforced on POST /email (default none):
	// past it, 429 without Retry-After, creating nothing. Postmark
	// publishes no number; a test chooses one.
	Limit RateLimit
}

// PostmarkMessage is one outbound message the sink accepted.
type PostmarkMessage struct {
	MessageID     string
	From          string
	To            string
	Subject       string
	TextBody      string
	HTMLBody      string
	MessageStream string
	Headers       map[string]string
	Metadata      map[string]string
	ReceivedAt    time.Time
	Via           string // "api" or "smtp"
}

// EffectID is the message's onceplan_effect metadata.
func (m PostmarkMessage) EffectID() string { return m.Metadata["onceplan_effect"] }

// Postmark is an HTTP server on 127.0.0.1 that behaves like the parts of
// Postmark's API Onceplan relies on, as documented: POST /email
// (X-Postmark-Server-Token; 200 {To, SubmittedAt, MessageID, ErrorCode 0,
// Message "OK"}; 401 without the token; 422 {ErrorCode, Message} for a
// message without From, To or a body) and GET /messages/outbound (count
// and offset required, count at most 500; filters recipient, fromemail,
// subject, messagestream, metadata_<k>=<v>; newest first; 200 {TotalCount,
// Messages}) and POST /email/batch (up to 500 messages, 200 with one
// result per message in order, invalid ones ErrorCode 300). It fails on
// command (a batch is one request): 429 with Retry-After, a 5xx after
// accepting, a connection dropped after accepting (a lost answer), an
// answer that never comes, a search that lags behind the sends, a send
// accepted twice (a duplicate the search then counts).
type Postmark struct {
	srv  *httptest.Server
	opts PostmarkOpts
	gate *limitGate

	mu        sync.Mutex
	msgs      []PostmarkMessage
	requests  int
	searches  int
	seq       int
	lag       time.Duration
	fail      cannedFailure
	after     afterApply
	searchErr int
	twice     int
	// holdN accepted sends wait for hold to close before they answer.
	holdN int
	hold  chan struct{}
}

// NewPostmark starts a Postmark sink.
func NewPostmark(opts PostmarkOpts) *Postmark {
	if opts.Token == "" {
		opts.Token = PostmarkToken
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultPostmarkRetention
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	p := &Postmark{opts: opts, gate: newLimitGate(opts.Limit)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /email", p.email)
	mux.HandleFunc("POST /email/batch", p.emailBatch)
	mux.HandleFunc("GET /messages/outbound", p.search)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		p.count(false)
		writeJSON(rw, http.StatusNotFound, postmarkError{ErrorCode: 0, Message: "no such endpoint"})
	})
	p.srv = httptest.NewServer(mux)
	return p
}

// Endpoint is the API's base URL (http://127.0.0.1:PORT).
func (p *Postmark) Endpoint() string { return p.srv.URL }

// Token is the server token the sink accepts.
func (p *Postmark) Token() string { return p.opts.Token }

// URL is the provider URL of the sink:
// postmark://TOKEN@api.postmarkapp.com?endpoint=http://127.0.0.1:PORT.
func (p *Postmark) URL() string {
	return "postmark://" + url.PathEscape(p.opts.Token) + "@api.postmarkapp.com?endpoint=" + url.QueryEscape(p.srv.URL) + "&" + providerRateOption(p.opts.Limit)
}

// RateLimited is how many sends the sink refused for its rate limit.
func (p *Postmark) RateLimited() int { return p.gate.count() }

// SMTPURL is the provider URL of Postmark's SMTP relay when the sink was
// given one (opts.SMTP): the relay's address with the server token as
// user and password, probe=postmark and probe_endpoint= this sink.
func (p *Postmark) SMTPURL() string {
	if p.opts.SMTP == nil {
		return ""
	}
	tok := url.PathEscape(p.opts.Token)
	return "smtp://" + tok + ":" + tok + "@" + p.opts.SMTP.Addr() + "?tls=none&probe=postmark&probe_endpoint=" + url.QueryEscape(p.srv.URL)
}

// Close stops the server.
func (p *Postmark) Close() { p.srv.Close() }

// Messages returns the outbound messages, in the order accepted: those of
// POST /email, then those of the SMTP relay.
func (p *Postmark) Messages() []PostmarkMessage {
	p.mu.Lock()
	out := make([]PostmarkMessage, len(p.msgs))
	copy(out, p.msgs)
	p.mu.Unlock()
	return append(out, p.smtpMessages()...)
}

// Effects counts the outbound messages per onceplan_effect metadata.
func (p *Postmark) Effects() map[string]int {
	out := map[string]int{}
	for _, m := range p.Messages() {
		out[m.EffectID()]++
	}
	return out
}

// CountByRecipient counts the outbound messages per To address.
func (p *Postmark) CountByRecipient() map[string]int {
	out := map[string]int{}
	for _, m := range p.Messages() {
		out[strings.ToLower(m.To)]++
	}
	return out
}

// Requests is the number of POST /email requests received.
func (p *Postmark) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// Searches is the number of GET /messages/outbound requests received.
func (p *Postmark) Searches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.searches
}

// SearchLag makes a message invisible to the search until d after it was
// received (0: at once).
func (p *Postmark) SearchLag(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = d
}

// FailNext answers the next n sends with status, headers and body without
// accepting them (429 with Retry-After, 422 {"ErrorCode":406,…}, 500).
func (p *Postmark) FailNext(n, status int, headers map[string]string, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail.set(n, status, headers, body)
}

// AcceptThenFail accepts the next n sends and answers status (500, 503):
// sent, but the client cannot know.
func (p *Postmark) AcceptThenFail(n, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after.failN, p.after.failStatus = n, status
}

// AcceptThenDrop accepts the next n sends and closes the connection
// without an answer: the answer is lost.
func (p *Postmark) AcceptThenDrop(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after.dropN = n
}

// AcceptThenHang accepts the next n sends and answers only after d (or
// when the client goes away): an answer that never comes in time.
func (p *Postmark) AcceptThenHang(n int, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after.hangN, p.after.hangFor = n, d
}

// AcceptTwice makes the next n sends outbound messages twice each: two
// messages with the sender's metadata (one effect id), as a repeat of the
// same send would leave — Postmark does not deduplicate. The answer names
// the first; the search counts and lists both.
func (p *Postmark) AcceptTwice(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.twice = n
}

// HoldNext makes the next n accepted sends wait, before answering, until
// release is called (or the client goes away): a call in flight for as
// long as a test needs it to be, not for a guessed time.
func (p *Postmark) HoldNext(n int) (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	p.holdN, p.hold = n, ch
	return sync.OnceFunc(func() { close(ch) })
}

// FailSearches answers the next n searches 500.
func (p *Postmark) FailSearches(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.searchErr = n
}

type postmarkError struct {
	ErrorCode int    `json:"ErrorCode"`
	Message   string `json:"Message"`
}

func (p *Postmark) count(send bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if send {
		p.requests++
	} else {
		p.searches++
	}
}

func (p *Postmark) authorized(r *http.Request) bool {
	return r.Header.Get("X-Postmark-Server-Token") == p.opts.Token
}

// postmarkIn is one message of POST /email or /email/batch.
type postmarkIn struct {
	From, To, Subject, TextBody, HtmlBody, MessageStream string
	Headers                                              []struct{ Name, Value string }
	Metadata                                             map[string]string
}

// invalid is Postmark's refusal of the message (ErrorCode 300), or "".
func (in postmarkIn) invalid() string {
	switch {
	case in.From == "":
		return "Invalid 'From' address: ''."
	case in.To == "":
		return "Zero recipients specified"
	case in.TextBody == "" && in.HtmlBody == "":
		return "Provide either email TextBody or HtmlBody or both."
	}
	return ""
}

// admit reads a send's body and applies the server token and the rate
// limit; it answers and returns false when the request stops there.
func (p *Postmark) admit(rw http.ResponseWriter, r *http.Request) ([]byte, bool) {
	p.count(true)
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPostmarkRequest+1))
	if err != nil {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 402, Message: "Received invalid JSON input."})
		return nil, false
	}
	if len(body) > MaxPostmarkRequest {
		writeJSON(rw, http.StatusRequestEntityTooLarge, postmarkError{ErrorCode: 300, Message: "The request is larger than 50 MB."})
		return nil, false
	}
	if !p.authorized(r) {
		writeJSON(rw, http.StatusUnauthorized, postmarkError{ErrorCode: 10, Message: "Request does not contain a valid Server token."})
		return nil, false
	}
	if ok, _ := p.gate.allow(); !ok {
		writeJSON(rw, http.StatusTooManyRequests, postmarkError{ErrorCode: 429, Message: "Rate limit exceeded."})
		return nil, false
	}
	return body, true
}

// accept records one accepted message (p.mu held) and its answer.
func (p *Postmark) accept(in postmarkIn, now time.Time) map[string]any {
	p.seq++
	stream := in.MessageStream
	if stream == "" {
		stream = "outbound"
	}
	m := PostmarkMessage{
		MessageID: fmt.Sprintf("b7bc2f4a-e38e-4336-af7d-%012d", p.seq),
		From:      in.From, To: in.To, Subject: in.Subject, TextBody: in.TextBody, HTMLBody: in.HtmlBody,
		MessageStream: stream, Headers: map[string]string{}, Metadata: map[string]string{},
		ReceivedAt: now, Via: "api",
	}
	for _, h := range in.Headers {
		m.Headers[h.Name] = h.Value
	}
	for k, v := range in.Metadata {
		m.Metadata[k] = v
	}
	p.msgs = append(p.msgs, m)
	if p.twice > 0 {
		p.twice--
		p.seq++
		dup := m
		dup.MessageID = fmt.Sprintf("b7bc2f4a-e38e-4336-af7d-%012d", p.seq)
		dup.Headers, dup.Metadata = maps.Clone(m.Headers), maps.Clone(m.Metadata)
		p.msgs = append(p.msgs, dup)
	}
	return map[string]any{
		"To": m.To, "SubmittedAt": now.Format("2006-01-02T15:04:05.0000000-07:00"),
		"MessageID": m.MessageID, "ErrorCode": 0, "Message": "OK",
	}
}

func (p *Postmark) email(rw http.ResponseWriter, r *http.Request) {
	body, ok := p.admit(rw, r)
	if !ok {
		return
	}
	var in postmarkIn
	if err := json.Unmarshal(body, &in); err != nil {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 402, Message: "Received invalid JSON input."})
		return
	}
	if msg := in.invalid(); msg != "" {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 300, Message: msg})
		return
	}
	p.apply(rw, r, func(now time.Time) any { return p.accept(in, now) })
}

// MaxPostmarkBatch is how many messages one POST /email/batch may carry
// (Postmark's documented limit).
const MaxPostmarkBatch = 500

// MaxPostmarkRequest is the largest request body the stand-in takes:
// Postmark documents "up to 50 MB payload size, including attachments" for
// a batch and rejects more; the stand-in reads a megabyte as 2^20 bytes
// and answers a larger request 413, whole, before looking at it.
const MaxPostmarkRequest = 50 << 20

// emailBatch is POST /email/batch: a JSON array of up to MaxPostmarkBatch
// messages, each accepted or refused on its own; the answer is 200 with
// one result per message, in order — ErrorCode 0 and a MessageID for an
// accepted one, ErrorCode 300 and the reason for an invalid one — even
// when some fail.
func (p *Postmark) emailBatch(rw http.ResponseWriter, r *http.Request) {
	body, ok := p.admit(rw, r)
	if !ok {
		return
	}
	var ins []postmarkIn
	if err := json.Unmarshal(body, &ins); err != nil {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 402, Message: "Received invalid JSON input."})
		return
	}
	if len(ins) > MaxPostmarkBatch {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 413, Message: fmt.Sprintf("A batch holds at most %d messages; this one has %d.", MaxPostmarkBatch, len(ins))})
		return
	}
	p.apply(rw, r, func(now time.Time) any {
		out := make([]map[string]any, len(ins))
		for i, in := range ins {
			if msg := in.invalid(); msg != "" {
				out[i] = map[string]any{"ErrorCode": 300, "Message": msg}
				continue
			}
			out[i] = p.accept(in, now)
		}
		return out
	})
}

// apply is a valid send's effect: a canned failure, else accept (p.mu
// held) and its answer, as the sink was told (held, after-apply faults).
func (p *Postmark) apply(rw http.ResponseWriter, r *http.Request, accept func(now time.Time) any) {
	p.mu.Lock()
	if f, ok := p.fail.take(); ok {
		p.mu.Unlock()
		f.write(rw, "application/json")
		return
	}
	answer := accept(p.opts.NowFunc())
	then := p.after.next()
	var hold chan struct{}
	if p.holdN > 0 {
		p.holdN--
		hold = p.hold
	}
	p.mu.Unlock()

	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}
	switch {
	case then.failStatus != 0:
		writeJSON(rw, then.failStatus, postmarkError{ErrorCode: 0, Message: "the sink accepted the message and then failed"})
		return
	case then.drop:
		dropConnection(rw)
		return
	}
	sleepCtx(r, then.hangFor)
	writeJSON(rw, http.StatusOK, answer)
}

// smtpMessages are the messages Postmark's SMTP relay (opts.SMTP)
// accepted, as outbound messages: X-PM-Metadata-<k> headers are metadata.
func (p *Postmark) smtpMessages() []PostmarkMessage {
	if p.opts.SMTP == nil {
		return nil
	}
	var out []PostmarkMessage
	for i, sm := range p.opts.SMTP.Messages() {
		m := PostmarkMessage{
			MessageID: fmt.Sprintf("5e7a8b1c-0000-4000-8000-%012d", i+1), From: sm.From,
			To: strings.Join(sm.Rcpts, ", "), MessageStream: "outbound",
			Headers: map[string]string{}, Metadata: map[string]string{}, ReceivedAt: sm.At, Via: "smtp",
		}
		if parsed, err := mail.ReadMessage(bytes.NewReader(sm.Data)); err == nil {
			m.Subject = parsed.Header.Get("Subject")
			for k, vs := range parsed.Header {
				if len(vs) == 0 {
					continue
				}
				if name, ok := cutPrefixFold(k, "X-PM-Metadata-"); ok {
					m.Metadata[name] = vs[0]
					continue
				}
				m.Headers[k] = vs[0]
			}
		}
		out = append(out, m)
	}
	return out
}

// cutPrefixFold is strings.CutPrefix ignoring case; the rest keeps the
// case it was written in (textproto canonicalises header names, so the
// metadata name is taken lower-case, as Onceplan writes it).
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return strings.ToLower(s[len(prefix):]), true
}

// visible: the messages the search can see now (after the lag, within the
// retention), newest first.
func (p *Postmark) visible() []PostmarkMessage {
	all := p.Messages()
	p.mu.Lock()
	lag := p.lag
	p.mu.Unlock()
	now := p.opts.NowFunc()
	out := make([]PostmarkMessage, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if now.Sub(m.ReceivedAt) < lag || now.Sub(m.ReceivedAt) >= p.opts.Retention {
			continue
		}
		out = append(out, m)
	}
	return out
}

func (p *Postmark) search(rw http.ResponseWriter, r *http.Request) {
	p.count(false)
	if !p.authorized(r) {
		writeJSON(rw, http.StatusUnauthorized, postmarkError{ErrorCode: 10, Message: "Request does not contain a valid Server token."})
		return
	}
	p.mu.Lock()
	fail := p.searchErr > 0
	if fail {
		p.searchErr--
	}
	p.mu.Unlock()
	if fail {
		writeJSON(rw, http.StatusInternalServerError, postmarkError{Message: "the sink's search failed on command"})
		return
	}
	q := r.URL.Query()
	count, err1 := strconv.Atoi(q.Get("count"))
	offset, err2 := strconv.Atoi(q.Get("offset"))
	if err1 != nil || err2 != nil || count < 1 || count > 500 || offset < 0 {
		writeJSON(rw, http.StatusUnprocessableEntity, postmarkError{ErrorCode: 701, Message: "count (1-500) and offset are required"})
		return
	}
	stream := q.Get("messagestream")
	if stream == "" {
		stream = "outbound"
	}
	var match []PostmarkMessage
	for _, m := range p.visible() {
		if m.MessageStream != stream {
			continue
		}
		if v := q.Get("recipient"); v != "" && !strings.EqualFold(v, m.To) {
			continue
		}
		if v := q.Get("fromemail"); v != "" && !strings.Contains(strings.ToLower(m.From), strings.ToLower(v)) {
			continue
		}
		if v := q.Get("subject"); v != "" && v != m.Subject {
			continue
		}
		ok := true
		for k, vs := range q {
			if name, isMeta := strings.CutPrefix(k, "metadata_"); isMeta && m.Metadata[name] != vs[0] {
				ok = false
			}
		}
		if ok {
			match = append(match, m)
		}
	}
	page := []map[string]any{}
	for i := offset; i < len(match) && i < offset+count; i++ {
		m := match[i]
		page = append(page, map[string]any{
			"Tag": "", "MessageID": m.MessageID, "MessageStream": m.MessageStream,
			"To": []map[string]any{{"Email": m.To, "Name": nil}}, "Cc": []any{}, "Bcc": []any{},
			"Recipients": []string{m.To}, "ReceivedAt": m.ReceivedAt.Format(time.RFC3339Nano),
			"From": m.From, "Subject": m.Subject, "Attachments": []any{}, "Status": "Sent",
			"TrackOpens": false, "TrackLinks": "None", "Metadata": m.Metadata, "Sandboxed": false,
		})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"TotalCount": len(match), "Messages": page})
}
