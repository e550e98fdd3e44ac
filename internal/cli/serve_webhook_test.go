package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeWebhookFlagRefusedBeforeStarting: a --webhook (or
// ONCEPLAN_WEBHOOKS) serve cannot use is refused in one sentence naming
// the flag, before anything starts, and the secret is not in it.
func TestServeWebhookFlagRefusedBeforeStarting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  string
		says string
	}{
		{[]string{"--webhook", "sparkpost=secret-value-1234567"}, "", "KIND one of ses, postmark, sendgrid, mailgun, generic"},
		{[]string{"--webhook", "postmark=secret-value-1234567"}, "", "USER:PASSWORD"},
		{[]string{"--webhook", "mailgun=secret-value-1234567", "--webhook", "mailgun=secret-value-1234567"}, "", "twice"},
		{nil, "generic=short-secret", "ONCEPLAN_WEBHOOKS"},
		// Without topics, any AWS account's topic could post bounces.
		{[]string{"--webhook", "ses="}, "", "ses=arn:aws:sns:"},
		{nil, "ses=", "any AWS account"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		var stdout, stderr bytes.Buffer
		env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "ONCEPLAN_WEBHOOKS" {
				return tc.env
			}
			return ""
		}}
		err := runServe(context.Background(), env, append([]string{"--data-dir", dir}, tc.args...))
		requireOneLine(t, err)
		require.Contains(t, err.Error(), tc.says)
		require.NotContains(t, err.Error(), "secret-value")
		require.NotContains(t, err.Error(), "short-secret")
		require.NoDirExists(t, dir)
		require.Empty(t, stdout.String()+stderr.String())
	}
}
