package provider_test

// Fuzz targets for the provider's parsers of outside input
// (docs/RELIABILITY.md, "Hostile and broken input"): the --provider URL and
// the SMTP raw answer. The webhook answer has its own (FuzzClassifyWebhook,
// FuzzClassifyWebhookRaw in webhook_test.go); saved seeds are under
// testdata/fuzz/<FuzzName>/.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// secrets are the userinfo segments ("user:pass") of rawURL and of a URL
// given as its probe option: what String() and errors must never repeat.
func secrets(rawURL string) []string {
	var out []string
	// A URL refused for a control character still has its secrets.
	u, err := url.Parse(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, rawURL))
	if err != nil {
		return nil
	}
	if _, ok := u.User.Password(); ok {
		out = append(out, u.User.String()+"@")
	}
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for _, v := range q["probe"] {
			if p, err := url.Parse(strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return -1
				}
				return r
			}, v)); err == nil {
				if _, ok := p.User.Password(); ok {
					out = append(out, p.User.String()+"@")
				}
			}
		}
	}
	return out
}

// requireNoSecret fails when shown repeats a secret of raw more often than
// raw does outside the place it is a secret (a path may spell "u:p@" by
// chance).
func requireNoSecret(t *testing.T, raw, shown string) {
	t.Helper()
	for _, s := range secrets(raw) {
		if strings.HasSuffix(s, ":xxxxx@") {
			continue // the redaction marker itself
		}
		// The secret as written, and as a query value (a probe URL).
		for _, form := range []string{s, url.QueryEscape(s)} {
			allowed := max(strings.Count(raw, form)-1, 0)
			require.LessOrEqual(t, strings.Count(shown, form), allowed, "%q shows the secret %q of %q", shown, form, raw)
		}
	}
}

// TestRefusedURLNeverShowsAPassword: a URL that does not parse (a control
// character) is quoted in the error with every password hidden — in the
// authority, with or without a scheme, and in an escaped probe= value
// (found by FuzzParseFlag).
func TestRefusedURLNeverShowsAPassword(t *testing.T) {
	for _, flag := range []string{
		"p=A0?probe=%2F%2Fu%3Asekrit%40h\x13",
		"p=//u:sekrit@h\x13",
		"p=http://h/x?probe=%2F%2Fu%3Asekrit%40h%ZZ\x13",
	} {
		_, err := provider.ParseFlag(flag)
		require.Error(t, err, flag)
		require.NotContains(t, err.Error(), "sekrit", flag)
	}
}

// FuzzParseFlag: any --provider value either makes a provider or is refused
// with one line wrapping ErrInvalid; neither the error nor an accepted
// provider's String() shows a password; String() names the provider and
// parses again as the same kind of provider.
func FuzzParseFlag(f *testing.F) {
	f.Fuzz(func(t *testing.T, flag string) {
		p, err := provider.ParseFlag(flag)
		_, rawURL, _ := strings.Cut(strings.TrimSpace(flag), "=")
		rawURL = strings.TrimSpace(rawURL)
		if err != nil {
			require.Nil(t, p)
			require.ErrorIs(t, err, provider.ErrInvalidProvider)
			require.NotContains(t, err.Error(), "\n")
			requireNoSecret(t, rawURL, err.Error())
			return
		}
		defer p.Close()
		shown := p.String()
		name, _, _ := strings.Cut(strings.TrimSpace(flag), "=")
		require.True(t, strings.HasPrefix(shown, strings.TrimSpace(name)+"="), shown)
		require.Equal(t, strings.TrimSpace(name), p.Name())
		require.Contains(t, []string{"maildir", "smtp", "http", "postmark", "resend"}, p.Kind())
		requireNoSecret(t, rawURL, shown)

		// What String() shows is a valid configuration of the same kind
		// (with the password replaced).
		again, err := provider.ParseFlag(shown)
		require.NoError(t, err, "%q shows %q, which does not parse", flag, shown)
		defer again.Close()
		require.Equal(t, p.Kind(), again.Kind())
		require.Equal(t, p.Capabilities(), again.Capabilities())
		require.Equal(t, shown, again.String())
	})
}

// FuzzProviderPasswordNeverShown builds provider URLs around fuzzed
// credentials: whatever they are, the provider (or the error) reads the
// same as with other credentials, so nothing of them is shown.
func FuzzProviderPasswordNeverShown(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind uint8, user, pass, probePass, rest string) {
		build := func(pass, probePass string) string {
			userinfo := url.UserPassword(user, pass).String()
			switch kind % 3 {
			case 0:
				return "smtp://" + userinfo + "@mail.example.test:587" + rest
			case 1:
				probe := "https://" + url.UserPassword(user, probePass).String() + "@h.example.test/effects"
				return "https://" + userinfo + "@h.example.test/hook?probe=" + url.QueryEscape(probe) + rest
			default:
				return "https://" + userinfo + "@h.example.test/hook" + rest
			}
		}
		show := func(raw string) string {
			p, err := provider.Parse("relay", raw)
			if err != nil {
				return "error: " + err.Error()
			}
			defer p.Close()
			return p.String()
		}
		require.Equal(t, show(build("other-password", "other-probe-password")), show(build(pass, probePass)))
		require.Equal(t, provider.Redacted(build("other-password", "other-probe-password")), provider.Redacted(build(pass, probePass)))
	})
}

// smtpLine writes an SMTP raw answer the way the provider does: bare
// tokens, else Go-quoted values.
func smtpLine(fields ...[2]string) []byte {
	var b strings.Builder
	b.WriteString("smtp")
	for _, f := range fields {
		v := f[1]
		bare := v != ""
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '=' || c == '\\' {
				bare = false
			}
		}
		if !bare {
			v = strconv.Quote(v)
		}
		b.WriteString(" " + f[0] + "=" + v)
	}
	return []byte(b.String())
}

var smtpStages = []string{"build", "dial", "mail", "rcpt", "data", "data-write", "data-close"}

// FuzzClassifySMTP frames an SMTP answer from its parts and checks the
// verdict against the documented meaning (ClassifySMTP's doc comment).
func FuzzClassifySMTP(f *testing.F) {
	f.Fuzz(func(t *testing.T, stageIndex uint8, stage string, code int, reply, errText string) {
		if int(stageIndex) < len(smtpStages) {
			stage = smtpStages[stageIndex]
		}
		fields := [][2]string{{"stage", stage}}
		if code != 0 {
			fields = append(fields, [2]string{"code", strconv.Itoa(code)}, [2]string{"reply", reply})
		}
		if errText != "" {
			fields = append(fields, [2]string{"error", errText})
		}
		raw := smtpLine(fields...)
		v := provider.ClassifySMTP(raw)
		require.Equal(t, v, provider.ClassifySMTP(raw), "deterministic")
		requireSaneVerdict(t, v)

		if code >= 100 && code <= 599 {
			switch {
			case code/100 == 2 && stage == "data-close":
				require.Equal(t, provider.OutcomeDone, v.Outcome)
				return
			case code == 421 || code == 451 || code == 452:
				require.Equal(t, provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: time.Minute, Reason: v.Reason}, v)
				require.True(t, strings.HasPrefix(v.Reason, fmt.Sprintf("the server answered %d", code)), v.Reason)
				return
			case code/100 == 4:
				require.Equal(t, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: v.Reason}, v)
				return
			case code/100 == 5:
				require.Equal(t, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: v.Reason}, v)
				return
			}
		}
		// No reply a client stops at: the stage decides.
		switch stage {
		case "build":
			require.Equal(t, provider.OutcomeFailed, v.Outcome)
			require.False(t, v.Retryable)
		case "dial", "mail", "rcpt", "data":
			require.Equal(t, provider.OutcomeFailed, v.Outcome)
			require.True(t, v.Retryable, "the message had not left")
		default:
			require.Equal(t, provider.OutcomeUnknown, v.Outcome, "the server may have the message")
		}
	})
}

// FuzzClassifySMTPRaw feeds arbitrary bytes (a corrupted or foreign
// recorded answer) to the classifier: no panic, the same verdict every
// time, a sane verdict, and only an SMTP answer can settle an effect.
func FuzzClassifySMTPRaw(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := provider.ClassifySMTP(raw)
		require.Equal(t, v, provider.ClassifySMTP(raw), "deterministic")
		requireSaneVerdict(t, v)
		if !strings.HasPrefix(string(raw), "smtp ") {
			require.Equal(t, provider.OutcomeUnknown, v.Outcome)
		}
		if v.Outcome == provider.OutcomeDone {
			require.Contains(t, string(raw), "data-close", "done only at the end of DATA")
		}
	})
}
