package provider_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// TestResendLive sends one message through the real Resend API twice with
// one effect id and checks that Resend answered the same email id both
// times (one email). It runs only when ONCEPLAN_LIVE_RESEND_API_KEY,
// ONCEPLAN_LIVE_RESEND_FROM (an address of a domain verified in that
// account, or onboarding@resend.dev) and ONCEPLAN_LIVE_RESEND_TO are set;
// otherwise it is skipped with a message.
func TestResendLive(t *testing.T) {
	key, from, to := os.Getenv("ONCEPLAN_LIVE_RESEND_API_KEY"), os.Getenv("ONCEPLAN_LIVE_RESEND_FROM"), os.Getenv("ONCEPLAN_LIVE_RESEND_TO")
	if key == "" || from == "" || to == "" {
		t.Skip("live Resend test skipped: set ONCEPLAN_LIVE_RESEND_API_KEY, ONCEPLAN_LIVE_RESEND_FROM and ONCEPLAN_LIVE_RESEND_TO to run it against the real API")
	}
	p, err := provider.Parse("live", "resend://"+key+"@api.resend.com?timeout=30s")
	require.NoError(t, err)
	defer p.Close()
	require.NotContains(t, p.String(), key)

	// A fresh key per run: Resend would answer a repeat of an earlier
	// run's key (within 24 hours) with that run's id.
	r := testRequest(fmt.Sprintf("onceplan-live-resend-%d", time.Now().UnixNano()))
	r.Target, r.Message.To, r.Message.From = to, to, from
	r.Message.Subject = "Onceplan live test (one message, sent twice with one key)"
	var ids []string
	for range 2 {
		raw, err := p.Send(context.Background(), r)
		require.NoError(t, err)
		require.NotContains(t, string(raw), key)
		v := p.Classify(raw)
		require.Equal(t, provider.OutcomeDone, v.Outcome, "Resend answered %s", raw)
		ids = append(ids, v.Receipt)
	}
	require.Equal(t, ids[0], ids[1], "the repeat with the same Idempotency-Key is the same email")
	t.Logf("Resend email id %s, answered twice for effect %s", ids[0], provider.EffectID(r.Key, r.Epoch))
}

// TestResendSMTPLive sends one message through Resend's SMTP relay
// (smtp.resend.com:465, user "resend", the API key as password) twice
// with one Resend-Idempotency-Key: both are accepted; that the recipient
// got one message is for the person running it to see (SMTP answers
// carry no id to compare). Same variables as TestResendLive.
func TestResendSMTPLive(t *testing.T) {
	key, from, to := os.Getenv("ONCEPLAN_LIVE_RESEND_API_KEY"), os.Getenv("ONCEPLAN_LIVE_RESEND_FROM"), os.Getenv("ONCEPLAN_LIVE_RESEND_TO")
	if key == "" || from == "" || to == "" {
		t.Skip("live Resend SMTP test skipped: set ONCEPLAN_LIVE_RESEND_API_KEY, ONCEPLAN_LIVE_RESEND_FROM and ONCEPLAN_LIVE_RESEND_TO to run it against the real relay")
	}
	p, err := provider.Parse("live", "smtp://resend:"+key+"@smtp.resend.com:465?idempotency_header=Resend-Idempotency-Key&timeout=30s")
	require.NoError(t, err)
	defer p.Close()
	require.NotContains(t, p.String(), key)
	r := testRequest(fmt.Sprintf("onceplan-live-resend-smtp-%d", time.Now().UnixNano()))
	r.Target, r.Message.To, r.Message.From = to, to, from
	r.Message.Subject = "Onceplan live test (SMTP, one message, sent twice with one Resend-Idempotency-Key)"
	for range 2 {
		raw, err := p.Send(context.Background(), r)
		require.NoError(t, err)
		require.NotContains(t, string(raw), key)
		require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome, "the relay answered %s", raw)
	}
	t.Logf("sent twice with Resend-Idempotency-Key %s: %s should have received one message", provider.EffectID(r.Key, r.Epoch), to)
}
