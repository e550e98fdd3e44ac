package sink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"time"
)

// WebhookOpts configure a webhook sink.
type WebhookOpts struct {
	// Dedupe: a POST with an Idempotency-Key already applied is answered
	// 200 with the first receipt and is not a new effect.
	Dedupe bool
	// Probe: URL() names the probe endpoint (GET /effects/{id}). The
	// endpoint answers either way.
	Probe bool
	// Record, when set, is a file each applied effect is appended to as
	// one JSON line (RecordedEffect), synced before the POST is answered:
	// evidence that outlives the sink (ReadRecord).
	Record string
	// Forget, when set, is how long the sink remembers an effect id after
	// it first applied it, as an outside system whose deduplication
	// window or retention ends (Stripe's and Resend's 24 hours): past it a
	// POST with the id is a new effect, and a probe answers 404.
	Forget time.Duration
}

// RecordedEffect is one line of a webhook sink's Record file.
type RecordedEffect struct {
	EffectID string    `json:"effect_id"`
	Target   string    `json:"target"`
	Receipt  string    `json:"receipt"`
	At       time.Time `json:"at"`
}

// ReadRecord reads a Record file: every effect the sink applied, in order.
func ReadRecord(path string) ([]RecordedEffect, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []RecordedEffect
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e RecordedEffect
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// appendRecord appends e to the Record file and syncs it (w.mu held).
func (w *Webhook) appendRecord(e WebhookEffect) error {
	if w.opts.Record == "" {
		return nil
	}
	line, err := json.Marshal(RecordedEffect{EffectID: e.EffectID, Target: e.Target, Receipt: e.Receipt, At: e.At})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(w.opts.Record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WebhookRequest is one request the webhook sink received.
type WebhookRequest struct {
	Method         string
	Path           string
	IdempotencyKey string
	Body           []byte
	At             time.Time
}

// WebhookEffect is one POST the sink accepted and applied.
type WebhookEffect struct {
	EffectID string // the Idempotency-Key
	Target   string // the body's "target"
	Body     []byte
	Receipt  string
	Stranded bool
	At       time.Time
}

// Webhook is an HTTP server on 127.0.0.1: POST /hook applies an effect,
// GET /effects/{id} tells whether one was applied (200 {"receipt"} or 404).
type Webhook struct {
	srv  *httptest.Server
	opts WebhookOpts

	mu       sync.Mutex
	requests []WebhookRequest
	effects  []WebhookEffect
	byID     map[string]int // effect id → index of its first effect
	seq      int

	fail    cannedFailure
	after   afterApply // dropN unused: a webhook sink does not drop
	strandN int
	delay   time.Duration
}

// NewWebhook starts a webhook sink.
func NewWebhook(opts WebhookOpts) *Webhook {
	w := &Webhook{opts: opts, byID: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", w.hook)
	mux.HandleFunc("GET /effects/{id}", w.probe)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		w.record(r, nil)
		http.NotFound(rw, r)
	})
	w.srv = httptest.NewServer(mux)
	return w
}

// URL is the provider URL: the hook, with dedupe=true and probe=… as
// configured.
func (w *Webhook) URL() string {
	q := url.Values{}
	if w.opts.Dedupe {
		q.Set("dedupe", "true")
	}
	if w.opts.Probe {
		q.Set("probe", w.ProbeURL())
	}
	u := w.srv.URL + "/hook"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// ProbeURL is the base of the probe endpoint (GET ProbeURL()/{EffectID}).
func (w *Webhook) ProbeURL() string { return w.srv.URL + "/effects" }

// Close stops the server (waiting for requests in progress).
func (w *Webhook) Close() { w.srv.Close() }

// Effects returns the applied effects, in order.
func (w *Webhook) Effects() []WebhookEffect {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WebhookEffect, len(w.effects))
	copy(out, w.effects)
	return out
}

// CountByEffectID counts applied effects per Idempotency-Key.
func (w *Webhook) CountByEffectID() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, e := range w.effects {
		out[e.EffectID]++
	}
	return out
}

// Requests is the number of requests received (any method and path).
func (w *Webhook) Requests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.requests)
}

// RequestLog returns the requests received, in order.
func (w *Webhook) RequestLog() []WebhookRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WebhookRequest, len(w.requests))
	copy(out, w.requests)
	return out
}

// FailNext answers the next n POSTs with status, headers and body, without
// applying them (e.g. 500, 429 with Retry-After, 422, 409).
func (w *Webhook) FailNext(n, status int, headers map[string]string, body string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail.set(n, status, headers, body)
}

// ApplyThenFail applies the next n POSTs and then answers status (e.g.
// 500): delivered, but the client cannot know.
func (w *Webhook) ApplyThenFail(n, status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.after.failN, w.after.failStatus = n, status
}

// ApplyThenHang applies the next n POSTs and then waits d (or until the
// client goes away) before answering 200.
func (w *Webhook) ApplyThenHang(n int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.after.hangN, w.after.hangFor = n, d
}

// Stranded applies the next n POSTs and answers 200
// {"status":"stranded","reason":…}.
func (w *Webhook) Stranded(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.strandN = n
}

// Delay makes every POST wait d before it is handled (0: no wait).
func (w *Webhook) Delay(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.delay = d
}

func (w *Webhook) record(r *http.Request, body []byte) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.requests = append(w.requests, WebhookRequest{
		Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Body: body, At: time.Now(),
	})
	return w.delay
}

func sleepCtx(r *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}

func (w *Webhook) hook(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	delay := w.record(r, body)
	if err != nil {
		http.Error(rw, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	sleepCtx(r, delay)
	id := r.Header.Get("Idempotency-Key")

	w.mu.Lock()
	if f, ok := w.fail.take(); ok {
		w.mu.Unlock()
		f.write(rw, "")
		return
	}
	if i, seen := w.remembers(id); w.opts.Dedupe && id != "" && seen {
		e := w.effects[i]
		w.mu.Unlock()
		writeJSON(rw, http.StatusOK, answer(e))
		return
	}
	var payload struct {
		Target string `json:"target"`
	}
	_ = json.Unmarshal(body, &payload)
	w.seq++
	e := WebhookEffect{EffectID: id, Target: payload.Target, Body: body, Receipt: fmt.Sprintf("wh-%06d", w.seq), At: time.Now()}
	if w.strandN > 0 {
		w.strandN--
		e.Stranded = true
	}
	if _, seen := w.remembers(id); !seen {
		w.byID[id] = len(w.effects)
	}
	w.effects = append(w.effects, e)
	if err := w.appendRecord(e); err != nil {
		w.mu.Unlock()
		http.Error(rw, "recording the effect: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var then applied
	if !e.Stranded {
		then = w.after.next()
	}
	w.mu.Unlock()

	switch {
	case then.failStatus != 0:
		writeJSON(rw, then.failStatus, map[string]string{"error": "the sink applied the effect and then failed"})
	default:
		sleepCtx(r, then.hangFor)
		writeJSON(rw, http.StatusOK, answer(e))
	}
}

// remembers is the index of the first effect of id the sink still
// remembers (w.mu held).
func (w *Webhook) remembers(id string) (int, bool) {
	i, ok := w.byID[id]
	if ok && w.opts.Forget > 0 && time.Since(w.effects[i].At) >= w.opts.Forget {
		return 0, false
	}
	return i, ok
}

func answer(e WebhookEffect) map[string]string {
	if e.Stranded {
		return map[string]string{"status": "stranded", "reason": "the sink was told to strand this effect", "receipt": e.Receipt}
	}
	return map[string]string{"status": "done", "receipt": e.Receipt}
}

func (w *Webhook) probe(rw http.ResponseWriter, r *http.Request) {
	w.record(r, nil)
	id := r.PathValue("id")
	w.mu.Lock()
	i, ok := w.remembers(id)
	var e WebhookEffect
	if ok {
		e = w.effects[i]
	}
	w.mu.Unlock()
	if !ok {
		writeJSON(rw, http.StatusNotFound, map[string]string{"error": "no such effect"})
		return
	}
	writeJSON(rw, http.StatusOK, answer(e))
}
