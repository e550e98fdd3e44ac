package provider_test

import (
	"context"
	"encoding/json"
	"net/mail"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
)

// TestListUnsubscribeHeaders: a message with an unsubscribe link is
// written with List-Unsubscribe: <URL> and List-Unsubscribe-Post (RFC
// 8058); one without (transactional) with neither; a link that would break
// the header is refused, never written. The webhook's JSON carries the
// link as message.list_unsubscribe.
func TestListUnsubscribeHeaders(t *testing.T) {
	t.Parallel()
	const link = "https://onceplan.example.com/u/AQIDBAUGBwgJCgsMDQ4PEGFubkBleGFtcGxlLmNvbQ"
	p, dir := newMaildir(t)
	read := func(r provider.Request) *mail.Message {
		t.Helper()
		send(t, p, r)
		f, err := os.Open(filepath.Join(dir, "new", provider.MaildirFileName(r.Key, r.Epoch)))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		m, err := mail.ReadMessage(f)
		require.NoError(t, err)
		return m
	}

	r := testRequest("unsubscribe-link")
	r.Message.ListUnsubscribe = link
	m := read(r)
	require.Equal(t, "<"+link+">", m.Header.Get("List-Unsubscribe"))
	require.Equal(t, "List-Unsubscribe=One-Click", m.Header.Get("List-Unsubscribe-Post"))

	m = read(testRequest("transactional"))
	require.Empty(t, m.Header.Get("List-Unsubscribe"))
	require.Empty(t, m.Header.Get("List-Unsubscribe-Post"))

	bad := testRequest("bad-link")
	bad.Message.ListUnsubscribe = link + "\r\nBcc: victim@example.com"
	release, err := p.Acquire(context.Background())
	require.NoError(t, err)
	raw, err := p.Send(context.Background(), bad)
	release()
	if err == nil {
		require.NotEqual(t, provider.OutcomeDone, p.Classify(raw).Outcome, "%s", raw)
	}
	require.NoFileExists(t, filepath.Join(dir, "new", provider.MaildirFileName(bad.Key, bad.Epoch)))

	s := newWebhookSink(t, sink.WebhookOpts{})
	hook := newWebhook(t, s.URL())
	send(t, hook, r)
	reqs := s.RequestLog()
	require.Len(t, reqs, 1)
	var body struct {
		Message struct {
			ListUnsubscribe string `json:"list_unsubscribe"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(reqs[0].Body, &body))
	require.Equal(t, link, body.Message.ListUnsubscribe)
}
