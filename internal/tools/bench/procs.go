package main

// Scenarios that run real `onceplan` processes against the bench database:
//
//   - "recovery": a maildir campaign run by `onceplan worker`, SIGKILLed
//     after ~25% are delivered; a new worker with the default recovery
//     settings is started and the time until delivery resumes and until
//     the last file lands is measured.
//   - "scaleout": the same campaign run by 1, 2 and 4 worker processes on
//     one database; effects/s each, and exactly-once checked at the
//     maildir (one file per recipient).
//   - "rss": `onceplan serve` executing a large campaign; its VmRSS
//     sampled from /proc every 500 ms.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/jobs"
)

// procEnv holds the onceplan binary and the scratch directory.
type procEnv struct {
	dir, binary, dbURL string
}

func newProcEnv(dbURL string) (*procEnv, error) {
	dir, err := os.MkdirTemp("", "onceplan-bench-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "onceplan")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/onceplan").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("building onceplan (run from the module root): %v\n%s", err, out)
	}
	return &procEnv{dir: dir, binary: bin, dbURL: dbURL}, nil
}

func (e *procEnv) close() { os.RemoveAll(e.dir) }

// child is a running onceplan process whose stderr goes to a log file.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs the onceplan binary with args, its output going to
// NAME.log in the scratch directory.
func (e *procEnv) start(name string, args ...string) (*child, error) {
	return e.startBinary(name, e.binary, args...)
}

// startBinary runs binary (onceplan, or a server a scenario measures
// against) with args, its output going to NAME.log in the scratch
// directory.
func (e *procEnv) startBinary(name, binary string, args ...string) (*child, error) {
	logPath := filepath.Join(e.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c := &child{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (e *procEnv) worker(name, maildir string) (*child, error) {
	return e.start(name, "worker", "--database-url", e.dbURL, "--data-dir", filepath.Join(e.dir, "data-"+name),
		"--provider", "outbox=maildir://"+maildir)
}

func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop ends the process politely (SIGTERM), then hard after a minute.
func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		c.kill()
	}
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// countFiles counts the files delivered to a maildir (new/).
func countFiles(maildir string) int {
	f, err := os.Open(filepath.Join(maildir, "new"))
	if err != nil {
		return 0
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return len(names)
}

// perRecipient reads every delivered file's To header and checks that each
// of the n bench recipients got exactly one (recipientTally).
func perRecipient(maildir string, n int) (missing, extra int, err error) {
	dir := filepath.Join(maildir, "new")
	names, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	count := make(map[string]int, n)
	for _, de := range names {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			return 0, 0, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "To: "); ok {
				count[strings.Trim(strings.TrimSpace(v), "<>")]++
				break
			}
		}
	}
	missing, extra = recipientTally(count, n)
	return missing, extra, nil
}

// recipientTally checks messages counted per recipient address against
// the n recipients of a bench campaign (csvGen's person0000001@example.com
// and on): it returns the recipients with none and with more than one.
func recipientTally(count map[string]int, n int) (missing, extra int) {
	for i := 1; i <= n; i++ {
		switch c := count[fmt.Sprintf("person%07d@example.com", i)]; {
		case c == 0:
			missing++
		case c > 1:
			extra++
		}
	}
	return missing, extra
}

// waitFiles polls the maildir until it holds want files, a child exits or
// the timeout passes.
func waitFiles(maildir string, want int, timeout time.Duration, children ...*child) error {
	deadline := time.Now().Add(timeout)
	for countFiles(maildir) < want {
		for _, c := range children {
			if c.exited() {
				return fmt.Errorf("a worker exited:\n%s", c.tail())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d files after %s", countFiles(maildir), want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func benchRecovery(ctx context.Context, pool *pgxpool.Pool, e *procEnv, n int) error {
	maildir := filepath.Join(e.dir, "recovery-maildir")
	_, planID, err := startCampaign(ctx, pool, nil, "recovery bench", "outbox", n)
	if err != nil {
		return err
	}
	first, err := e.worker("recovery-1", maildir)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := waitFiles(maildir, n/4, 30*time.Minute, first); err != nil {
		first.kill()
		return err
	}
	firstRate := float64(countFiles(maildir)) / time.Since(t0).Seconds()
	first.kill()
	atKill := countFiles(maildir)
	doneAtKill, err := doneCount(ctx, pool, planID)
	if err != nil {
		return err
	}

	restart := time.Now()
	second, err := e.worker("recovery-2", maildir)
	if err != nil {
		return err
	}
	defer second.stop()
	var resumed time.Duration
	for countFiles(maildir) <= atKill {
		if second.exited() {
			return fmt.Errorf("the restarted worker exited:\n%s", second.tail())
		}
		if time.Since(restart) > 10*time.Minute {
			return fmt.Errorf("no delivery 10 minutes after the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resumed = time.Since(restart)
	if err := waitFiles(maildir, n, 20*time.Minute, second); err != nil {
		return err
	}
	completed := time.Since(restart)
	// The effects in flight at the kill are settled by recovery.
	var settled time.Duration
	for {
		d, err := doneCount(ctx, pool, planID)
		if err != nil {
			return err
		}
		if d >= n {
			settled = time.Since(restart)
			break
		}
		if time.Since(restart) > 20*time.Minute {
			return fmt.Errorf("%d of %d effects done 20 minutes after the restart", d, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	missing, extra, err := perRecipient(maildir, n)
	if err != nil {
		return err
	}
	fmt.Printf("recovery: %d targets on a maildir, `onceplan worker` SIGKILLed after %d files (%d effects settled done), restarted with the default settings\n", n, atKill, doneAtKill)
	d := jobs.Config{}.WithDefaults()
	fmt.Printf("  River: JobTimeout %s, RescueStuckJobsAfter %s (--job-timeout; --rescue-after follows it); Onceplan: owner timeout %s, heartbeat %s, maintenance interval %s\n", d.JobTimeout, d.RescueAfter, d.OwnerTimeout, d.HeartbeatInterval, d.MaintenanceInterval)
	fmt.Printf("  first worker's rate before the kill:         %.0f effects/s\n", firstRate)
	fmt.Printf("  restart -> first new file:                   %.2f s (target <= 60 s)\n", resumed.Seconds())
	fmt.Printf("  restart -> all %d files:                  %.2f s\n", n, completed.Seconds())
	fmt.Printf("  restart -> all %d effects settled done:   %.2f s\n", n, settled.Seconds())
	fmt.Printf("  recipients with no file / more than one:     %d / %d\n", missing, extra)
	record("8. recovery", fmt.Sprintf("%s targets (maildir), `onceplan worker` SIGKILLed after %s files, restarted with the default settings: first new file after **%.1f s**, all files after %.1f s, all settled after %.1f s (in-flight effects wait for the 30 s owner timeout); recipients with no file / more than one: %d / %d",
		thousands(n), thousands(atKill), resumed.Seconds(), completed.Seconds(), settled.Seconds(), missing, extra),
		"resumes ≤ 60 s, exactly once", resumed <= time.Minute && missing == 0 && extra == 0)
	return nil
}

func benchScaleout(ctx context.Context, pool *pgxpool.Pool, e *procEnv, n int, counts []int) error {
	type row struct {
		procs          int
		rate           float64
		settled        time.Duration
		missing, extra int
	}
	var rows []row
	for _, k := range counts {
		maildir := filepath.Join(e.dir, fmt.Sprintf("scaleout-%d-maildir", k))
		_, planID, err := startCampaign(ctx, pool, nil, fmt.Sprintf("scaleout bench %d", k), "outbox", n)
		if err != nil {
			return err
		}
		var ws []*child
		t0 := time.Now()
		for i := range k {
			w, err := e.worker(fmt.Sprintf("scaleout-%d-%d", k, i), maildir)
			if err != nil {
				return err
			}
			ws = append(ws, w)
		}
		err = waitFiles(maildir, n, 30*time.Minute, ws...)
		elapsed := time.Since(t0)
		if err == nil {
			for {
				var d int
				if d, err = doneCount(ctx, pool, planID); err != nil || d >= n {
					break
				}
				if time.Since(t0) > 30*time.Minute {
					err = fmt.Errorf("%d of %d settled", d, n)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		settled := time.Since(t0)
		for _, w := range ws {
			w.stop()
		}
		if err != nil {
			return err
		}
		missing, extra, err := perRecipient(maildir, n)
		if err != nil {
			return err
		}
		rows = append(rows, row{k, float64(n) / elapsed.Seconds(), settled, missing, extra})
	}
	fmt.Printf("scaleout: %d targets on one maildir, `onceplan worker` processes with the default settings (16 workers per queue each), timed from their start\n", n)
	fmt.Printf("  %-9s %-14s %-16s %s\n", "processes", "effects/s", "all settled", "recipients with no file / more than one")
	for _, r := range rows {
		fmt.Printf("  %-9d %-14.0f %-16s %d / %d\n", r.procs, r.rate, r.settled.Round(10*time.Millisecond), r.missing, r.extra)
	}
	var figs []string
	once := true
	for _, r := range rows {
		figs = append(figs, fmt.Sprintf("%d: %.0f effects/s (no file / more than one: %d / %d)", r.procs, r.rate, r.missing, r.extra))
		once = once && r.missing == 0 && r.extra == 0
	}
	record("9. scale-out", fmt.Sprintf("%s targets (maildir) per count, `onceplan worker` processes: %s", thousands(n), strings.Join(figs, "; ")),
		"report; exactly once each time", once)
	return nil
}

// statusKB reads a field counted in kB (VmRSS, VmHWM) from
// /proc/PID/status; pid is a number or "self". Zero when unreadable.
func statusKB(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func benchRSS(ctx context.Context, pool *pgxpool.Pool, e *procEnv, n int) error {
	maildir := filepath.Join(e.dir, "rss-maildir")
	t := time.Now()
	if _, _, err := startCampaign(ctx, pool, nil, "rss bench", "outbox", n); err != nil {
		return err
	}
	prepared := time.Since(t)
	srv, err := e.start("serve", "serve", "--database-url", e.dbURL, "--data-dir", filepath.Join(e.dir, "data-serve"),
		"--listen", "127.0.0.1:0", "--provider", "outbox=maildir://"+maildir)
	if err != nil {
		return err
	}
	defer srv.stop()
	t0 := time.Now()
	var peak, last int64
	var samples int
	for countFiles(maildir) < n {
		if srv.exited() {
			return fmt.Errorf("serve exited:\n%s", srv.tail())
		}
		if time.Since(t0) > 60*time.Minute {
			return fmt.Errorf("%d of %d files after an hour", countFiles(maildir), n)
		}
		last = statusKB(strconv.Itoa(srv.cmd.Process.Pid), "VmRSS")
		peak = max(peak, last)
		samples++
		time.Sleep(500 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	fmt.Printf("rss: `onceplan serve` executing a %d-target maildir campaign (created and started by the bench in %s)\n", n, prepared.Round(time.Second))
	fmt.Printf("  run time %s (%.0f effects/s), %d samples of VmRSS every 500 ms\n", elapsed.Round(time.Second), float64(n)/elapsed.Seconds(), samples)
	fmt.Printf("  peak VmRSS of serve:                        %.1f MiB (target <= 150 MB); last sample %.1f MiB\n", float64(peak)/1024, float64(last)/1024)
	peakMB := float64(peak) * 1024 / 1e6
	record("7. memory", fmt.Sprintf("`onceplan serve` executing a %s-target campaign (%s, %.0f effects/s): peak sampled VmRSS **%.0f MB**",
		thousands(n), elapsed.Round(time.Second), float64(n)/elapsed.Seconds(), peakMB), "≤ 150 MB", peakMB <= 150)
	return nil
}
