package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
)

// helperDirEnv tells a re-executed test binary to act as a onceplan process that uses
// the cluster in that directory until it is killed.
const helperDirEnv = "PGCLUSTER_TEST_HELPER_DIR"

// testDir returns a fresh directory under os.TempDir that the PostgreSQL account can
// enter, removed when the test ends (after the clusters in it are stopped).
func testDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pgcluster-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(d, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func testOptions(dir string) Options {
	return Options{
		Dir: dir,
		Settings: map[string]string{
			"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
			"shared_buffers": "16MB", "max_connections": "20",
		},
	}
}

// open opens the cluster in dir and makes sure the test leaves no server running,
// whatever happens to the test.
func open(t *testing.T, dir string) *Cluster {
	t.Helper()
	return openWith(t, testOptions(dir))
}

func openWith(t *testing.T, opts Options) *Cluster {
	t.Helper()
	t.Cleanup(func() { forceStop(t, opts.Dir) })
	c, err := Open(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// forceStop stops any server still running on dir, ignoring the locks.
func forceStop(t *testing.T, dir string) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	pids := postgresProcsOn(real)
	if len(pids) == 0 {
		return
	}
	t.Logf("stopping leftover PostgreSQL processes %v on %s", pids, real)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	await.Until(t, time.Minute, "every postgres process of the cluster gone", func() bool { return len(postgresProcsOn(real)) == 0 })
}

func connect(t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL(""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, c *Cluster, sql string, args ...any) {
	t.Helper()
	conn := connect(t, c)
	_, err := conn.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))
}

func queryString(t *testing.T, c *Cluster, sql string) string {
	t.Helper()
	conn := connect(t, c)
	var s string
	require.NoError(t, conn.QueryRow(t.Context(), sql).Scan(&s))
	require.NoError(t, conn.Close(t.Context()))
	return s
}

func postmasterPid(t *testing.T, dir string) int {
	t.Helper()
	pf, ok, err := readPidFile(filepath.Join(dir, "postmaster.pid"))
	require.NoError(t, err)
	require.True(t, ok, "no postmaster.pid in %s", dir)
	return pf.pid
}

func requireGone(t *testing.T, pid int) {
	t.Helper()
	await.Until(t, time.Minute, fmt.Sprintf("postmaster %d ending", pid), func() bool { return !processAlive(pid) })
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create directories owned by other accounts")
	}
}

func TestOpenCloseKeepsData(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "data", "pg")

	c := open(t, dir)
	require.True(t, c.Started())
	require.Equal(t, dir, c.Dir())
	require.True(t, hasServerBinaries(c.BinDir()))
	require.Equal(t, "postgres://onceplan@/onceplan?host="+strings.ReplaceAll(dir, "/", "%2F")+"&sslmode=disable", c.URL(""))
	require.Contains(t, c.URL("other"), "@/other?")
	require.Equal(t, "onceplan", queryString(t, c, "SELECT current_database()"))
	require.Equal(t, "UTF8", queryString(t, c, "SHOW server_encoding"))
	require.Equal(t, "", queryString(t, c, "SHOW listen_addresses"))
	require.Equal(t, "off", queryString(t, c, "SHOW fsync"), "Options.Settings apply")
	exec1(t, c, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives restarts')")
	pid := postmasterPid(t, dir)

	require.NoError(t, c.Close(t.Context()))
	require.NoError(t, c.Close(t.Context()), "Close twice")
	requireGone(t, pid)

	c = open(t, dir)
	require.True(t, c.Started())
	require.Equal(t, "survives restarts", queryString(t, c, "SELECT v FROM kept"))
	require.NoError(t, c.Close(t.Context()))
}

func TestSharedUseLastCloseStops(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")

	a := open(t, dir)
	b := open(t, dir)
	require.True(t, a.Started())
	require.False(t, b.Started(), "the second Open joins the running server")
	pid := postmasterPid(t, dir)

	require.NoError(t, a.Close(t.Context()))
	require.True(t, processAlive(pid), "first Close must not stop the server b still uses")
	require.Equal(t, "onceplan", queryString(t, b, "SELECT current_database()"))

	require.NoError(t, b.Close(t.Context()))
	requireGone(t, pid)
}

// TestHelperProcess is not a real test: TestSurvivesCallerSIGKILL runs the test binary
// again with helperDirEnv set, and this then plays a onceplan process that uses the
// cluster until it is SIGKILLed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process for TestSurvivesCallerSIGKILL")
	}
	ctx := context.Background()
	c, err := Open(ctx, testOptions(dir))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	conn, err := pgx.Connect(ctx, c.URL(""))
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE TABLE marker (v text); INSERT INTO marker VALUES ('from the killed process')")
		_ = conn.Close(ctx)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	time.Sleep(5 * time.Minute)
	os.Exit(3)
}

func TestSurvivesCallerSIGKILL(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	t.Cleanup(func() { forceStop(t, dir) })

	child := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	child.Env = append(os.Environ(), helperDirEnv+"="+dir)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	waitReady := func() {
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "helper exited before it was ready")
				require.NotContains(t, l, "error:")
				if l == "ready" {
					return
				}
			case <-time.After(60 * time.Second):
				t.Fatal("helper process did not get ready")
			}
		}
	}
	waitReady()
	pid := postmasterPid(t, dir)

	// While the helper uses the cluster, another user's Close leaves it running.
	other, err := Open(t.Context(), testOptions(dir))
	require.NoError(t, err)
	require.False(t, other.Started())
	require.NoError(t, other.Close(t.Context()))
	require.True(t, processAlive(pid))

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	for range lines { // drain; the scanner ends with the pipe
	}
	require.True(t, processAlive(pid), "the postmaster must outlive the SIGKILLed process that started it")

	c := open(t, dir)
	require.False(t, c.Started(), "adopts the orphaned postmaster")
	require.Equal(t, pid, postmasterPid(t, dir))
	require.Equal(t, "from the killed process", queryString(t, c, "SELECT v FROM marker"))
	require.NoError(t, c.Close(t.Context()))
	requireGone(t, pid)
}

func TestRestartsAfterPostmasterKilled(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	// A commit must reach the WAL before it returns for a crash of PostgreSQL alone to
	// keep it (fsync=off still survives that: the kernel has the data).
	opts := testOptions(dir)
	opts.Settings["synchronous_commit"] = "on"

	c := openWith(t, opts)
	exec1(t, c, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('recovered')")
	idle := connect(t, c) // a backend still attached when the postmaster dies
	pid := postmasterPid(t, dir)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	requireGone(t, pid)
	require.NoError(t, c.Close(t.Context()), "closing a cluster whose server died")
	_ = idle.Close(context.Background())

	c = openWith(t, opts)
	require.True(t, c.Started(), "restarts over the stale postmaster.pid")
	require.NotEqual(t, pid, postmasterPid(t, dir))
	require.Equal(t, "recovered", queryString(t, c, "SELECT v FROM kept"))
	require.NoError(t, c.Close(t.Context()))

	// After a reboot the pid in a stale postmaster.pid may belong to another program
	// of the same account, which PostgreSQL would take for a running postmaster.
	acct, err := runAccount()
	require.NoError(t, err)
	sleeper := acct.command(context.Background(), "/bin/sleep", "60")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pidPath := filepath.Join(dir, "postmaster.pid")
	require.NoError(t, os.WriteFile(pidPath, fmt.Appendf(nil, "%d\n%s\n", sleeper.Process.Pid, dir), 0o600))
	require.NoError(t, acct.chown(pidPath))

	c = openWith(t, opts)
	require.True(t, c.Started())
	require.Equal(t, "recovered", queryString(t, c, "SELECT v FROM kept"))
	require.NoError(t, c.Close(t.Context()))
}

func TestConcurrentOpens(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	t.Cleanup(func() { forceStop(t, dir) })

	const n = 4
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { clusters[i], errs[i] = Open(t.Context(), testOptions(dir)) })
	}
	await.Group(t, &wg, time.Minute, "the 4 concurrent Opens to return")
	started := 0
	for i := range n {
		require.NoError(t, errs[i])
		if clusters[i].Started() {
			started++
		}
	}
	require.Equal(t, 1, started, "exactly one Open starts the server")
	pid := postmasterPid(t, dir)
	for i := range n {
		wg.Go(func() { errs[i] = clusters[i].Close(t.Context()) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
	}
	requireGone(t, pid)
}

func TestCorruptPidFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	pidPath := filepath.Join(dir, "postmaster.pid")

	c := open(t, dir)
	exec1(t, c, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('intact')")

	// Corrupt while the server runs: the error says a server is still running.
	good, err := os.ReadFile(pidPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pidPath, []byte("garbage\n"), 0o600))
	_, err = Open(t.Context(), testOptions(dir))
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), pidPath+" is corrupt")
	require.Contains(t, err.Error(), "still running on "+dir)
	require.NoError(t, os.WriteFile(pidPath, good, 0o600))
	require.NoError(t, c.Close(t.Context()))
	require.NoFileExists(t, pidPath)

	// Corrupt with no server: refused, file left alone.
	require.NoError(t, os.WriteFile(pidPath, []byte("garbage\n"), 0o600))
	_, err = Open(t.Context(), testOptions(dir))
	require.Error(t, err)
	t.Log(err)
	require.Equal(t, pidPath+` is corrupt (its first line is "garbage", not a process id); if no PostgreSQL is running on `+dir+", remove that file and start again", err.Error())
	data, err := os.ReadFile(pidPath)
	require.NoError(t, err)
	require.Equal(t, "garbage\n", string(data))

	require.NoError(t, os.Remove(pidPath))
	c = open(t, dir)
	require.Equal(t, "intact", queryString(t, c, "SELECT v FROM kept"))
	require.NoError(t, c.Close(t.Context()))
}

func TestDirOwnedByAnotherAccount(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chown(dir, 65534, 65534))

	_, err := Open(t.Context(), testOptions(dir))
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), dir+" is owned by nobody (uid 65534)")
	require.Contains(t, err.Error(), "chown -R")

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, 65534, ownerUID(fi), "ownership left alone")
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestDirTheAccountCannotEnter(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	secret := filepath.Join(testDir(t), "secret")
	require.NoError(t, os.Mkdir(secret, 0o700))

	_, err := Open(t.Context(), testOptions(filepath.Join(secret, "data", "pg")))
	require.Error(t, err)
	t.Log(err)
	require.Equal(t, `PostgreSQL runs as "postgres", which cannot enter `+secret+" (mode 0700): choose a --data-dir that account can reach, e.g. /var/lib/onceplan", err.Error())
	require.NoDirExists(t, filepath.Join(secret, "data"), "nothing created")
}

func TestMissingServerBinaries(t *testing.T) {
	t.Parallel()
	empty := testDir(t)
	opts := testOptions(filepath.Join(testDir(t), "pg"))
	opts.BinDir = empty

	_, err := Open(t.Context(), opts)
	require.ErrorIs(t, err, ErrNoServerBinaries)
	t.Log(err)
	require.Contains(t, err.Error(), "are not all in "+empty)
	require.Contains(t, err.Error(), "apt-get install postgresql")
	require.Contains(t, err.Error(), "--database-url")
	var e *Error
	require.ErrorAs(t, err, &e)
}

func TestRefusesNonPostgresDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))

	_, err := Open(t.Context(), testOptions(dir))
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), dir+" is not empty and is not a PostgreSQL data directory")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
}

func TestRefusesOtherMajorVersion(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), "pg")
	acct, err := runAccount()
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("9.6\n"), 0o600))
	require.NoError(t, acct.chown(dir))
	binDir, err := findBinDir(t.Context(), "")
	require.NoError(t, err)
	major, err := serverMajor(t.Context(), binDir)
	require.NoError(t, err)

	_, err = Open(t.Context(), testOptions(dir))
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), dir+" holds a PostgreSQL 9.6 cluster, but the server binaries in "+binDir+" are PostgreSQL "+major)
}

func TestLongPathUsesSocketDirUnderTmp(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testDir(t), strings.Repeat("long-directory-name-", 5), "pg")
	require.Greater(t, len(dir+"/"+socketName), maxSocketPath)
	sock := socketDirFor(dir)
	require.True(t, strings.HasPrefix(sock, "/tmp/onceplan-pg-"), sock)
	t.Cleanup(func() { _ = os.RemoveAll(sock) })

	c := open(t, dir)
	require.Contains(t, c.URL(""), "host=%2Ftmp%2Fonceplan-pg-")
	require.Equal(t, sock, queryString(t, c, "SHOW unix_socket_directories"))
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.NoError(t, c.Close(t.Context()))
	_, err = os.Stat(sock)
	require.ErrorIs(t, err, fs.ErrNotExist, "the socket directory goes with the server")
}

func TestUnknownAccount(t *testing.T) {
	requireRoot(t)
	t.Setenv("ONCEPLAN_PG_USER", "no-such-account-here")
	_, err := Open(t.Context(), testOptions(filepath.Join(testDir(t), "pg")))
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), `PostgreSQL refuses to run as root and ONCEPLAN_PG_USER names "no-such-account-here"`)
}

func TestSettingsValidated(t *testing.T) {
	t.Parallel()
	for _, bad := range []map[string]string{
		{"port": "5433"},
		{"bad name": "x"},
		{"work_mem": "1MB\nfsync = off"},
	} {
		_, err := mergeSettings(bad)
		var e *Error
		require.True(t, errors.As(err, &e), "%v", bad)
	}
	require.Equal(t, `'it''s \\ ok'`, quoteConf(`it's \ ok`))
}
