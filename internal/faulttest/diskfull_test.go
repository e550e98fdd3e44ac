package faulttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs of size at dir until the test ends.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mount: %s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// TestMaildirDiskFull: the maildir provider's file system (a 64 KiB tmpfs)
// fills up in the middle of a campaign. A write that fails is recorded as
// failed — it fails before the link into new/, so nothing was delivered —
// and never as done: every done target has its file and every target
// without a file is not done. No half-written file is left in tmp/. Once
// space is freed (the tmpfs grown) the retries deliver the rest, each
// target once.
func TestMaildirDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("TestMaildirDiskFull mounts a tiny tmpfs for the maildir, which needs root: run it as root (CI does)")
	}
	e := newEnv(t)
	dir := t.TempDir()
	mountTmpfs(t, dir, "64k")
	md := maildirWorld(t, "small", dir, "concurrency=2")
	w := startWorker(t, e.url, []string{md.provider}, fastFlags)
	const n = 40
	id := e.campaign(t, "small", "d", n)

	// The first round: every target tried once, the disk full part way.
	waitFor(t, time.Minute, "every target to be tried once", func() bool {
		st, err := e.states(id)
		return err == nil && st[""] == 0 && st["pending"] == 0 && st["failed"] > 0
	}, w)
	files := md.effects()
	delivered := len(files)
	full := 0
	for _, a := range e.attempts(t, id) {
		switch a.State {
		case "done":
		case "failed":
			require.Contains(t, a.Reason, "no space left on device", "%+v", a)
			require.Contains(t, a.Reason, "nothing delivered", "%+v", a)
			full++
		case "pending":
			// A retry that started after the snapshot above.
		default:
			t.Fatalf("a full disk makes an attempt failed, never %s: %+v", a.State, a)
		}
	}
	for target := range e.targets(t, id) {
		var state string
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT f.state::text FROM effect f JOIN target t ON t.key = f.key
			WHERE t.target = $1 ORDER BY f.id DESC LIMIT 1`, target).Scan(&state))
		if state == "done" {
			require.Equal(t, 1, files[target], "%s is done, so its file is in the maildir", target)
		}
		if files[target] == 0 {
			require.NotEqual(t, "done", state, "%s has no file, so it is not done", target)
		}
	}
	tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	require.Empty(t, tmp, "no half-written message is left in tmp/")
	t.Logf("disk full after %d of %d messages; %d attempts failed with ENOSPC", delivered, n, full)
	require.Less(t, delivered, n)

	// Space comes back.
	out, err := exec.Command("mount", "-o", "remount,size=8m", dir).CombinedOutput()
	require.NoError(t, err, "remount: %s", out)
	waitFor(t, 2*time.Minute, "the campaign to complete with every target done", func() bool { return e.completed(id, n) }, w)
	requireExactlyOnce(t, md, e.targets(t, id))
	e.requireHolds(t, id)
	retried := 0
	for _, rows := range byTarget(e.attempts(t, id)) {
		if len(rows) > 1 {
			retried++
			for _, a := range rows[:len(rows)-1] {
				require.Equal(t, "failed", a.State)
				require.True(t, strings.Contains(a.Reason, "no space left on device"), a.Reason)
			}
		}
	}
	t.Logf("%d targets delivered by a retry once space was back", retried)
}
