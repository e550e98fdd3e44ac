package provider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

func TestParseGood(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, kind, str string
		caps                 provider.Capabilities
	}{
		{"outbox", "maildir:///var/mail/outbox", "maildir", "outbox=maildir:///var/mail/outbox",
			provider.Capabilities{Dedupe: true, Probe: true}},
		{"outbox", "maildir:///var/mail/outbox?rate=10/s&concurrency=2&settle=5s", "maildir", "",
			provider.Capabilities{Dedupe: true, Probe: true, SettleWindow: 5 * time.Second}},
		{"relay", "smtp://mail.example.test:587", "smtp", "relay=smtp://mail.example.test:587", provider.Capabilities{}},
		{"relay", "smtp://bob:s3cret-pw@mail.example.test:465?rate=600/m&timeout=10s", "smtp",
			"relay=smtp://bob:xxxxx@mail.example.test:465?rate=600/m&timeout=10s", provider.Capabilities{}},
		{"relay", "SMTP://mail.example.test?tls=starttls&concurrency=8", "smtp", "", provider.Capabilities{}},
		{"relay", "smtp://[::1]:2525?tls=none", "smtp", "", provider.Capabilities{}},
		{"hook", "https://hooks.example.test/effects", "http", "hook=https://hooks.example.test/effects", provider.Capabilities{}},
		{"hook", "http://127.0.0.1:8080/hook?dedupe=true", "http", "", provider.Capabilities{Dedupe: true}},
		{"hook-2", "https://h.example.test/hook?dedupe=false&probe=https://h.example.test/effects", "http", "",
			provider.Capabilities{Probe: true, SettleWindow: 2 * time.Minute}},
		{"hook_3", "https://h.example.test/hook?probe=https%3A%2F%2Fh.example.test%2Feffects%2F&settle=30s&rate=0.5/s", "http", "",
			provider.Capabilities{Probe: true, SettleWindow: 30 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			p, err := provider.Parse(tt.name, tt.url)
			require.NoError(t, err)
			defer p.Close()
			require.Equal(t, tt.name, p.Name())
			require.Equal(t, tt.kind, p.Kind())
			require.Equal(t, tt.caps, p.Capabilities())
			if tt.str != "" {
				require.Equal(t, tt.str, p.String())
			}
			require.NotContains(t, p.String(), "s3cret")
		})
	}
}

func TestParseFlag(t *testing.T) {
	t.Parallel()
	p, err := provider.ParseFlag(" relay = smtp://u:topsecret@127.0.0.1:2525?tls=none ")
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, "relay", p.Name())
	require.Equal(t, "relay=smtp://u:xxxxx@127.0.0.1:2525?tls=none", p.String())

	_, err = provider.ParseFlag("smtp://u:topsecret@127.0.0.1:2525")
	require.EqualError(t, err, `provider "smtp://u:xxxxx@127.0.0.1:2525" is not NAME=URL`)
	require.ErrorIs(t, err, provider.ErrInvalidProvider)
}

// TestParseRateDefaults: a service whose limit is its account's is paced
// by default at its documented limit (Resend's 2/s) or an assumed one
// (Postmark publishes none), shared by every process; rate= and
// rate_scope= override, rate=none lifts it; the other kinds have none.
func TestParseRateDefaults(t *testing.T) {
	t.Parallel()
	type rated interface {
		PerSecond() float64
		RateScope() string
	}
	tests := []struct {
		url   string
		rate  float64
		scope string
	}{
		{"resend://re_key@", provider.DefaultResendRate, provider.RateScopeAccount},
		{"resend://re_key@?rate=10/s", 10, provider.RateScopeAccount},
		{"resend://re_key@?rate=none", 0, provider.RateScopeAccount},
		{"resend://re_key@?rate_scope=process", provider.DefaultResendRate, provider.RateScopeProcess},
		{"postmark://tok@", provider.DefaultPostmarkRate, provider.RateScopeAccount},
		{"smtp://mail.example.test:587", 0, provider.RateScopeProcess},
		{"smtp://mail.example.test:587?rate=120/m&rate_scope=account", 2, provider.RateScopeAccount},
		{"maildir:///x", 0, provider.RateScopeProcess},
	}
	for _, tt := range tests {
		p, err := provider.Parse("p", tt.url)
		require.NoError(t, err, tt.url)
		r, ok := p.(rated)
		require.True(t, ok, "%s: %T has no rate", tt.url, p)
		require.InDelta(t, tt.rate, r.PerSecond(), 1e-9, tt.url)
		require.Equal(t, tt.scope, r.RateScope(), tt.url)
		require.NoError(t, p.Close())
	}
}

func TestParseBad(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, url, want string }{
		{"", "maildir:///x", `provider name is empty`},
		{"Relay", "maildir:///x", `provider name "Relay" is not valid: use at most 40 lower-case letters and digits, separated by single '-' or '_'`},
		{"relay", "", `provider "relay": URL is empty`},
		{"relay", "ftp://example.test/x", `provider "relay": unknown scheme "ftp" (want maildir, smtp, http, https, postmark or resend)`},
		{"relay", "/var/mail", `provider "relay": URL /var/mail has no scheme (want maildir, smtp, http, https, postmark or resend)`},
		{"relay", "smtp://mail.example.test:587?rate=ten/s", `provider "relay": rate "ten/s" is not N/s, N/m, N/h or none`},
		{"relay", "smtp://mail.example.test:587?rate=0/s", `provider "relay": rate "0/s" is not N/s, N/m, N/h or none`},
		{"relay", "smtp://mail.example.test:587?rate=0.5/h", `provider "relay": rate "0.5/h" is slower than 1/h, the slowest rate (one call an hour)`},
		{"relay", "smtp://mail.example.test:587?rate=0.000000000001/s", `provider "relay": rate "0.000000000001/s" is slower than 1/h, the slowest rate (one call an hour)`},
		{"relay", "smtp://mail.example.test:587?rate_scope=team", `provider "relay": rate_scope "team" is not account or process`},
		{"relay", "smtp://mail.example.test:587?rate=10", `provider "relay": rate "10" is not N/s, N/m, N/h or none`},
		{"relay", "smtp://mail.example.test:587?concurrency=0", `provider "relay": concurrency "0" is not a whole number from 1 to 1024`},
		{"relay", "smtp://mail.example.test:587?concurrency=many", `provider "relay": concurrency "many" is not a whole number from 1 to 1024`},
		{"relay", "smtp://mail.example.test:587?timeout=soon", `provider "relay": timeout "soon" is not a positive duration like 30s`},
		{"relay", "smtp://mail.example.test:587?tls=ssl", `provider "relay": tls "ssl" is not none, starttls or tls`},
		{"relay", "smtp://mail.example.test:587?color=blue", `provider "relay": unknown option "color" for a smtp provider (known: rate, rate_scope, concurrency, timeout, settle, tls, probe, probe_endpoint, probe_retention, idempotency_header, dedupe_window)`},
		{"relay", "smtp://mail.example.test:587?rate=1/s&rate=2/s", `provider "relay": option "rate" is given 2 times`},
		{"relay", "smtp://mail.example.test:587?settle=1m", `provider "relay": settle applies only to a provider that can be probed (maildir, http with probe=URL, smtp with probe=postmark|mailjet)`},
		{"relay", "smtp://:587", `provider "relay": smtp URL has no host (want smtp://[user:pass@]host:port)`},
		{"relay", "smtp://mail.example.test:587/path", `provider "relay": smtp URL must not have a path (got "/path")`},
		{"relay", "smtp://mail.example.test:99999", `provider "relay": smtp port "99999" is not a number from 1 to 65535`},
		{"relay", "smtp://mail.example.test:bad", `provider "relay": URL smtp://mail.example.test:bad is not valid: invalid port ":bad" after host`},
		{"outbox", "maildir://", `provider "outbox": maildir URL has no absolute path (want maildir:///absolute/path)`},
		{"outbox", "maildir://var/mail", `provider "outbox": maildir URL maildir://var/mail must be maildir:///absolute/path (three slashes)`},
		{"outbox", "maildir:///x?tls=none", `provider "outbox": unknown option "tls" for a maildir provider (known: rate, rate_scope, concurrency, timeout, settle)`},
		{"hook", "https:///hook", `provider "hook": webhook URL has no host (want https://host/path)`},
		{"hook", "https://h.example.test/hook?dedupe=maybe", `provider "hook": dedupe "maybe" is not true or false`},
		{"hook", "https://h.example.test/hook?probe=ftp://x", `provider "hook": probe "ftp://x" is not an http(s) URL without query`},
		{"hook", "https://h.example.test/hook?token=abc", `provider "hook": unknown option "token" for a http provider (known: rate, rate_scope, concurrency, timeout, settle, dedupe, probe, dedupe_window, probe_retention)`},
		{"hook", "https://h.example.test/hook?settle=1m", `provider "hook": settle applies only to a provider that can be probed (maildir, or http with probe=URL)`},
		{"hook", "https://h.example.test/hook?a=%zz", `provider "hook": URL query is not valid: invalid URL escape "%zz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.url, func(t *testing.T) {
			t.Parallel()
			p, err := provider.Parse(tt.name, tt.url)
			if p != nil {
				p.Close()
			}
			require.EqualError(t, err, tt.want)
			require.True(t, errors.Is(err, provider.ErrInvalidProvider))
		})
	}
}

func TestParseNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"smtp://bob:hunter2-secret@mail.example.test:587?rate=ten/s",
		"smtp://bob:hunter2-secret@mail.example.test:587?color=blue",
		"smtp://bob:hunter2-secret@:587",
		"smtp://bob:hunter2-secret%zz@mail.example.test:587",
		"smtp://bob:hunter2-secret@mail.example.test:bad",
		"https://bob:hunter2-secret@h.example.test/hook?probe=https://bob:hunter2-secret@h.example.test/x?y",
		"maildir://bob:hunter2-secret@x/y",
	} {
		_, err := provider.Parse("relay", raw)
		require.Error(t, err, raw)
		require.NotContains(t, err.Error(), "hunter2", raw)
		require.NotContains(t, provider.Redacted(raw), "hunter2", raw)
		_, err = provider.ParseFlag("relay=" + raw)
		require.NotContains(t, err.Error(), "hunter2", raw)
	}
	require.Equal(t, "smtp://bob:xxxxx@h:1", provider.Redacted("smtp://bob:pw@h:1"))
	require.Equal(t, "smtp://bob:xxxxx@h:bad%zz", provider.Redacted("smtp://bob:pw@h:bad%zz"))
	require.Equal(t, "maildir:///x", provider.Redacted("maildir:///x"))
	require.False(t, strings.Contains(provider.Redacted("http://a:b@c/d"), ":b@"))
}

// TestParseBatch: batch=N is taken by the kinds with a batch endpoint,
// within the service's documented limit, and refused, in one sentence,
// by every other kind and for any other value.
func TestParseBatch(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]int{
		"resend://re_key@?batch=1":                    1,
		"resend://re_key@?batch=100&dedupe_window=1h": 100,
		"postmark://tok@?batch=1":                     1,
		"postmark://tok@?batch=500":                   500,
	} {
		p, err := provider.Parse("mail", raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, provider.BatchSizeOf(p), raw)
		require.NoError(t, p.Close())
	}
	for _, tt := range []struct{ url, want string }{
		{"resend://re_key@?batch=0", `provider "mail": batch "0" is not a whole number from 1 to 100 (the most Resend takes in one call)`},
		{"resend://re_key@?batch=101", `provider "mail": batch "101" is not a whole number from 1 to 100 (the most Resend takes in one call)`},
		{"resend://re_key@?batch=ten", `provider "mail": batch "ten" is not a whole number from 1 to 100 (the most Resend takes in one call)`},
		{"resend://re_key@?batch=", `provider "mail": batch "" is not a whole number from 1 to 100 (the most Resend takes in one call)`},
		{"resend://re_key@?batch=2.5", `provider "mail": batch "2.5" is not a whole number from 1 to 100 (the most Resend takes in one call)`},
		{"postmark://tok@?batch=501", `provider "mail": batch "501" is not a whole number from 1 to 500 (the most Postmark takes in one call)`},
		{"postmark://tok@?batch=-1", `provider "mail": batch "-1" is not a whole number from 1 to 500 (the most Postmark takes in one call)`},
		{"resend://re_key@?batch=2&batch=3", `provider "mail": option "batch" is given 2 times`},
		{"smtp://mail.example.test:587?batch=10", `provider "mail": batch applies only to resend and postmark (a smtp provider sends one effect per call)`},
		{"https://h.example.test/hook?dedupe=true&batch=10", `provider "mail": batch applies only to resend and postmark (a http provider sends one effect per call)`},
		{"maildir:///x?batch=10", `provider "mail": batch applies only to resend and postmark (a maildir provider sends one effect per call)`},
	} {
		p, err := provider.Parse("mail", tt.url)
		require.Nil(t, p, tt.url)
		require.EqualError(t, err, tt.want)
		require.ErrorIs(t, err, provider.ErrInvalidProvider)
	}
}
