package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
)

// TestPublicURLRefusedBeforeStarting: serve and worker refuse a
// --public-url that is not an absolute http(s) URL, in one sentence,
// before anything starts.
func TestPublicURLRefusedBeforeStarting(t *testing.T) {
	t.Parallel()
	for _, cmd := range []struct {
		name string
		run  func(context.Context, Env, []string) error
	}{{"serve", runServe}, {"worker", runWorker}} {
		for _, bad := range []string{"onceplan.example.com", "ftp://onceplan.example.com", "https://onceplan.example.com/?x=1"} {
			dir := filepath.Join(t.TempDir(), "data")
			var stdout, stderr bytes.Buffer
			env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			err := cmd.run(context.Background(), env, []string{"--data-dir", dir, "--public-url", bad})
			requireOneLine(t, err)
			require.Contains(t, err.Error(), `--public-url "`+bad+`"`, cmd.name)
			require.NoDirExists(t, dir, "%s %s created its data dir", cmd.name, bad)
			require.Empty(t, stdout.String()+stderr.String(), cmd.name)
		}
	}
}

// TestServePublicURLDefaultsToTheBoundAddress: without --public-url,
// serve's links point at the address it actually bound (--listen with
// port 0 included); with it, at the URL given.
func TestServePublicURLDefaultsToTheBoundAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want func(url string) string
	}{
		{nil, func(url string) string { return url }},
		{[]string{"--public-url", "https://mail.example.com/onceplan/"}, func(string) string { return "https://mail.example.com/onceplan" }},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var out lockedBuffer
		env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		args := append([]string{"--database-url", pgtest.URL(t), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		errc := make(chan error, 1)
		go func() { errc <- runServe(ctx, env, args) }()
		re := regexp.MustCompile(`"msg":"onceplan is serving","url":"([^"]+)","public_url":"([^"]+)"`)
		deadline := time.Now().Add(time.Minute)
		var m []string
		for m == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			m = re.FindStringSubmatch(out.String())
		}
		require.NotNil(t, m, out.String())
		require.NotContains(t, m[1], ":0")
		require.Equal(t, tc.want(m[1]), m[2])
		cancel()
		require.NoError(t, await.Recv(t, errc, time.Minute, "serve stopping when cancelled"), out.String())
	}
}
