package main

// End-to-end in a real headless Chromium: sign in, propose, approve, start,
// kill -9 the server mid-run, restart it, watch it requeue the dead
// worker's targets by itself, and see every target get exactly one
// message — counted in the maildir, not in the ledger.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// browserTargets and browserRate make a run that lasts about ten seconds:
// long enough to kill it in the middle.
const (
	browserTargets = 100
	browserRate    = "10/s"
	adminEmail     = "admin@example.com"
	adminPassword  = "admin password for the e2e test"
)

// chromium returns a Chromium to drive, installing Debian's package when
// missing and running as root (scripts/ensure-chromium.sh). It skips only
// when it is missing and cannot be installed because this is not root.
func chromium(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "../../scripts/ensure-chromium.sh").Output()
	if err != nil {
		var ee *exec.ExitError
		msg := err.Error()
		if errors.As(err, &ee) {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		if os.Geteuid() != 0 {
			t.Skipf("no Chromium and not root to install it: %s", msg)
		}
		t.Fatalf("installing Chromium: %s", msg)
	}
	return strings.TrimSpace(string(out))
}

// liveServer is a `onceplan serve` child process whose output is kept.
type liveServer struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs strings.Builder
}

func (s *liveServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// serveUI starts `onceplan serve` with a slow maildir outbox and recovery
// after ownerTimeout, and waits until it listens.
func serveUI(t *testing.T, dir, ownerTimeout string) *liveServer {
	t.Helper()
	return serveUIWith(t, dir, "127.0.0.1:0", browserRate, "--owner-timeout", ownerTimeout)
}

// serveUIWith is serveUI listening on listen, its outbox sending at rate,
// with more flags.
func serveUIWith(t *testing.T, dir, listen, rate string, extra ...string) *liveServer {
	t.Helper()
	args := append([]string{"serve", "--data-dir", dir, "--listen", listen,
		"--provider", "outbox=maildir://" + filepath.Join(dir, "outbox") + "?rate=" + rate,
		"--maintenance-interval", "1s", "--job-timeout", "20s", "--rescue-after", "30s"}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "ONCEPLAN_ADMIN_EMAIL="+adminEmail, "ONCEPLAN_ADMIN_PASSWORD="+adminPassword)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &liveServer{cmd: cmd}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		require.True(t, ok, "serve exited before listening:\n%s", s.output())
		s.url = "http://" + addr
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve did not start:\n%s", s.output())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	})
	return s
}

func css(testid string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + testid + `"]`) }

// browser drives one Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

func (b *browser) text(testid string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(css(testid)))
	require.NoError(b.t, err, testid)
	return strings.TrimSpace(s)
}

// attr is the attribute name of the element data-testid names.
func (b *browser) attr(testid, name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="`+testid+`"]').getAttribute("`+name+`")`))
	require.NoError(b.t, err, testid)
	return v
}

func (b *browser) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(b.t, err)
	return loc
}

// waitJS waits until a JavaScript expression is true, tolerating the page
// reloading meanwhile.
func (b *browser) waitJS(expr string, timeout time.Duration, what string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s: %v (last error %v)", what, expr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shot saves a screenshot of the page as name.png, once the message
// preview frames (if any) have loaded.
func (b *browser) shot(name string) {
	b.t.Helper()
	b.waitJS(`performance.getEntriesByType('resource').filter(e => e.initiatorType === 'iframe').length >= document.querySelectorAll('iframe').length`,
		10*time.Second, "preview frames")
	// Frames outside the viewport are not painted into a full-page
	// screenshot: make the viewport as tall as the page first.
	height, err := chromedp.Run(b.ctx, chromedp.Evaluate[int64](`Math.ceil(document.body.getBoundingClientRect().bottom + window.scrollY)`))
	require.NoError(b.t, err)
	b.do(chromedp.EmulateViewport(1280, max(height, 900)), chromedp.Sleep(300*time.Millisecond))
	img, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	b.do(chromedp.EmulateViewport(1280, 900))
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), img, 0o644))
}

func (b *browser) signIn(base, email, password string) {
	b.t.Helper()
	b.do(
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(css("login-email")),
		chromedp.SendKeys(css("login-email"), email),
		chromedp.SendKeys(css("login-password"), password),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("signed-in-as")),
	)
	require.Contains(b.t, b.text("signed-in-as"), email)
}

func (b *browser) signOut() {
	b.t.Helper()
	b.do(chromedp.Click(css("sign-out")), chromedp.WaitVisible(css("login-form")))
}

// addUser adds a user on the admin page and returns the password it shows once.
func (b *browser) addUser(base, email string, roles ...string) string {
	b.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "/admin"),
		chromedp.WaitVisible(css("add-user-email")),
		chromedp.SendKeys(css("add-user-email"), email),
	}
	for _, r := range roles {
		steps = append(steps, chromedp.Click(css("add-user-role-"+r)))
	}
	steps = append(steps, chromedp.Click(css("add-user-submit")), chromedp.WaitVisible(css("new-password-value")))
	b.do(steps...)
	return b.text("new-password-value")
}

// outboxFiles lists the messages delivered to the maildir.
func outboxFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "outbox", "new"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// newBrowser starts headless Chromium (chrome, from chromium) for one
// test, stopped when the test ends; its screenshots go to
// $ONCEPLAN_SCREENSHOTS (make screenshots) or a temporary directory.
func newBrowser(t *testing.T, chrome string) *browser {
	t.Helper()
	shots := os.Getenv("ONCEPLAN_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else {
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	return &browser{t: t, ctx: ctx, shots: shots}
}

var toRE = regexp.MustCompile(`(?m)^To: (.+?)\r?$`)

func TestBrowserApproveRunKillResume(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)

	s1 := serveUI(t, dir, "3s")
	base := s1.url

	// The admin (from ONCEPLAN_ADMIN_*) adds a proposer and an approver
	// who also operates.
	b.signIn(base, adminEmail, adminPassword)
	proposerPW := b.addUser(base, "proposer@example.com", "proposer")
	approverPW := b.addUser(base, "approver@example.com", "approver", "operator")
	b.shot("admin")
	// River's own UI is mounted for admins and runs under its CSP.
	b.do(chromedp.Navigate(base + "/riverui/"))
	b.waitJS(`document.body.innerText.includes('Queues') && document.body.innerText.includes('Jobs')`, 30*time.Second, "River UI")
	// Someone asked, by email, never to be mailed again: the admin puts
	// the address on the suppression list.
	b.do(
		chromedp.Navigate(base+"/suppressions"),
		chromedp.WaitVisible(css("suppression-add-form")),
		chromedp.SendKeys(css("suppression-address"), "Gone@Example.com"),
		chromedp.SetValue(css("suppression-reason"), "unsubscribed"),
		chromedp.Click(css("suppression-add")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="suppression"][data-address="gone@example.com"]`)),
	)
	require.Equal(t, "1", b.text("suppression-active-count"))
	b.shot("suppressions")
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("sign-out")))
	b.signOut()

	// The proposer drafts with the list attached, reloads the page it
	// lands on, uploads the list again and submits.
	var csv strings.Builder
	csv.WriteString("email,first_name\n")
	for i := 1; i <= browserTargets; i++ {
		fmt.Fprintf(&csv, "customer%03d@example.com,Customer %d\n", i, i)
	}
	csv.WriteString("CUSTOMER001@example.com,Duplicate\nnot an address,Broken\ngone@example.com,Gone\n")
	csvPath := filepath.Join(t.TempDir(), "customers.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte(csv.String()), 0o644))
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Click(css("new-campaign")),
		chromedp.WaitVisible(css("new-campaign-form")),
		chromedp.SendKeys(css("field-name"), "November invoice reminder"),
		chromedp.SendKeys(css("field-from"), "Billing <billing@example.com>"),
		chromedp.SendKeys(css("field-subject"), "Your invoice, {{.first_name}}"),
		chromedp.SetValue(css("field-text"), "Dear {{.first_name}},\nyour invoice is attached."),
		chromedp.SetValue(css("field-html"), "<p>Dear <b>{{.first_name}}</b>,</p><p>your invoice is attached.</p>"),
		chromedp.SetUploadFiles(css("field-targets"), []string{csvPath}),
		chromedp.Click(css("create-campaign")),
		chromedp.WaitVisible(css("import-report")),
	)
	require.Equal(t, fmt.Sprint(browserTargets), b.text("import-accepted"))
	// A reload shows the draft again: the form is not sent a second time.
	b.do(chromedp.Reload(), chromedp.WaitVisible(css("import-form")))
	campaignURL := strings.TrimSuffix(strings.SplitN(b.location(), "?", 2)[0], "/draft")
	campaignPath := strings.TrimPrefix(campaignURL, base)
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	campaigns, err := chromedp.Run(b.ctx, chromedp.Evaluate[int64](`document.querySelectorAll('[data-testid="campaign-row"]').length`))
	require.NoError(t, err)
	require.EqualValues(t, 1, campaigns, "one campaign after a reload of the page Create draft led to")
	b.do(
		chromedp.Navigate(base+campaignPath+"/draft"),
		chromedp.WaitVisible(css("import-form")),
		chromedp.SetUploadFiles(css("import-file"), []string{csvPath}),
		chromedp.Click(css("import-submit")),
		chromedp.WaitVisible(css("import-report")),
	)
	require.Equal(t, fmt.Sprint(browserTargets), b.text("import-accepted"))
	require.Equal(t, "1", b.text("import-duplicate"))
	require.Equal(t, "1", b.text("import-rejected"))
	require.Equal(t, "1", b.text("import-suppressed"), "the suppressed address is left out of the list")
	require.Equal(t, "Your invoice, Customer 1", b.text("preview-subject"))
	b.shot("draft")
	b.do(chromedp.Click(css("submit-for-approval")), chromedp.WaitVisible(css("approval")))
	b.signOut()

	// The approver approves the hash shown and starts the run.
	b.signIn(base, "approver@example.com", approverPW)
	b.do(chromedp.Navigate(base+campaignPath+"/approval"), chromedp.WaitVisible(css("approve")))
	require.Equal(t, "0 of 1 approval", b.text("quorum"))
	require.Contains(t, b.text("suppressed-count"), "1 left out of the list at import", "the approver sees who will not be mailed")
	require.Equal(t, "true", b.attr("list-unsubscribe", "data-list-unsubscribe"))
	shown := b.text("plan-hash")
	require.Len(t, shown, 64)
	b.shot("approval")
	b.do(chromedp.Click(css("approve")), chromedp.WaitVisible(css("action-start")))
	b.do(chromedp.Click(css("action-start")), chromedp.WaitVisible(css("action-pause")))

	// The counts and the target table move without a reload; kill the
	// server mid-run.
	_, err = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.onceplanSameDocument = true`))
	require.NoError(t, err)
	b.waitJS(`Number(document.querySelector('[data-testid="count-done"]').textContent.replace(/,/g, '')) >= 20`,
		60*time.Second, "20 targets done (live)")
	b.waitJS(`window.onceplanSameDocument === true && document.querySelector('[data-testid="target-row"][data-ordinal="1"]').dataset.state === 'done'`,
		30*time.Second, "the first target's row done (live, without a reload)")
	b.shot("run")
	require.NoError(t, s1.cmd.Process.Signal(syscall.SIGKILL))
	s1.cmd.Wait()
	atKill := len(outboxFiles(t, dir))
	require.Greater(t, atKill, 0)
	require.Less(t, atKill, browserTargets, "the run was still going when killed")
	t.Logf("killed the server with %d of %d messages delivered", atKill, browserTargets)

	// Restart on the same data, with a longer owner timeout, so that the
	// dead process's targets wait long enough to be seen: the session
	// survives (it is in the database), and the run page shows where each
	// target stands and says that the dead worker's targets are requeued
	// by themselves, and when — with nothing to press.
	s2 := serveUI(t, dir, "20s")
	base = s2.url
	deadline := time.Now().Add(25 * time.Second)
	for {
		b.do(chromedp.Navigate(base+campaignPath+"/run"), chromedp.WaitVisible(css("targets")))
		found, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="restart-note"]') !== null`))
		require.NoError(t, err)
		if found {
			break
		}
		require.True(t, time.Now().Before(deadline), "no restart note on the run page after the restart")
		time.Sleep(time.Second)
	}
	note := b.text("restart-note")
	t.Logf("after the restart the page shows %s done and says: %s", b.text("count-done"), note)
	require.Contains(t, note, "requeued automatically within")
	require.NotEmpty(t, b.text("target-row"))
	resume, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="action-resume"]') !== null`))
	require.NoError(t, err)
	require.False(t, resume, "no resume offered while the dead worker's targets wait to be requeued")
	b.shot("run-after-restart")
	// Nobody presses anything: the run finishes by itself.
	b.waitJS(`document.querySelector('[data-testid="count-done"]') !== null && document.querySelector('[data-testid="count-done"]').textContent.replace(/,/g, '') === '`+fmt.Sprint(browserTargets)+`'`,
		3*time.Minute, "every target done")
	// Completed, with nothing left: no resume is offered.
	b.waitJS(`document.querySelector('.campaign-head [data-testid="state"]').dataset.state === 'completed'`, time.Minute, "the campaign completed")
	b.do(chromedp.Navigate(base+campaignPath+"/run"), chromedp.WaitVisible(css("targets")))
	resume, err = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="action-resume"]') !== null`))
	require.NoError(t, err)
	require.False(t, resume, "a completed campaign with nothing to resume offers no resume")
	b.do(chromedp.Navigate(base+campaignPath+"/targets/1"), chromedp.WaitVisible(css("attempt")))
	b.shot("target")
	b.do(chromedp.Navigate(base+campaignPath+"/audit"), chromedp.WaitVisible(css("audit-headline")))
	require.Equal(t, fmt.Sprintf("%d / %d", browserTargets, browserTargets), b.text("audit-headline"))
	require.Equal(t, "0", b.text("m-duplicates"))
	require.Equal(t, "0", b.text("m-missing"))
	require.Equal(t, "0", b.text("m-in_doubt"))
	b.shot("audit")
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	b.shot("campaigns")

	// The outside world: exactly one message per approved target, each the
	// file its effect names, each to a different recipient.
	files := outboxFiles(t, dir)
	require.Len(t, files, browserTargets)
	conn, err := pgx.Connect(context.Background(), socketURL(dir))
	require.NoError(t, err)
	rows, err := conn.Query(context.Background(), `
		SELECT t.key FROM campaign c JOIN plan p ON p.id = c.plan_id JOIN target t ON t.list_id = p.list_id
		WHERE c.id = $1`, strings.TrimPrefix(campaignPath, "/campaigns/"))
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	conn.Close(context.Background())
	var want []string
	for _, k := range keys {
		want = append(want, provider.MaildirFileName(k, 0))
	}
	require.ElementsMatch(t, want, files)
	seen := map[string]bool{}
	for _, f := range files {
		body, err := os.ReadFile(filepath.Join(dir, "outbox", "new", f))
		require.NoError(t, err)
		m := toRE.FindSubmatch(body)
		require.NotNil(t, m, f)
		to := string(m[1])
		require.False(t, seen[to], "two messages to %s", to)
		seen[to] = true
	}
	require.Len(t, seen, browserTargets)

	// A recipient unsubscribes with the message's one-click link. Opening
	// it shows a confirmation and changes nothing (mail scanners fetch
	// links); the button unsubscribes. The link names the server that sent
	// the message, maybe the one killed above: the token is what counts,
	// so it is opened on the running one.
	raw, err := os.Open(filepath.Join(dir, "outbox", "new", files[0]))
	require.NoError(t, err)
	msg, err := mail.ReadMessage(raw)
	require.NoError(t, err)
	raw.Close()
	require.Equal(t, "List-Unsubscribe=One-Click", msg.Header.Get("List-Unsubscribe-Post"))
	link := strings.Trim(msg.Header.Get("List-Unsubscribe"), "<>")
	require.Contains(t, link, "/u/")
	recipient := strings.ToLower(strings.Trim(strings.TrimSpace(msg.Header.Get("To")), "<>"))
	b.do(chromedp.Navigate(base+"/u/"+strings.SplitN(link, "/u/", 2)[1]), chromedp.WaitVisible(css("unsubscribe-confirm")))
	b.shot("unsubscribe")
	b.do(chromedp.Navigate(base+"/suppressions?address="+recipient), chromedp.WaitVisible(css("suppression-search")))
	listed, err := chromedp.Run(b.ctx, chromedp.Evaluate[int64](`document.querySelectorAll('[data-testid="suppression"]').length`))
	require.NoError(t, err)
	require.Zero(t, listed, "opening the link unsubscribed nobody")
	b.do(chromedp.Navigate(base+"/u/"+strings.SplitN(link, "/u/", 2)[1]), chromedp.WaitVisible(css("unsubscribe-confirm")),
		chromedp.Click(css("unsubscribe-confirm")), chromedp.WaitVisible(css("unsubscribe-done")))
	b.do(chromedp.Navigate(base+"/suppressions?address="+recipient),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="suppression"][data-address="`+recipient+`"]`)))
	require.Len(t, outboxFiles(t, dir), browserTargets, "unsubscribing sends nothing")

	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s2.cmd.Wait(), s2.output())
}
