package provider_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// writerEnv makes the test binary a helper process that writes half a
// message into the maildir it names, as Send does, prints the file's name
// and waits, in the middle of the write, until its standard input closes.
const writerEnv = "ONCEPLAN_TEST_MAILDIR_WRITER"

func TestMaildirWriterHelperProcess(t *testing.T) {
	dir := os.Getenv(writerEnv)
	if dir == "" {
		t.Skip("the helper process of TestMaildirSweepTmp")
	}
	_, err := provider.WriteMaildirTmp(dir, testKey(fmt.Sprint(os.Getpid())), func(f *os.File) error {
		if _, err := f.WriteString("From: billing@example.com\r\nTo: ann@example.com\r\nSubj"); err != nil {
			return err
		}
		fmt.Println(filepath.Base(f.Name()))
		_, err := io.Copy(io.Discard, os.Stdin) // until the test lets go
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// writer is a helper process in the middle of writing a tmp/ file.
type writer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	name string
}

func startWriter(t *testing.T, dir string) *writer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMaildirWriterHelperProcess$")
	cmd.Env = append(os.Environ(), writerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &writer{cmd: cmd, in: in}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the writer names its file: %v", sc.Err())
	w.name = sc.Text()
	return w
}

// age makes a tmp/ file look last written d ago.
func age(t *testing.T, dir, name string, d time.Duration) {
	t.Helper()
	then := time.Now().Add(-d)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "tmp", name), then, then))
}

func tmpFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestMaildirSweepTmp: a process killed in the middle of writing a
// message leaves a half-written file in tmp/. Sweep removes it once it is
// old enough, and never removes a file a live process is still writing
// (however old it looks), a recent one, or another program's.
func TestMaildirSweepTmp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	p, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	defer p.Close()
	sw, ok := p.(provider.Sweeper)
	require.True(t, ok, "a maildir provider sweeps its tmp/")
	// A delivery makes the directories, and leaves nothing in tmp/.
	raw, err := p.Send(ctx, testRequest("delivered"))
	require.NoError(t, err)
	require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome)
	require.Empty(t, tmpFiles(t, dir))

	// A writer killed half way: its file stays.
	killed := startWriter(t, dir)
	require.NoError(t, killed.cmd.Process.Kill())
	_ = killed.cmd.Wait()
	// A writer alive in the middle of its write.
	live := startWriter(t, dir)
	// Another program's delivery in progress, and a leftover of ours
	// written a moment ago.
	foreign := "1733220000.M1P2.host"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tmp", foreign), []byte("x"), 0o644))
	fresh := provider.MaildirFileName(testKey("fresh"), 0) + ".4242.0123456789abcdef"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tmp", fresh), []byte("From: half"), 0o644))
	all := []string{killed.name, live.name, foreign, fresh}
	slices.Sort(all)
	require.Equal(t, all, tmpFiles(t, dir))

	// While young, nothing is removed, not even the killed writer's.
	removed, err := sw.Sweep(ctx, time.Now())
	require.NoError(t, err)
	require.Empty(t, removed)
	require.Equal(t, all, tmpFiles(t, dir))

	// Old enough: the killed writer's file goes; the live writer's stays
	// although it looks as old, and so do the recent and foreign ones.
	for _, name := range []string{killed.name, live.name, foreign} {
		age(t, dir, name, provider.MaildirTmpMaxAge+time.Minute)
	}
	removed, err = sw.Sweep(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, []string{"tmp/" + killed.name}, removed)
	left := []string{live.name, foreign, fresh}
	slices.Sort(left)
	require.Equal(t, left, tmpFiles(t, dir))

	// The live writer finishes; Send would link and remove its file.
	require.NoError(t, live.in.Close())
	require.NoError(t, live.cmd.Wait())
	age(t, dir, live.name, provider.MaildirTmpMaxAge+time.Minute)
	removed, err = sw.Sweep(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, []string{"tmp/" + live.name}, removed, "once its writer let go")
}
