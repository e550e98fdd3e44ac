package sink_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
)

// webhookBundle is a webhook sink, the base URL of its server and a client
// whose idle connections are closed before the sink is.
type webhookBundle struct {
	sink   *sink.Webhook
	base   string
	client *http.Client
}

func setupWebhook(t *testing.T, opts sink.WebhookOpts) *webhookBundle {
	t.Helper()
	w := sink.NewWebhook(opts)
	t.Cleanup(w.Close)
	u, err := url.Parse(w.URL())
	require.NoError(t, err)
	u.Path, u.RawQuery = "", ""
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(client.CloseIdleConnections)
	return &webhookBundle{sink: w, base: u.String(), client: client}
}

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends one request; key "" sends no Idempotency-Key.
func (b *webhookBundle) do(t *testing.T, method, path, key, body string) answer {
	t.Helper()
	a, err := b.try(context.Background(), method, path, key, body)
	require.NoError(t, err)
	return a
}

func (b *webhookBundle) try(ctx context.Context, method, path, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(got)}, err
}

func (b *webhookBundle) post(t *testing.T, key, target string) answer {
	t.Helper()
	return b.do(t, http.MethodPost, "/hook", key, `{"key":"k","target":"`+target+`"}`)
}

func TestWebhookSinkRecordsEveryRequest(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})

	a := b.post(t, "e-1", "ada@example.test")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, a.body)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/effects/e-1", "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/elsewhere", "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPut, "/hook", "e-2", "{}").status)
	require.Equal(t, http.StatusOK, b.post(t, "", "bob@example.test").status)

	log := b.sink.RequestLog()
	require.Equal(t, 5, b.sink.Requests())
	require.Len(t, log, 5)
	type seen struct{ method, path, key, body string }
	var got []seen
	for _, r := range log {
		got = append(got, seen{r.Method, r.Path, r.IdempotencyKey, string(r.Body)})
		require.False(t, r.At.IsZero())
	}
	require.Equal(t, []seen{
		{"POST", "/hook", "e-1", `{"key":"k","target":"ada@example.test"}`},
		{"GET", "/effects/e-1", "", ""},
		{"GET", "/elsewhere", "", ""},
		{"PUT", "/hook", "e-2", ""},
		{"POST", "/hook", "", `{"key":"k","target":"bob@example.test"}`},
	}, got)

	// Only the POSTs to the hook are effects.
	effects := b.sink.Effects()
	require.Len(t, effects, 2)
	require.Equal(t, "e-1", effects[0].EffectID)
	require.Equal(t, "ada@example.test", effects[0].Target)
	require.Equal(t, `{"key":"k","target":"ada@example.test"}`, string(effects[0].Body))
	require.Equal(t, "wh-000001", effects[0].Receipt)
	require.False(t, effects[0].Stranded)
	require.Equal(t, "bob@example.test", effects[1].Target)
	require.Equal(t, "wh-000002", effects[1].Receipt)
	require.Equal(t, map[string]int{"e-1": 1, "": 1}, b.sink.CountByEffectID())
}

func TestWebhookSinkCountsRepeatsWithoutDedupe(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, b.post(t, "e-1", "ada@example.test").body)
	require.JSONEq(t, `{"status":"done","receipt":"wh-000002"}`, b.post(t, "e-1", "ada@example.test").body)
	require.Equal(t, map[string]int{"e-1": 2}, b.sink.CountByEffectID(), "a repeat is a second effect: the evidence of a duplicate")

	// The probe names the first.
	a := b.do(t, http.MethodGet, "/effects/e-1", "", "")
	require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, a.body)
}

func TestWebhookSinkDedupe(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{Dedupe: true})
	for range 3 {
		a := b.post(t, "e-1", "ada@example.test")
		require.Equal(t, http.StatusOK, a.status)
		require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, a.body)
	}
	require.JSONEq(t, `{"status":"done","receipt":"wh-000002"}`, b.post(t, "e-2", "bob@example.test").body)
	// Without a key there is nothing to dedupe by.
	b.post(t, "", "cy@example.test")
	b.post(t, "", "cy@example.test")
	require.Equal(t, 6, b.sink.Requests())
	require.Equal(t, map[string]int{"e-1": 1, "e-2": 1, "": 2}, b.sink.CountByEffectID())
}

func TestWebhookSinkDedupeUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{Dedupe: true})
	const n = 30
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := b.try(context.Background(), http.MethodPost, "/hook", "same", `{"target":"ada@example.test"}`)
			if err == nil && a.status == http.StatusOK {
				bodies[i] = a.body
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the concurrent posts of one key to be answered")
	for _, body := range bodies {
		require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, body)
	}
	require.Equal(t, map[string]int{"same": 1}, b.sink.CountByEffectID())
	require.Equal(t, n, b.sink.Requests())
}

func TestWebhookSinkCountsExactlyUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _ = b.try(context.Background(), http.MethodPost, "/hook", "e-"+strconv.Itoa(i), "{}")
		})
	}
	await.Group(t, &wg, time.Minute, "the 50 concurrent posts to be answered")
	counts := b.sink.CountByEffectID()
	require.Len(t, counts, n)
	receipts := map[string]bool{}
	for _, e := range b.sink.Effects() {
		require.Equal(t, 1, counts[e.EffectID])
		require.False(t, receipts[e.Receipt], "receipt %s given twice", e.Receipt)
		receipts[e.Receipt] = true
	}
	require.Len(t, receipts, n)
}

// TestWebhookSinkForgets: a sink that remembers an effect id for a while
// deduplicates and answers probes within it; past it, the probe answers
// 404 and a repeat is a second effect.
func TestWebhookSinkForgets(t *testing.T) {
	t.Parallel()
	const forget = 300 * time.Millisecond
	b := setupWebhook(t, sink.WebhookOpts{Dedupe: true, Forget: forget})
	first := time.Now()
	b.post(t, "e-1", "ada@example.test")
	b.post(t, "e-1", "ada@example.test")
	if time.Since(first) < forget {
		require.Equal(t, map[string]int{"e-1": 1}, b.sink.CountByEffectID(), "within the window: one effect")
	}
	await.Until(t, 10*time.Second, "the sink to forget e-1", func() bool {
		return b.do(t, http.MethodGet, "/effects/e-1", "", "").status == http.StatusNotFound
	})
	b.post(t, "e-1", "ada@example.test")
	require.Equal(t, map[string]int{"e-1": 2}, b.sink.CountByEffectID(), "past the window a repeat is a second effect")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/effects/e-1", "", "").status, "the second effect is remembered anew")
}

func TestWebhookSinkProbe(t *testing.T) {
	t.Parallel()
	for _, opts := range []sink.WebhookOpts{{}, {Probe: true}} {
		b := setupWebhook(t, opts)
		a := b.do(t, http.MethodGet, "/effects/e-1", "", "")
		require.Equal(t, http.StatusNotFound, a.status, "the endpoint answers whether or not it was declared")
		require.JSONEq(t, `{"error":"no such effect"}`, a.body)

		b.sink.Stranded(1)
		b.post(t, "e-1", "ada@example.test")
		b.post(t, "v1:ab:0", "bob@example.test")
		a = b.do(t, http.MethodGet, "/effects/e-1", "", "")
		require.Equal(t, http.StatusOK, a.status)
		require.JSONEq(t, `{"status":"stranded","reason":"the sink was told to strand this effect","receipt":"wh-000001"}`, a.body)
		a = b.do(t, http.MethodGet, "/effects/v1:ab:0", "", "")
		require.Equal(t, http.StatusOK, a.status, "an effect id with colons is found")
		require.JSONEq(t, `{"status":"done","receipt":"wh-000002"}`, a.body)
		require.Len(t, b.sink.Effects(), 2, "probing creates nothing")
	}
}

func TestWebhookSinkURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		opts  sink.WebhookOpts
		query url.Values
	}{
		{sink.WebhookOpts{}, url.Values{}},
		{sink.WebhookOpts{Dedupe: true}, url.Values{"dedupe": {"true"}}},
		{sink.WebhookOpts{Probe: true}, url.Values{"probe": {"PROBE"}}},
		{sink.WebhookOpts{Dedupe: true, Probe: true}, url.Values{"dedupe": {"true"}, "probe": {"PROBE"}}},
	} {
		w := sink.NewWebhook(tt.opts)
		u, err := url.Parse(w.URL())
		require.NoError(t, err)
		require.Equal(t, "http", u.Scheme)
		require.Equal(t, "127.0.0.1", u.Hostname())
		require.Equal(t, "/hook", u.Path)
		require.Equal(t, "http://"+u.Host+"/effects", w.ProbeURL())
		if tt.query.Has("probe") {
			tt.query.Set("probe", w.ProbeURL())
		}
		require.Equal(t, tt.query, u.Query())
		w.Close()
	}
}

func TestWebhookSinkFailNext(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{Dedupe: true})
	b.sink.FailNext(2, http.StatusTooManyRequests, map[string]string{"Retry-After": "3", "X-Why": "quota"}, "slow down")
	for range 2 {
		a := b.post(t, "e-1", "ada@example.test")
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Equal(t, "3", a.header.Get("Retry-After"))
		require.Equal(t, "quota", a.header.Get("X-Why"))
		require.Equal(t, "slow down", a.body)
	}
	require.Empty(t, b.sink.Effects(), "a failed POST is not applied")
	require.Equal(t, http.StatusOK, b.post(t, "e-1", "ada@example.test").status)
	require.Len(t, b.sink.Effects(), 1)

	// A failure is injected even for a repeat of an applied effect.
	b.sink.FailNext(1, http.StatusServiceUnavailable, nil, "")
	require.Equal(t, http.StatusServiceUnavailable, b.post(t, "e-1", "ada@example.test").status)
	require.Equal(t, http.StatusOK, b.post(t, "e-1", "ada@example.test").status)
	require.Len(t, b.sink.Effects(), 1)
	require.Equal(t, 5, b.sink.Requests())
}

func TestWebhookSinkApplyThenFail(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	b.sink.ApplyThenFail(1, http.StatusBadGateway)
	a := b.post(t, "e-1", "ada@example.test")
	require.Equal(t, http.StatusBadGateway, a.status)
	require.JSONEq(t, `{"error":"the sink applied the effect and then failed"}`, a.body)
	require.Equal(t, map[string]int{"e-1": 1}, b.sink.CountByEffectID(), "applied although the answer says otherwise")

	a = b.post(t, "e-2", "bob@example.test")
	require.Equal(t, http.StatusOK, a.status)
	require.JSONEq(t, `{"status":"done","receipt":"wh-000002"}`, a.body)
}

func TestWebhookSinkApplyThenHang(t *testing.T) {
	t.Parallel()
	w := sink.NewWebhook(sink.WebhookOpts{})
	u, err := url.Parse(w.URL())
	require.NoError(t, err)
	u.RawQuery = ""
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer client.CloseIdleConnections()

	// The effect is applied and no answer comes; the client gives up.
	w.ApplyThenHang(1, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for len(w.Effects()) == 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(`{"target":"ada@example.test"}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "e-1")
	_, err = client.Do(req)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, map[string]int{"e-1": 1}, w.CountByEffectID())

	// The hang is the next n POSTs only, and it ends when the client goes
	// away: Close does not wait out the minute.
	req, err = http.NewRequest(http.MethodPost, u.String(), strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	client.CloseIdleConnections()
	start := time.Now()
	w.Close()
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestWebhookSinkHangThenAnswer(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	b.sink.ApplyThenHang(1, 100*time.Millisecond)
	start := time.Now()
	a := b.post(t, "e-1", "ada@example.test")
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	require.Equal(t, http.StatusOK, a.status)
	require.JSONEq(t, `{"status":"done","receipt":"wh-000001"}`, a.body)
}

func TestWebhookSinkStranded(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	b.sink.Stranded(1)
	a := b.post(t, "e-1", "ada@example.test")
	require.Equal(t, http.StatusOK, a.status)
	var got map[string]string
	require.NoError(t, json.Unmarshal([]byte(a.body), &got))
	require.Equal(t, map[string]string{"status": "stranded", "reason": "the sink was told to strand this effect", "receipt": "wh-000001"}, got)
	require.JSONEq(t, `{"status":"done","receipt":"wh-000002"}`, b.post(t, "e-2", "bob@example.test").body)
	effects := b.sink.Effects()
	require.Len(t, effects, 2)
	require.True(t, effects[0].Stranded)
	require.False(t, effects[1].Stranded)
}

func TestWebhookSinkDelay(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	b.sink.Delay(100 * time.Millisecond)
	start := time.Now()
	require.Equal(t, http.StatusOK, b.post(t, "e-1", "ada@example.test").status)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	// The request is recorded when it arrives, the effect after the wait.
	req, eff := b.sink.RequestLog()[0], b.sink.Effects()[0]
	require.GreaterOrEqual(t, eff.At.Sub(req.At), 100*time.Millisecond)

	b.sink.Delay(0)
	require.Equal(t, http.StatusOK, b.post(t, "e-2", "bob@example.test").status)
}

func TestWebhookSinkClosed(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, sink.WebhookOpts{})
	b.post(t, "e-1", "ada@example.test")
	b.client.CloseIdleConnections()
	b.sink.Close()
	_, err := b.try(context.Background(), http.MethodPost, "/hook", "e-2", "{}")
	require.Error(t, err, "a closed sink accepts nothing")
	require.Len(t, b.sink.Effects(), 1, "and keeps the evidence")
}
