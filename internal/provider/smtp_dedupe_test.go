package provider_test

import (
	"bytes"
	"net/mail"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

func TestSMTPIdempotencyHeaderParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		query  string
		window time.Duration
	}{
		{"idempotency_header=Resend-Idempotency-Key", 24 * time.Hour},
		{"idempotency_header=resend-idempotency-key", 24 * time.Hour},
		{"idempotency_header=X-EE-Idempotency-Key", 24 * time.Hour},
		{"idempotency_header=X-EE-Idempotency-Key&dedupe_window=2h", 2 * time.Hour},
		{"idempotency_header=X-Relay-Dedupe&dedupe_window=15m", 15 * time.Minute},
	} {
		p, err := provider.Parse("relay", "smtp://resend:"+resendSecret+"@smtp.resend.com:465?"+c.query)
		require.NoError(t, err, c.query)
		require.Equal(t, provider.Capabilities{Dedupe: true, DedupeWindow: c.window}, p.Capabilities(), c.query)
		require.NotContains(t, p.String(), resendSecret)
		again, err := provider.ParseFlag(p.String())
		require.NoError(t, err)
		require.Equal(t, p.Capabilities(), again.Capabilities())
		require.NoError(t, p.Close())
		require.NoError(t, again.Close())
	}
	for _, c := range []struct{ query, want string }{
		{"idempotency_header=X-Relay-Dedupe", `provider "relay": idempotency_header "X-Relay-Dedupe" has no documented window: say how long the relay deduplicates by it with dedupe_window=DURATION`},
		{"dedupe_window=1h", "dedupe_window applies to an smtp provider only with idempotency_header=NAME"},
		{"idempotency_header=Message-ID", `idempotency_header "Message-ID" is not a message header name`},
		{"idempotency_header=X-Onceplan-Effect", "is not a message header name"},
		{"idempotency_header=Bad:Name", "is not a message header name"},
		{"idempotency_header=", "is not a message header name"},
		{"idempotency_header=Resend-Idempotency-Key&dedupe_window=-1s", "is not a positive duration"},
	} {
		p, err := provider.Parse("relay", "smtp://resend:"+resendSecret+"@smtp.resend.com:465?"+c.query)
		require.Error(t, err, c.query)
		require.Nil(t, p)
		require.ErrorIs(t, err, provider.ErrInvalidProvider)
		require.Contains(t, err.Error(), c.want)
		require.NotContains(t, err.Error(), resendSecret)
	}
}

// TestSMTPIdempotencyHeaderDedupesAtTheRelay: every message carries the
// effect id in the declared header; a relay that deduplicates by it (the
// sink, as Resend's relay does) accepts a repeat after a lost answer with
// 250 and delivers nothing new.
func TestSMTPIdempotencyHeaderDedupesAtTheRelay(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	s.DedupeByHeader("Resend-Idempotency-Key", time.Hour)
	p := newSMTP(t, s.URL()+"&idempotency_header=Resend-Idempotency-Key")
	require.Equal(t, provider.Capabilities{Dedupe: true, DedupeWindow: 24 * time.Hour}, p.Capabilities())

	s.DropAfterData(1) // delivered, but the answer is lost
	r := testRequest("smtp-idem")
	_, v := send(t, p, r)
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	_, v = send(t, p, r) // recovery sends again with the same header
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.Contains(t, v.Receipt, "duplicate of S000001")

	msgs := s.Messages()
	require.Len(t, msgs, 1, "one message delivered")
	require.Equal(t, 1, s.Deduplicated())
	m, err := mail.ReadMessage(bytes.NewReader(msgs[0].Data))
	require.NoError(t, err)
	require.Equal(t, provider.EffectID(r.Key, r.Epoch), m.Header.Get("Resend-Idempotency-Key"))
	require.Equal(t, map[string]int{provider.EffectID(r.Key, r.Epoch): 1}, s.CountByHeader("Resend-Idempotency-Key"))

	// Another effect is another message.
	_, v = send(t, p, testRequest("smtp-idem-2"))
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.Len(t, s.Messages(), 2)
}

// TestSMTPWithoutIdempotencyHeaderHasNone: a plain smtp:// sets no such
// header and declares nothing.
func TestSMTPWithoutIdempotencyHeaderHasNone(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL())
	require.Equal(t, provider.Capabilities{}, p.Capabilities())
	send(t, p, testRequest("smtp-plain"))
	m, err := mail.ReadMessage(bytes.NewReader(s.Messages()[0].Data))
	require.NoError(t, err)
	require.Empty(t, m.Header.Get("Resend-Idempotency-Key"))
}
