package notify_test

import (
	"errors"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/provider"
)

const secret = "s3cret-value-of-twenty-four"

// parseOpts are options with two providers, an environment that has one
// secret and a file system that has one secret file.
func parseOpts(t testing.TB) notify.ParseOptions {
	t.Helper()
	var ps []provider.Provider
	for _, item := range []string{"outbox=maildir://" + filepath.Join(t.TempDir(), "outbox"), "relay=smtp://127.0.0.1:2525?tls=none"} {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	return notify.ParseOptions{
		Providers: reg, PublicURL: "https://onceplan.example.com",
		Getenv: func(k string) string {
			if k == "HOOK_SECRET" {
				return secret
			}
			if k == "SHORT" {
				return "short"
			}
			return ""
		},
		ReadFile: func(p string) ([]byte, error) {
			if p == "/run/secrets/hook" {
				return []byte(secret + "\n"), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
	}
}

func TestParseNotifiers(t *testing.T) {
	t.Parallel()
	o := parseOpts(t)
	for _, tc := range []struct {
		item, kind, shown string
		events            []notify.Event
		signed, mails     bool
		timeout           time.Duration
	}{
		{"ops=mailto:?provider=outbox", notify.KindMailto, "ops=mailto:?provider=outbox", notify.Events, false, true, notify.MailTimeout},
		{"ops=mailto:Ops@Example.com,b@example.com?provider=relay&from=Onceplan%20%3Conceplan%40example.com%3E&users=false&events=completed,attention",
			notify.KindMailto, "ops=mailto:ops@example.com,b@example.com?provider=relay&from=Onceplan+%3Conceplan%40example.com%3E&users=false&events=attention,completed",
			[]notify.Event{notify.EventAttention, notify.EventCompleted}, false, false, notify.MailTimeout},
		{"slack=https://hooks.slack.com/services/T000/B000/XXXXSECRET", notify.KindWebhook, "slack=https://hooks.slack.com/services/xxxxx",
			notify.Events, false, false, notify.DefaultWebhookTimeout},
		{"hook=http://127.0.0.1:9/hook?hmac_secret_env=HOOK_SECRET&timeout=2s&events=submitted", notify.KindWebhook,
			"hook=http://127.0.0.1:9/hook?events=submitted&timeout=2s&hmac_secret_env=HOOK_SECRET", []notify.Event{notify.EventSubmitted}, true, false, 2 * time.Second},
		{" file = https://u:pw@example.com/in?hmac_secret_file=%2Frun%2Fsecrets%2Fhook ", notify.KindWebhook,
			"file=https://u:xxxxx@example.com/in?hmac_secret_file=%2Frun%2Fsecrets%2Fhook", notify.Events, true, false, notify.DefaultWebhookTimeout},
	} {
		n, err := notify.ParseFlag(tc.item, o)
		require.NoError(t, err, tc.item)
		require.Equal(t, tc.kind, n.Kind(), tc.item)
		require.Equal(t, tc.shown, n.String(), tc.item)
		require.Equal(t, tc.events, n.Events(), tc.item)
		require.Equal(t, tc.signed, n.Signed(), tc.item)
		require.Equal(t, tc.mails, n.MailsUsers(), tc.item)
		require.Equal(t, tc.timeout, n.Timeout(), tc.item)
		require.NotContains(t, n.String(), secret)
		again, err := notify.ParseFlag(n.String(), o)
		require.NoError(t, err, "%s shows %s, which does not parse", tc.item, n.String())
		require.Equal(t, n.String(), again.String())
	}
}

// TestParseNotifierRefusals: each refusal is one sentence naming the
// notifier (or the flag item) and what is wrong, wrapping ErrInvalid,
// never showing a secret.
func TestParseNotifierRefusals(t *testing.T) {
	t.Parallel()
	o := parseOpts(t)
	for _, tc := range []struct{ item, says string }{
		{"just-a-name", `--notify "just-a-name" is not NAME=URL`},
		{"=mailto:?provider=outbox", "notifier name is empty"},
		{"Ops=mailto:?provider=outbox", `notifier name "Ops" is not valid`},
		{"ops=", `notifier "ops": URL is empty`},
		{"ops=ftp://example.com/x", `notifier "ops": unknown scheme "ftp" (want mailto, https or http)`},
		{"ops=example.com/hook", `notifier "ops": URL example.com/hook has no scheme`},
		{"ops=mailto:ops@example.com", `notifier "ops": a mailto: notifier needs provider=NAME, a configured --provider to send through (configured: outbox, relay)`},
		{"ops=mailto:?provider=postmark", `notifier "ops": provider "postmark" is not configured (configured: outbox, relay)`},
		{"ops=mailto:not-an-address?provider=outbox", `notifier "ops": "not-an-address" is not an email address`},
		{"ops=mailto:?provider=outbox&users=false", `notifier "ops": users=false and no address: it would mail nobody`},
		{"ops=mailto:?provider=outbox&users=maybe", `notifier "ops": users "maybe" is not true or false`},
		{"ops=mailto:?provider=outbox&from=nobody", `notifier "ops": from "nobody" is not an email address`},
		{"ops=mailto:?provider=outbox&events=submitted,sent", `notifier "ops": events: "sent" is not an event (submitted, approved, rejected, attention, completed)`},
		{"ops=mailto:?provider=outbox&timeout=5s", `notifier "ops": unknown option "timeout" for a mailto notifier (known: provider, from, users, events)`},
		{"ops=mailto:?provider=outbox&provider=relay", `notifier "ops": option "provider" is given 2 times`},
		{"ops=mailto://example.com?provider=outbox", `notifier "ops": write mailto:ADDRESS?provider=NAME, without // or a path`},
		{"hook=http://example.com/hook", `notifier "hook": plain http:// is only for a loopback host (127.0.0.1, ::1, localhost): use https://`},
		{"hook=https:///hook", `notifier "hook": URL https:///hook has no host`},
		{"hook=https://example.com/hook#frag", `notifier "hook": a notifier URL takes no #fragment`},
		{"hook=https://example.com/hook?token=abc", `notifier "hook": unknown option "token" for a webhook notifier (known: events, timeout, hmac_secret_env, hmac_secret_file)`},
		{"hook=https://example.com/hook?timeout=1h", `notifier "hook": timeout "1h" is not a duration from 1ms to 5m0s, like 10s`},
		{"hook=https://example.com/hook?hmac_secret_env=NOPE", `notifier "hook": hmac_secret_env names NOPE, which is not set or empty`},
		{"hook=https://example.com/hook?hmac_secret_env=SHORT", `notifier "hook": the secret in SHORT is shorter than 16 characters`},
		{"hook=https://example.com/hook?hmac_secret_env=a-b", `notifier "hook": hmac_secret_env "a-b" is not an environment variable name`},
		{"hook=https://example.com/hook?hmac_secret_file=/nope", `notifier "hook": hmac_secret_file "/nope" cannot be read (file does not exist)`},
		{"hook=https://example.com/hook?hmac_secret_env=HOOK_SECRET&hmac_secret_file=/run/secrets/hook", `notifier "hook": give hmac_secret_env or hmac_secret_file, not both`},
		{"hook=https://u:hunter2@exa mple.com/", `notifier "hook": URL https://u:xxxxx@exa mple.com/ is not valid`},
	} {
		n, err := notify.ParseFlag(tc.item, o)
		require.Nil(t, n, tc.item)
		require.ErrorIs(t, err, notify.ErrInvalidNotifier, tc.item)
		require.Contains(t, err.Error(), tc.says, tc.item)
		require.NotContains(t, err.Error(), "\n", tc.item)
		require.NotContains(t, err.Error(), secret, tc.item)
		require.NotContains(t, err.Error(), "hunter2", tc.item)
	}

	// Two notifiers with one name.
	_, err := notify.ParseList([]string{"ops=mailto:?provider=outbox", "ops=https://example.com/hook"}, o)
	require.ErrorIs(t, err, notify.ErrInvalidNotifier)
	require.EqualError(t, err, `notifier "ops" is configured twice`)
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"ops=mailto:a@example.com,b@example.com?provider=outbox&events=attention,completed",
		"hook=https://example.com/hook",
	}, notify.SplitList(" ops=mailto:a@example.com,b@example.com?provider=outbox&events=attention,completed , ,hook=https://example.com/hook"))
	require.Empty(t, notify.SplitList(" "))
}

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"text":"hello"}`)
	now := time.Unix(1_700_000_000, 0)
	sig := notify.Sign([]byte(secret), now.Unix(), body)
	require.Regexp(t, `^v1=[0-9a-f]{64}$`, sig)
	require.NoError(t, notify.Verify([]byte(secret), "1700000000", sig, body, now.Add(time.Minute), 5*time.Minute))
	for _, bad := range []struct{ ts, sig, body string }{
		{"1700000000", sig, `{"text":"hellO"}`},
		{"1700000001", sig, string(body)},
		{"yesterday", sig, string(body)},
		{"1700000000", "v1=" + strings.Repeat("0", 64), string(body)},
	} {
		require.True(t, errors.Is(notify.Verify([]byte(secret), bad.ts, bad.sig, []byte(bad.body), now, 5*time.Minute), notify.ErrBadSignature))
	}
	require.ErrorIs(t, notify.Verify([]byte(secret), "1700000000", sig, body, now.Add(time.Hour), 5*time.Minute), notify.ErrBadSignature)
}

// FuzzParseFlag: whatever --notify is given, it parses or is refused
// with one line wrapping ErrInvalid; neither the error nor an accepted
// notifier's String() shows a password or the HMAC secret; String()
// names the notifier and parses again as the same notifier.
func FuzzParseFlag(f *testing.F) {
	for _, seed := range []string{
		"ops=mailto:?provider=outbox",
		"ops=mailto:a@example.com,b@example.com?provider=relay&from=x%40example.com&users=false&events=attention",
		"hook=https://hooks.slack.com/services/T0/B0/SECRET?timeout=3s",
		"hook=http://127.0.0.1:8080/in?hmac_secret_env=HOOK_SECRET&events=submitted,completed",
		"hook=https://u:pw@example.com/x?hmac_secret_file=%2Frun%2Fsecrets%2Fhook",
		"bad=mailto:?provider=nope",
	} {
		f.Add(seed)
	}
	o := parseOpts(f)
	f.Fuzz(func(t *testing.T, item string) {
		n, err := notify.ParseFlag(item, o)
		if err != nil {
			require.Nil(t, n)
			require.ErrorIs(t, err, notify.ErrInvalidNotifier)
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), secret)
			return
		}
		name, _, _ := strings.Cut(strings.TrimSpace(item), "=")
		require.Equal(t, strings.TrimSpace(name), n.Name())
		require.True(t, strings.HasPrefix(n.String(), n.Name()+"="))
		require.NotContains(t, n.String(), secret)
		again, err := notify.ParseFlag(n.String(), o)
		require.NoError(t, err, "%q shows %q, which does not parse", item, n.String())
		require.Equal(t, n.String(), again.String())
		require.Equal(t, n.Kind(), again.Kind())
		require.Equal(t, n.Events(), again.Events())
		require.Equal(t, n.Signed(), again.Signed())
		require.Equal(t, n.Timeout(), again.Timeout())
	})
}

// FuzzWebhookPasswordNeverShown builds webhook URLs around fuzzed
// credentials: whatever they are, the notifier (or the error) reads the
// same as with another password, so nothing of it is shown.
func FuzzWebhookPasswordNeverShown(f *testing.F) {
	f.Add("user", "hunter2", "/hook")
	f.Add("", "p@ss:w/rd", "/services/a/b")
	f.Add("u", "%zz", "?timeout=1s")
	o := parseOpts(f)
	f.Fuzz(func(t *testing.T, user, pass, rest string) {
		build := func(pass string) string {
			return "hook=https://" + url.UserPassword(user, pass).String() + "@example.com" + rest
		}
		shownWith := func(pass string) string {
			n, err := notify.ParseFlag(build(pass), o)
			if err != nil {
				return "error: " + err.Error()
			}
			return n.String()
		}
		require.Equal(t, shownWith("another-password"), shownWith(pass))
	})
}
