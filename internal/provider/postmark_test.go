package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/plan"
)

// The documented example payloads of Postmark's API reference
// (postmarkapp.com/developer/api/email-api, …/messages-api, …/overview).
const (
	postmarkSentExample = `{
  "To": "receiver@example.com",
  "SubmittedAt": "2014-02-17T07:25:01.4178645-05:00",
  "MessageID": "0a129aee-e1cd-480d-b08d-4f48548ff48d",
  "ErrorCode": 0,
  "Message": "OK"
}`
	postmarkInactiveExample = `{"ErrorCode": 406, "Message": "You tried to send to a recipient that has been marked as inactive. Found inactive addresses: receiver@example.com. Inactive recipients are ones that have generated a hard bounce, a spam complaint, or a manual suppression."}`
	postmarkInvalidExample  = `{"ErrorCode": 300, "Message": "Invalid email request"}`
	postmarkSearchExample   = `{
  "TotalCount": 194,
  "Messages": [
    {
      "Tag": "Invitation",
      "MessageID": "0ac29aee-e1cd-480d-b08d-4f48548ff48d",
      "MessageStream": "outbound",
      "To": [{"Email": "john.doe@yahoo.com", "Name": null}],
      "Cc": [],
      "Bcc": [],
      "Recipients": ["john.doe@yahoo.com"],
      "ReceivedAt": "2014-02-20T07:25:01.4178645-05:00",
      "From": "\"Joe\" <joe@domain.com>",
      "Subject": "staging",
      "Attachments": [],
      "Status": "Sent",
      "TrackOpens": true,
      "TrackLinks": "HtmlOnly",
      "Metadata": {"color": "blue", "client-id": "12345"},
      "Sandboxed": false
    }
  ]
}`
	postmarkSearchEmpty = `{"TotalCount": 0, "Messages": []}`
)

func framed(status string, headers map[string]string, body string) []byte {
	var b strings.Builder
	b.WriteString("HTTP/1.1 " + status + "\r\n")
	for k, v := range headers {
		b.WriteString(k + ": " + v + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return []byte(b.String())
}

func TestParsePostmark(t *testing.T) {
	t.Parallel()
	p, err := provider.Parse("pm", "postmark://tok-123@api.postmarkapp.com")
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, "postmark", p.Kind())
	require.Equal(t, provider.Capabilities{Probe: true, SettleWindow: 2 * time.Minute, ProbeRetention: 45 * 24 * time.Hour}, p.Capabilities())
	require.Equal(t, "pm=postmark://xxxxx@api.postmarkapp.com", p.String())
	require.NotContains(t, p.String(), "tok-123")

	// Without a host: Postmark's. Options override the windows.
	p2, err := provider.Parse("pm", "postmark://tok@?settle=30s&probe_retention=168h&message_stream=broadcast&endpoint=http://127.0.0.1:9")
	require.NoError(t, err)
	defer p2.Close()
	require.Equal(t, provider.Capabilities{Probe: true, SettleWindow: 30 * time.Second, ProbeRetention: 7 * 24 * time.Hour}, p2.Capabilities())

	for raw, want := range map[string]string{
		"postmark://api.postmarkapp.com":                                 "no server token",
		"postmark://user:secret-tok@api.postmarkapp.com":                 "alone before '@'",
		"postmark://tok@api.postmarkapp.com/email":                       "must not have a path",
		"postmark://tok@api.postmarkapp.com?endpoint=http://example.com": "plain http is allowed only",
		"postmark://tok@api.postmarkapp.com?dedupe=true":                 "unknown option",
		"postmark://tok@api.postmarkapp.com?probe_retention=-1h":         "probe_retention",
		"postmark://tok@api.postmarkapp.com?endpoint=https://u:p@x.test": "without credentials",
	} {
		_, err := provider.Parse("pm", raw)
		require.ErrorIs(t, err, provider.ErrInvalidProvider, raw)
		require.Contains(t, err.Error(), want, raw)
		require.NotContains(t, err.Error(), "secret-tok", raw)
		require.NotContains(t, err.Error(), "tok@", raw)
	}
}

func TestRedactedPostmarkToken(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postmark://tok-123@api.postmarkapp.com":                         "postmark://xxxxx@api.postmarkapp.com",
		"POSTMARK://tok-123@api.postmarkapp.com?settle=1m":               "POSTMARK://xxxxx@api.postmarkapp.com?settle=1m",
		"postmark://tok%zz-123@api.postmarkapp.com":                      "postmark://xxxxx@api.postmarkapp.com", // does not parse
		"postmark://api.postmarkapp.com":                                 "postmark://api.postmarkapp.com",
		"smtp://tok-123:tok-123@smtp.postmarkapp.com:587?probe=postmark": "smtp://tok-123:xxxxx@smtp.postmarkapp.com:587?probe=postmark",
	} {
		require.Equal(t, want, provider.Redacted(raw), raw)
	}
	_, err := provider.ParseFlag("pm postmark://tok-123@api.postmarkapp.com")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "tok-123")
}

// FuzzPostmarkTokenNeverShown: whatever the token and the rest of the URL,
// neither the provider's String() nor the error shows it.
func FuzzPostmarkTokenNeverShown(f *testing.F) {
	f.Add("tok-123", "")
	f.Add("a:b", "?settle=x")
	f.Add("%41bc", "/path")
	f.Fuzz(func(t *testing.T, token, rest string) {
		if token == "" {
			t.Skip("no token")
		}
		show := func(tok string) string {
			// Escaped whole, so the token stays the whole userinfo.
			p, err := provider.Parse("pm", "postmark://"+url.QueryEscape(tok)+"@api.postmarkapp.com"+rest)
			if err != nil {
				return "error: " + err.Error()
			}
			defer p.Close()
			return p.String()
		}
		require.Equal(t, show("other-token"), show(token))
	})
}

func TestClassifyPostmark(t *testing.T) {
	t.Parallel()
	json200 := map[string]string{"Content-Type": "application/json; charset=utf-8"}
	for _, c := range []struct {
		name      string
		raw       []byte
		outcome   provider.Outcome
		receipt   string
		retryable bool
		notSent   bool
		after     time.Duration
	}{
		{name: "sent", raw: framed("200 OK", json200, postmarkSentExample), outcome: provider.OutcomeDone, receipt: "0a129aee-e1cd-480d-b08d-4f48548ff48d"},
		{name: "inactive recipient", raw: framed("422 Unprocessable Entity", json200, postmarkInactiveExample), outcome: provider.OutcomeFailed},
		{name: "invalid email", raw: framed("422 Unprocessable Entity", json200, postmarkInvalidExample), outcome: provider.OutcomeFailed},
		{name: "maintenance", raw: framed("422 Unprocessable Entity", json200, `{"ErrorCode":100,"Message":"Maintenance"}`), outcome: provider.OutcomeFailed, retryable: true},
		{name: "rate limited", raw: framed("429 Too Many Requests", map[string]string{"Retry-After": "30"}, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`), outcome: provider.OutcomeQuota, after: 30 * time.Second},
		// Postmark documents no Retry-After: no wait named, the queue backs off.
		{name: "rate limited, no Retry-After", raw: framed("429 Too Many Requests", nil, ``), outcome: provider.OutcomeQuota, after: 0},
		{name: "rate limited, Retry-After unreadable", raw: framed("429 Too Many Requests", map[string]string{"Retry-After": "soon"}, ``), outcome: provider.OutcomeQuota, after: 0},
		{name: "rate limited by ErrorCode", raw: framed("422 Unprocessable Entity", nil, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`), outcome: provider.OutcomeQuota, after: 0},
		{name: "bad token", raw: framed("401 Unauthorized", json200, `{"ErrorCode":10,"Message":"Bad or missing API token"}`), outcome: provider.OutcomeFailed},
		{name: "internal error", raw: framed("500 Internal Server Error", nil, ``), outcome: provider.OutcomeUnknown},
		{name: "unavailable", raw: framed("503 Service Unavailable", nil, ``), outcome: provider.OutcomeUnknown},
		{name: "200 without a MessageID", raw: framed("200 OK", json200, `{}`), outcome: provider.OutcomeUnknown},
		{name: "200 with an error code", raw: framed("200 OK", json200, postmarkInactiveExample), outcome: provider.OutcomeFailed},
		{name: "lost answer", raw: []byte(`transport-error wrote-request=true error="EOF"`), outcome: provider.OutcomeUnknown},
		{name: "not sent", raw: []byte(`transport-error wrote-request=false error="connection refused"`), outcome: provider.OutcomeFailed, retryable: true, notSent: true},
		{name: "not built", raw: []byte(`postmark-build error="the subject contains a line break"`), outcome: provider.OutcomeFailed},
		{name: "garbage", raw: []byte("\x00garbage"), outcome: provider.OutcomeUnknown},
	} {
		v := provider.ClassifyPostmark(c.raw)
		require.Equal(t, c.outcome, v.Outcome, c.name)
		require.Equal(t, c.receipt, v.Receipt, c.name)
		require.Equal(t, c.retryable, v.Retryable, c.name)
		require.Equal(t, c.notSent, v.NotSent, c.name)
		require.Equal(t, c.after, v.RetryAfter, c.name)
		require.Equal(t, v, provider.ClassifyPostmark(c.raw), "deterministic")
	}
}

// FuzzClassifyPostmark: any bytes give the same sane verdict every time,
// and only a 2xx with ErrorCode 0 settles an effect as done.
func FuzzClassifyPostmark(f *testing.F) {
	f.Add(framed("200 OK", nil, postmarkSentExample))
	f.Add(framed("422 Unprocessable Entity", nil, postmarkInactiveExample))
	f.Add([]byte(`transport-error wrote-request=true error="EOF"`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := provider.ClassifyPostmark(raw)
		require.Equal(t, v, provider.ClassifyPostmark(raw))
		if v.Outcome == provider.OutcomeDone {
			require.True(t, strings.HasPrefix(string(raw), "HTTP/"))
			require.NotEmpty(t, v.Receipt)
		}
	})
}

func request(i int) provider.Request {
	return provider.Request{
		Key: "v1:" + strings.Repeat("ab", 32), Epoch: i, Target: "rcpt@example.com",
		Message: plan.Message{From: "sender@example.com", To: "rcpt@example.com", Subject: "Hi", Text: "Hello", HTML: "<b>Hello</b>",
			ListUnsubscribe: "https://onceplan.example/u/tok"},
	}
}

// TestPostmarkSendAndProbe: against the in-repo Postmark, a send is done
// with Postmark's MessageID as receipt, carries the effect id in Metadata
// and the one-click headers, and the probe finds it by that metadata —
// not another effect's, and not once the retention has passed.
func TestPostmarkSendAndProbe(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv := sink.NewPostmark(sink.PostmarkOpts{Retention: time.Hour, NowFunc: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	t.Cleanup(srv.Close)
	p, err := provider.Parse("pm", srv.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()

	r := request(0)
	raw, err := p.Send(ctx, r)
	require.NoError(t, err)
	v := p.Classify(raw)
	require.Equal(t, provider.OutcomeDone, v.Outcome, string(raw))
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, v.Receipt, msgs[0].MessageID)
	require.Equal(t, provider.EffectID(r.Key, r.Epoch), msgs[0].EffectID())
	require.Equal(t, "<https://onceplan.example/u/tok>", msgs[0].Headers["List-Unsubscribe"])
	require.Equal(t, "List-Unsubscribe=One-Click", msgs[0].Headers["List-Unsubscribe-Post"])
	require.Equal(t, "Hello", msgs[0].TextBody)
	require.Equal(t, "<b>Hello</b>", msgs[0].HTMLBody)

	pr, err := p.Probe(ctx, r.Key, r.Epoch)
	require.NoError(t, err)
	require.True(t, pr.Found)
	require.Equal(t, v.Receipt, pr.Receipt)
	require.Equal(t, 1, pr.Count())
	pr, err = p.Probe(ctx, r.Key, 1) // another effect (epoch)
	require.NoError(t, err)
	require.False(t, pr.Found)

	// Postmark holds the effect of epoch 2 twice: the probe finds it, and
	// counts two (the page it asks for lists one).
	srv.AcceptTwice(1)
	raw, err = p.Send(ctx, request(2))
	require.NoError(t, err)
	require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome)
	pr, err = p.Probe(ctx, r.Key, 2)
	require.NoError(t, err)
	require.Equal(t, []any{true, 2}, []any{pr.Found, pr.Count()})

	advance(time.Hour) // past the sink's retention
	pr, err = p.Probe(ctx, r.Key, r.Epoch)
	require.NoError(t, err)
	require.False(t, pr.Found, "Postmark no longer keeps it")

	// A search that fails says nothing.
	srv.FailSearches(1)
	_, err = p.Probe(ctx, r.Key, r.Epoch)
	require.Error(t, err)
	require.NotContains(t, err.Error(), srv.Token())
}

func TestPostmarkFailuresOnCommand(t *testing.T) {
	t.Parallel()
	srv := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(srv.Close)
	p, err := provider.Parse("pm", sink.WithOption(srv.URL(), "timeout=1s"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	send := func(epoch int) provider.Verdict {
		raw, err := p.Send(ctx, request(epoch))
		require.NoError(t, err)
		return p.Classify(raw)
	}

	srv.FailNext(1, 429, map[string]string{"Retry-After": "7"}, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`)
	v := send(1)
	require.Equal(t, provider.OutcomeQuota, v.Outcome)
	require.Equal(t, 7*time.Second, v.RetryAfter)

	srv.FailNext(1, 422, nil, postmarkInactiveExample)
	require.Equal(t, provider.OutcomeFailed, send(2).Outcome)

	srv.AcceptThenFail(1, 500)
	require.Equal(t, provider.OutcomeUnknown, send(3).Outcome)
	srv.AcceptThenDrop(1)
	require.Equal(t, provider.OutcomeUnknown, send(4).Outcome)
	srv.AcceptThenHang(1, 5*time.Second)
	require.Equal(t, provider.OutcomeUnknown, send(5).Outcome)
	require.Len(t, srv.Messages(), 3, "accepted: the 5xx, the dropped and the hung one")
	for _, e := range []int{3, 4, 5} {
		pr, err := p.Probe(ctx, request(e).Key, e)
		require.NoError(t, err)
		require.True(t, pr.Found, "epoch %d: accepted, so the probe finds it", e)
	}

	// A wrong token is refused, and never shown.
	bad, err := provider.Parse("bad", strings.Replace(srv.URL(), srv.Token(), "wrong-token", 1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bad.Close() })
	raw, err := bad.Send(ctx, request(6))
	require.NoError(t, err)
	v = bad.Classify(raw)
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.NotContains(t, v.Reason, "wrong-token")
}

func TestDecodePostmarkSearchExample(t *testing.T) {
	t.Parallel()
	// The documented example lists a message with other metadata: the
	// probe does not take it for ours.
	srvless := func(body string) (provider.ProbeResult, error) {
		return provider.DecodePostmarkProbe(framed("200 OK", nil, body), "v1:x:0")
	}
	_, err := srvless(postmarkSearchExample)
	require.Error(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(postmarkSearchExample), &doc))
	ours := strings.Replace(postmarkSearchExample, `{"color": "blue", "client-id": "12345"}`, `{"onceplan_effect": "v1:x:0"}`, 1)
	one := strings.Replace(ours, `"TotalCount": 194`, `"TotalCount": 1`, 1)
	pr, err := srvless(one)
	require.NoError(t, err)
	require.True(t, pr.Found)
	require.Equal(t, "0ac29aee-e1cd-480d-b08d-4f48548ff48d", pr.Receipt)
	require.Equal(t, 1, pr.Count())
	// The search counts more messages with the effect id than its page
	// (count=1) lists: each of them is a message, and two are a duplicate.
	pr, err = srvless(strings.Replace(ours, `"TotalCount": 194`, `"TotalCount": 2`, 1))
	require.NoError(t, err)
	require.Equal(t, []any{true, 2, "0ac29aee-e1cd-480d-b08d-4f48548ff48d"}, []any{pr.Found, pr.Count(), pr.Receipt})
	pr, err = srvless(ours)
	require.NoError(t, err)
	require.Equal(t, 194, pr.Count())
	// Counted, none listed (past the page): the search's word is taken.
	pr, err = srvless(`{"TotalCount": 2, "Messages": []}`)
	require.NoError(t, err)
	require.Equal(t, []any{true, 2, ""}, []any{pr.Found, pr.Count(), pr.Receipt})
	pr, err = srvless(postmarkSearchEmpty)
	require.NoError(t, err)
	require.False(t, pr.Found)
	require.Zero(t, pr.Count())
	_, err = srvless(`{"Messages": []}`)
	require.Error(t, err, "no TotalCount: not an answer we understand")
	_, err = provider.DecodePostmarkProbe(framed("401 Unauthorized", nil, `{"ErrorCode":10}`), "v1:x:0")
	require.Error(t, err)
}

// TestSMTPProbePostmarkAndMailjet: smtp:// with probe=postmark puts the
// effect id in X-PM-Metadata-onceplan_effect and finds it through
// Postmark's API; probe=mailjet puts it in X-MJ-CustomID and finds it
// through Mailjet's message API.
func TestSMTPProbePostmarkAndMailjet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	pm := sink.NewPostmark(sink.PostmarkOpts{SMTP: relay})
	t.Cleanup(pm.Close)
	mj := sink.NewMailjet(sink.MailjetOpts{SMTP: relay})
	t.Cleanup(mj.Close)

	for _, c := range []struct {
		name, url string
		caps      provider.Capabilities
		effects   func() map[string]int
	}{
		{name: "postmark", url: pm.SMTPURL(),
			caps:    provider.Capabilities{Probe: true, SettleWindow: 2 * time.Minute, ProbeRetention: 45 * 24 * time.Hour},
			effects: pm.Effects},
		{name: "mailjet", url: mj.SMTPURL(),
			caps:    provider.Capabilities{Probe: true, SettleWindow: 10 * time.Minute, ProbeRetention: 30 * 24 * time.Hour},
			effects: mj.Effects},
	} {
		p, err := provider.Parse(c.name, c.url)
		require.NoError(t, err, c.name)
		require.Equal(t, c.caps, p.Capabilities(), c.name)
		r := request(10)
		if c.name == "mailjet" {
			r.Epoch = 11
		}
		id := provider.EffectID(r.Key, r.Epoch)
		pr, err := p.Probe(ctx, r.Key, r.Epoch)
		require.NoError(t, err, c.name)
		require.False(t, pr.Found, "%s: not sent yet", c.name)
		raw, err := p.Send(ctx, r)
		require.NoError(t, err)
		require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome, string(raw))
		require.Equal(t, 1, c.effects()[id], c.name)
		pr, err = p.Probe(ctx, r.Key, r.Epoch)
		require.NoError(t, err, c.name)
		require.True(t, pr.Found, c.name)
		require.NotEmpty(t, pr.Receipt)
		require.NoError(t, p.Close())
		require.NotContains(t, p.String(), "secret", c.name)
		require.NotContains(t, p.String(), pm.Token()+"@", c.name)
	}
	msgs := relay.Messages()
	require.Len(t, msgs, 2)
	for i, h := range []string{"X-PM-Metadata-onceplan_effect", "X-MJ-CustomID"} {
		m, err := mail.ReadMessage(bytes.NewReader(msgs[i].Data))
		require.NoError(t, err)
		require.Equal(t, provider.EffectID(request(0).Key, 10+i), m.Header.Get(h))
	}

	// Overrides, and refusals.
	p, err := provider.Parse("mj", sink.WithOption(mj.SMTPURL(), "probe_retention=24h&settle=1m"))
	require.NoError(t, err)
	require.Equal(t, provider.Capabilities{Probe: true, SettleWindow: time.Minute, ProbeRetention: 24 * time.Hour}, p.Capabilities())
	require.NoError(t, p.Close())
	for raw, want := range map[string]string{
		"smtp://h.test:25?probe=sendgrid":                     "not postmark or mailjet",
		"smtp://h.test:25?probe=postmark":                     "needs the SMTP credentials",
		"smtp://u:p@h.test:25?probe_retention=1h":             "apply only with probe",
		"smtp://u:p@h.test:25?settle=1m":                      "settle applies only",
		"smtp://u:p@h.test:25?probe=mailjet&probe_endpoint=x": "probe_endpoint",
	} {
		_, err := provider.Parse("relay", raw)
		require.ErrorIs(t, err, provider.ErrInvalidProvider, raw)
		require.Contains(t, err.Error(), want, raw)
	}
}

// TestLivePostmark sends one message through the real Postmark and probes
// it, when ONCEPLAN_LIVE_POSTMARK_TOKEN, _FROM and _TO are set.
func TestLivePostmark(t *testing.T) {
	token, from, to := os.Getenv("ONCEPLAN_LIVE_POSTMARK_TOKEN"), os.Getenv("ONCEPLAN_LIVE_POSTMARK_FROM"), os.Getenv("ONCEPLAN_LIVE_POSTMARK_TO")
	if token == "" || from == "" || to == "" {
		t.Skip("live Postmark test: set ONCEPLAN_LIVE_POSTMARK_TOKEN, ONCEPLAN_LIVE_POSTMARK_FROM and ONCEPLAN_LIVE_POSTMARK_TO to run it")
	}
	p, err := provider.Parse("live", "postmark://"+url.PathEscape(token)+"@api.postmarkapp.com")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	liveSendAndProbe(t, p, from, to)
}

// TestLiveSMTPProbe sends one message through Postmark's SMTP (with the
// server token) and, when ONCEPLAN_LIVE_MAILJET_KEY, _SECRET, _FROM and _TO
// are set, through Mailjet's; each is then probed through the API.
func TestLiveSMTPProbe(t *testing.T) {
	ran := false
	if token, from, to := os.Getenv("ONCEPLAN_LIVE_POSTMARK_TOKEN"), os.Getenv("ONCEPLAN_LIVE_POSTMARK_FROM"), os.Getenv("ONCEPLAN_LIVE_POSTMARK_TO"); token != "" && from != "" && to != "" {
		tok := url.PathEscape(token)
		p, err := provider.Parse("live-pm-smtp", "smtp://"+tok+":"+tok+"@smtp.postmarkapp.com:587?probe=postmark")
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		liveSendAndProbe(t, p, from, to)
		ran = true
	}
	if key, secret, from, to := os.Getenv("ONCEPLAN_LIVE_MAILJET_KEY"), os.Getenv("ONCEPLAN_LIVE_MAILJET_SECRET"), os.Getenv("ONCEPLAN_LIVE_MAILJET_FROM"), os.Getenv("ONCEPLAN_LIVE_MAILJET_TO"); key != "" && secret != "" && from != "" && to != "" {
		p, err := provider.Parse("live-mj-smtp", "smtp://"+url.PathEscape(key)+":"+url.PathEscape(secret)+"@in-v3.mailjet.com:587?probe=mailjet")
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		liveSendAndProbe(t, p, from, to)
		ran = true
	}
	if !ran {
		t.Skip("live SMTP probe test: set ONCEPLAN_LIVE_POSTMARK_TOKEN/_FROM/_TO (Postmark) or ONCEPLAN_LIVE_MAILJET_KEY/_SECRET/_FROM/_TO (Mailjet) to run it")
	}
}

func liveSendAndProbe(t *testing.T, p provider.Provider, from, to string) {
	t.Helper()
	ctx := context.Background()
	r := provider.Request{
		Key: fmt.Sprintf("v1:%064x", time.Now().UnixNano()), Epoch: 0, Target: to,
		Message: plan.Message{From: from, To: to, Subject: "Onceplan live test (" + p.Name() + ")", Text: "This message checks Onceplan's adapter against the real service."},
	}
	raw, err := p.Send(ctx, r)
	require.NoError(t, err)
	v := p.Classify(raw)
	require.Equal(t, provider.OutcomeDone, v.Outcome, v.Reason)
	deadline := time.Now().Add(p.Capabilities().SettleWindow + time.Minute)
	for {
		pr, err := p.Probe(ctx, r.Key, r.Epoch)
		require.NoError(t, err)
		if pr.Found {
			t.Logf("%s: sent (%s), found by the probe (%s)", p.Name(), v.Receipt, pr.Receipt)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: sent (%s) but the probe did not find it within the settle window", p.Name(), v.Receipt)
		}
		time.Sleep(5 * time.Second)
	}
}

// TestDecodeMailjetMessagesExample: the documented shape of GET
// /v3/REST/message ({Count, Data, Total}; dev.mailjet.com/reference/email/messages).
func TestDecodeMailjetMessagesExample(t *testing.T) {
	t.Parallel()
	example := `{"Count": 1, "Data": [{"ArrivedAt": "2018-01-01T00:00:00Z", "AttachmentCount": 0, "AttemptCount": 0, "CampaignID": 0,
	  "ContactAlt": "", "ContactID": 0, "Delay": 0, "DestinationID": 0, "FilterTime": 0, "ID": 1152921504606846976,
	  "IsClickTracked": false, "IsHTMLPartIncluded": false, "IsOpenTracked": false, "IsTextPartIncluded": false,
	  "IsUnsubTracked": false, "MessageSize": 0, "SenderID": 0, "SpamassassinScore": 0, "SpamassRules": "",
	  "StatePermanent": false, "Status": "sent", "Subject": "", "UUID": ""}], "Total": 1}`
	pr, err := provider.DecodeMailjetProbe(framed("200 OK", nil, example))
	require.NoError(t, err)
	require.True(t, pr.Found)
	require.Equal(t, "mailjet:1152921504606846976", pr.Receipt, "a 64-bit id is kept exactly")
	require.Equal(t, 1, pr.Count())
	// Two messages with the CustomID: a duplicate, whether the page lists
	// both or Total alone says so.
	two := strings.Replace(strings.Replace(example, `"Count": 1`, `"Count": 2`, 1), `"Total": 1`, `"Total": 2`, 1)
	pr, err = provider.DecodeMailjetProbe(framed("200 OK", nil, two))
	require.NoError(t, err)
	require.Equal(t, []any{true, 2, "mailjet:1152921504606846976"}, []any{pr.Found, pr.Count(), pr.Receipt})
	pr, err = provider.DecodeMailjetProbe(framed("200 OK", nil, strings.Replace(example, `"Total": 1`, `"Total": 2`, 1)))
	require.NoError(t, err)
	require.Equal(t, 2, pr.Count())
	pr, err = provider.DecodeMailjetProbe(framed("200 OK", nil, `{"Count": 0, "Data": [], "Total": 0}`))
	require.NoError(t, err)
	require.False(t, pr.Found)
	for _, raw := range [][]byte{
		framed("401 Unauthorized", nil, `{"ErrorMessage": "API key authentication/authorization failure", "StatusCode": 401}`),
		framed("200 OK", nil, `{"Data": []}`),
		[]byte("garbage"),
	} {
		_, err := provider.DecodeMailjetProbe(raw)
		require.Error(t, err, string(raw))
	}
}
