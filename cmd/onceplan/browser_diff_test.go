package main

// In a real headless Chromium against `onceplan serve` (as
// TestBrowserApproveRunKillResume): an approved version is edited — its
// subject changed, a target added — and resubmitted; the approval page
// shows the approver what changed, and its link lists the added targets.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

func TestBrowserApprovalShowsWhatChanged(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)
	s := serveUI(t, dir, "3s")
	base := s.url

	b.signIn(base, adminEmail, adminPassword)
	proposerPW := b.addUser(base, "proposer@example.com", "proposer")
	approverPW := b.addUser(base, "approver@example.com", "approver")
	b.signOut()

	writeCSV := func(name, body string) string {
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		return path
	}
	v1 := "email,first_name\nann@example.com,Ann\nbob@example.com,Bob\ncat@example.com,Cat\n"
	v1Path := writeCSV("v1.csv", v1)
	v2Path := writeCSV("v2.csv", v1+"dan@example.com,Dan\n")

	// Version 1: proposed, submitted, approved.
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Click(css("new-campaign")),
		chromedp.WaitVisible(css("new-campaign-form")),
		chromedp.SendKeys(css("field-name"), "December reminder"),
		chromedp.SendKeys(css("field-from"), "Billing <billing@example.com>"),
		chromedp.SendKeys(css("field-subject"), "Your December invoice, {{.first_name}}"),
		chromedp.SetValue(css("field-text"), "Dear {{.first_name}},\nyour invoice is attached."),
		chromedp.SetUploadFiles(css("field-targets"), []string{v1Path}),
		chromedp.Click(css("create-campaign")),
		chromedp.WaitVisible(css("import-report")),
	)
	campaignPath := strings.TrimPrefix(strings.TrimSuffix(strings.SplitN(b.location(), "?", 2)[0], "/draft"), base)
	b.do(chromedp.Click(css("submit-for-approval")), chromedp.WaitVisible(css("approval")))
	b.signOut()
	b.signIn(base, "approver@example.com", approverPW)
	b.do(chromedp.Navigate(base+campaignPath+"/approval"), chromedp.WaitVisible(css("approve")))
	require.Contains(t, b.text("diff-message"), "never been approved", "version 1 has nothing to compare with")
	b.do(chromedp.Click(css("approve")))
	b.waitJS(`location.pathname.endsWith('/run')`, 30*time.Second, "the run page after the approval")
	b.do(chromedp.WaitVisible(css("sign-out")))
	b.signOut()

	// Version 2: another subject and one more target, resubmitted.
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Navigate(base+campaignPath+"/draft"),
		chromedp.WaitVisible(css("new-version-notice")),
		chromedp.SetValue(css("field-subject"), "Reminder: your December invoice, {{.first_name}}"),
		chromedp.Click(css("save-payload")),
	)
	// The save answers with the draft of version 2: wait for that page,
	// not the form of the one it replaces.
	b.waitJS(`document.querySelector('[data-testid="flash"]') !== null && document.querySelector('[data-testid="new-version-notice"]') === null`,
		30*time.Second, "the saved draft of version 2")
	b.do(
		chromedp.WaitVisible(css("import-form")),
		chromedp.SetUploadFiles(css("import-file"), []string{v2Path}),
		chromedp.Click(css("import-submit")),
		chromedp.WaitVisible(css("import-report")),
	)
	require.Equal(t, "4", b.text("import-target-count"))
	b.do(chromedp.Click(css("submit-for-approval")), chromedp.WaitVisible(css("approval")))
	b.signOut()

	// The approver sees what changed since the version they approved.
	b.signIn(base, "approver@example.com", approverPW)
	b.do(chromedp.Navigate(base+campaignPath+"/approval"), chromedp.WaitVisible(css("diff")))
	require.Equal(t, "approved", b.attr("diff", "data-against"))
	require.Contains(t, b.text("diff-message"), "compared with version 1")
	require.Equal(t, "1", b.text("diff-added-count"))
	require.Equal(t, "0", b.text("diff-removed-count"))
	require.Equal(t, "3", b.text("diff-unchanged-count"))
	lines, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('[data-testid="diff-field"][data-field="subject"] [data-testid="diff-line"]')].map(e => e.dataset.op + ' ' + e.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{
		"removed − Your December invoice, {{.first_name}}",
		"added + Reminder: your December invoice, {{.first_name}}",
	}, lines)
	added, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('[data-testid="diff-row"][data-kind="added"]')].map(e => e.dataset.target)`))
	require.NoError(t, err)
	require.Equal(t, []string{"dan@example.com"}, added)
	b.shot("approval-diff")

	// Its link lists the added targets on a page of their own.
	b.do(chromedp.Click(css("diff-all-added")), chromedp.WaitVisible(css("diff-rows-page")))
	require.Equal(t, "added", b.attr("diff-rows-page", "data-kind"))
	require.Equal(t, "dan@example.com", b.attr("diff-row", "data-target"))

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s.cmd.Wait(), s.output())
}
