package main

// End-to-end tests of the built binary on the embedded default: the
// operator's `make run`, a kill -9, and `make run` again.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "onceplan-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "onceplan")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building onceplan: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// dataDir returns a fresh data dir the postgres account can reach.
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "onceplan-e2e-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() {
		// Stop whatever cluster a killed server left behind.
		pg := filepath.Join(dir, "data", "pg")
		if _, err := os.Stat(filepath.Join(pg, "postmaster.pid")); err == nil {
			stop := exec.Command(binary, "migrate", "--data-dir", filepath.Join(dir, "data"))
			stop.Run() // joins and, as the last user, stops it
		}
		os.RemoveAll(dir)
	})
	return filepath.Join(dir, "data")
}

type server struct {
	cmd  *exec.Cmd
	addr string
	logs *strings.Builder
}

var servingRE = regexp.MustCompile(`"url":"http://([^"]+)"`)

// serve starts `onceplan serve` and waits until it says where it listens.
func serve(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, logs: &strings.Builder{}}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.logs.WriteString(sc.Text() + "\n")
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		require.True(t, ok, "serve exited before listening:\n%s", s.logs)
		s.addr = addr
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve did not start:\n%s", s.logs)
	}
	return s
}

func (s *server) healthz(t *testing.T) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%v", body)
	return body
}

func socketURL(dir string) string {
	return "postgres://onceplan@/onceplan?host=" + strings.ReplaceAll(filepath.Join(dir, "pg"), "/", "%2F") + "&sslmode=disable"
}

func TestServeSurvivesKill9OnTheSameData(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()

	s := serve(t, dir)
	require.Equal(t, "ok", s.healthz(t)["database"])

	// Something worth keeping: a user row.
	conn, err := pgx.Connect(ctx, socketURL(dir))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO app_user (email) VALUES ('kept@example.com')`)
	require.NoError(t, err)
	conn.Close(ctx)

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
	s.cmd.Wait()

	// The operator runs it again: no manual step.
	s2 := serve(t, dir)
	require.Equal(t, "ok", s2.healthz(t)["status"])
	conn, err = pgx.Connect(ctx, socketURL(dir))
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM app_user WHERE email = 'kept@example.com'`).Scan(&n))
	conn.Close(ctx)
	require.Equal(t, 1, n)

	// A clean stop stops the cluster too.
	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s2.cmd.Wait(), s2.logs.String())
	require.NoFileExists(t, filepath.Join(dir, "pg", "postmaster.pid"))
}

func TestServeExplainsBadInputInOneSentence(t *testing.T) {
	t.Parallel()

	t.Run("PortInUse", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		dir := dataDir(t)
		out, err := exec.Command(binary, "serve", "--data-dir", dir, "--listen", ln.Addr().String()).CombinedOutput()
		require.Error(t, err)
		last := lastLine(string(out))
		require.Equal(t, "onceplan: cannot listen on "+ln.Addr().String()+": the address is already in use (is another onceplan serve running?); choose another with --listen", last)
		require.NoFileExists(t, filepath.Join(dir, "pg", "postmaster.pid"), "the cluster it started is stopped again")
	})

	t.Run("NoServerBinaries", func(t *testing.T) {
		t.Parallel()
		empty := t.TempDir()
		cmd := exec.Command(binary, "serve", "--data-dir", dataDir(t), "--listen", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "ONCEPLAN_PG_BINDIR="+empty, "DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		last := lastLine(string(out))
		require.True(t, strings.HasPrefix(last, "onceplan: "), last)
		require.Contains(t, last, "apt-get install postgresql")
		require.NotContains(t, string(out), "goroutine ", "never a stack trace")
	})

	t.Run("UnknownFlag", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command(binary, "serve", "--nope", "x").CombinedOutput()
		require.Error(t, err)
		require.Equal(t, "onceplan: serve: flag provided but not defined: -nope (see `onceplan serve --help`)", lastLine(string(out)))
	})

	t.Run("WorkersPerQueue", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"worker"}} {
			args := append(cmd, "--data-dir", dataDir(t), "--workers-per-queue", "0")
			out, err := exec.Command(binary, args...).CombinedOutput()
			require.Error(t, err)
			require.Equal(t, "onceplan: --workers-per-queue 0: want a number from 1 to 10000", lastLine(string(out)), cmd)
		}
	})

	t.Run("BadDatabaseURL", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command(binary, "serve", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "--listen", "127.0.0.1:0").CombinedOutput()
		require.Error(t, err)
		last := lastLine(string(out))
		require.Contains(t, last, "onceplan: cannot connect to the database at postgres://nobody@127.0.0.1:1/x")
	})
}

// TestAuditExitStatus: a script running `onceplan audit` tells "does not
// hold" (1) from "could not tell" (2) by the exit status alone.
func TestAuditExitStatus(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"audit", "Spring", "--bogus"},
		{"audit", "Spring", "--database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"},
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", args, out)
		require.Equal(t, 2, ee.ExitCode(), "%v: %s", args, out)
		require.True(t, strings.HasPrefix(lastLine(string(out)), "onceplan: audit: "), "%v: %s", args, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
