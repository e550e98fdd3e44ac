package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
)

// parseWorkerFlags parses args as serve and worker parse their worker flags.
func parseWorkerFlags(t *testing.T, args ...string) *workerFlags {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var wf workerFlags
	wf.register(fs)
	require.NoError(t, parse(fs, Env{Stdout: &bytes.Buffer{}}, args))
	return &wf
}

// resolved is the jobs.Config the flags make a runner work with.
func (w *workerFlags) resolved() jobs.Config {
	c := w.opts.Config()
	c.Logger = nil
	return c
}

// TestWorkerFlagDefaultsAreJobs: the flags' defaults are jobs.Config's.
func TestWorkerFlagDefaultsAreJobs(t *testing.T) {
	t.Parallel()
	wf := parseWorkerFlags(t)
	require.NoError(t, wf.check())
	want := jobs.Config{}.WithDefaults()
	want.Logger = nil
	require.Equal(t, want, wf.resolved())
}

// TestWorkerFlagsRescueFollowsJobTimeout keeps a fixed bug fixed: a
// fixed --rescue-after default refused `serve --job-timeout 5m`.
func TestWorkerFlagsRescueFollowsJobTimeout(t *testing.T) {
	t.Parallel()
	wf := parseWorkerFlags(t, "--job-timeout", "5m")
	require.NoError(t, wf.check())
	require.Zero(t, wf.opts.RescueAfter, "unset, so the derived default applies")
	c := wf.resolved()
	require.Equal(t, 5*time.Minute, c.JobTimeout)
	require.Equal(t, 6*time.Minute, c.RescueAfter)

	// Set, it stays; set to 0, it follows again.
	wf = parseWorkerFlags(t, "--job-timeout", "5m", "--rescue-after", "10m")
	require.NoError(t, wf.check())
	require.Equal(t, 10*time.Minute, wf.resolved().RescueAfter)
	wf = parseWorkerFlags(t, "--job-timeout", "5m", "--rescue-after", "0")
	require.NoError(t, wf.check())
	require.Equal(t, 6*time.Minute, wf.resolved().RescueAfter)
}

var workerRefusals = []struct {
	args []string
	msg  string
}{
	{[]string{"--job-timeout", "5m", "--rescue-after", "1m"}, "--rescue-after 1m0s: want more than --job-timeout 5m0s"},
	{[]string{"--rescue-after", "2m"}, "--rescue-after 2m0s: want more than --job-timeout 2m0s"},
	{[]string{"--workers-per-queue", "0"}, "--workers-per-queue 0: want a number from 1 to 10000"},
	{[]string{"--workers-per-queue", "10001"}, "--workers-per-queue 10001: want a number from 1 to 10000"},
	{[]string{"--owner-timeout", "-1s"}, "--owner-timeout -1s: want a positive duration"},
	{[]string{"--owner-timeout", "0"}, "--owner-timeout 0s: want a positive duration"},
	{[]string{"--maintenance-interval", "0"}, "--maintenance-interval 0s: want a positive duration"},
	{[]string{"--job-timeout", "0"}, "--job-timeout 0s: want a positive duration"},
	{[]string{"--owner-timeout", "5ns"}, "the heartbeat interval (--owner-timeout/6) 0s: want a positive duration"},
	{[]string{"--maintenance-interval", "-1s"}, "--maintenance-interval -1s: want a positive duration"},
	{[]string{"--job-timeout", "-1s"}, "--job-timeout -1s: want a positive duration"},
	{[]string{"--rescue-after", "-1s"}, "--rescue-after -1s: want a positive duration"},
}

func TestWorkerFlagsRefuseInTheFlagsNames(t *testing.T) {
	t.Parallel()
	for _, tc := range workerRefusals {
		err := parseWorkerFlags(t, tc.args...).check()
		requireOneLine(t, err)
		require.Equal(t, tc.msg, err.Error(), tc.args)
	}
}

// TestServeAndWorkerRefuseBeforeStarting: an impossible combination stops
// serve and worker before the embedded cluster is created (no
// --database-url, so the next step would create it in the data dir).
func TestServeAndWorkerRefuseBeforeStarting(t *testing.T) {
	t.Parallel()
	for _, cmd := range []struct {
		name string
		run  func(context.Context, Env, []string) error
	}{{"serve", runServe}, {"worker", runWorker}} {
		for _, tc := range workerRefusals {
			dir := filepath.Join(t.TempDir(), "data")
			var stdout, stderr bytes.Buffer
			env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			err := cmd.run(context.Background(), env, append([]string{"--data-dir", dir}, tc.args...))
			requireOneLine(t, err)
			require.Equal(t, tc.msg, err.Error(), cmd.name, tc.args)
			require.NoDirExists(t, dir, "%s %v created its data dir", cmd.name, tc.args)
			require.Empty(t, stdout.String()+stderr.String(), cmd.name, tc.args)
		}
	}
}

// TestServeAndWorkerRunWithALongerJobTimeout: `serve --job-timeout 5m`
// (and worker) start their workers and stop cleanly.
func TestServeAndWorkerRunWithALongerJobTimeout(t *testing.T) {
	t.Parallel()
	for _, cmd := range []struct {
		name  string
		run   func(context.Context, Env, []string) error
		args  []string
		ready string
	}{
		{"serve", runServe, []string{"--listen", "127.0.0.1:0"}, "onceplan is serving"},
		{"worker", runWorker, nil, "onceplan worker is running"},
	} {
		t.Run(cmd.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out lockedBuffer
			env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
			args := append([]string{"--database-url", pgtest.URL(t), "--data-dir", t.TempDir(), "--job-timeout", "5m"}, cmd.args...)
			errc := make(chan error, 1)
			go func() { errc <- cmd.run(ctx, env, args) }()
			deadline := time.After(time.Minute)
			for !strings.Contains(out.String(), cmd.ready) {
				select {
				case err := <-errc:
					t.Fatalf("%s stopped before it was ready: %v\n%s", cmd.name, err, out.String())
				case <-deadline:
					t.Fatalf("%s is not ready after a minute:\n%s", cmd.name, out.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			require.NoError(t, await.Recv(t, errc, time.Minute, cmd.name+" stopping when cancelled"), out.String())
		})
	}
}

// TestDocStatesTheWorkerFlagDefaults: the configuration table of
// docs/guide/operate.md gives the defaults the flags have.
func TestDocStatesTheWorkerFlagDefaults(t *testing.T) {
	t.Parallel()
	const doc = "../../docs/guide/operate.md"
	page, err := os.ReadFile(doc)
	require.NoError(t, err)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var wf workerFlags
	wf.register(fs)
	for _, name := range []string{"owner-timeout", "maintenance-interval", "job-timeout", "rescue-after", "workers-per-queue", "max-attempts", "notify-window"} {
		m := regexp.MustCompile("(?m)^\\| `--" + name + "` \\| \\| (.+?) \\|").FindSubmatch(page)
		require.NotNil(t, m, "%s has no row for --%s", doc, name)
		stated := strings.ReplaceAll(string(m[1]), "`", "")
		f := fs.Lookup(name)
		if name == "rescue-after" {
			require.Equal(t, "0s", f.DefValue, "--rescue-after has no fixed default")
			require.Equal(t, "--job-timeout + "+strings.TrimSuffix(jobs.DefaultRescueMargin.String(), "0s"), stated)
			require.Contains(t, f.Usage, "(default: --job-timeout + "+jobs.DefaultRescueMargin.String()+")")
			continue
		}
		if d, err := time.ParseDuration(stated); err == nil {
			stated = d.String()
		}
		require.Equal(t, f.DefValue, stated, "--%s", name)
	}
}

// lockedBuffer is a bytes.Buffer a command may write while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBothProviderSourcesAreNotSilent: given --provider and
// ONCEPLAN_PROVIDERS at once, the flags win and serve says that the
// environment's providers are ignored, naming them without their URLs
// (which may carry API keys).
func TestBothProviderSourcesAreNotSilent(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", ignoredProviders(nil, "mail=resend://re_secret@api.resend.com"))
	require.Equal(t, "", ignoredProviders([]string{"outbox=maildir:///tmp/o"}, " "))
	msg := ignoredProviders([]string{"outbox=maildir:///tmp/o"}, "mail=resend://re_secret@api.resend.com, pm=postmark://tok@api.postmarkapp.com")
	require.Equal(t, "ONCEPLAN_PROVIDERS is set but --provider was given: the --provider flags (1) are the providers, and ONCEPLAN_PROVIDERS (mail, pm) is ignored; give the providers one way", msg)
	require.NotContains(t, msg, "re_secret")
}
