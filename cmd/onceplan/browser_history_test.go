package main

// In a real headless Chromium against `onceplan serve`: a proposer's draft
// is rejected by a second user with a reason; the proposer sees who
// rejected it and why on the draft, and the draft's history — the import
// with the line it refused, the test send, the submission, the rejection
// with its reason — there and on the History page of the campaign, which
// was never approved.

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

func TestBrowserRejectionReachesTheProposer(t *testing.T) {
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

	csvPath := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte("email,first_name\nann@example.com,Ann\nnot an address,Broken\nbob@example.com,Bob\n"), 0o644))

	// The proposer drafts, sends a test to themself and submits.
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Click(css("new-campaign")),
		chromedp.WaitVisible(css("new-campaign-form")),
		chromedp.SendKeys(css("field-name"), "March newsletter"),
		chromedp.SendKeys(css("field-from"), "News <news@example.com>"),
		chromedp.SendKeys(css("field-subject"), "February news, {{.first_name}}"),
		chromedp.SetValue(css("field-text"), "Dear {{.first_name}},\nhere is the news."),
		chromedp.SetUploadFiles(css("field-targets"), []string{csvPath}),
		chromedp.Click(css("create-campaign")),
		chromedp.WaitVisible(css("import-report")),
	)
	require.Equal(t, "1", b.text("import-rejected"))
	campaignPath := strings.TrimPrefix(strings.TrimSuffix(strings.SplitN(b.location(), "?", 2)[0], "/draft"), base)
	b.do(chromedp.Click(css("test-send-submit")))
	b.waitJS(`document.querySelector('[data-testid="flash"]') !== null && document.querySelector('[data-testid="flash"]').textContent.includes('Test message sent')`,
		30*time.Second, "the test send's confirmation")
	b.do(chromedp.Click(css("submit-for-approval")), chromedp.WaitVisible(css("approval")))
	b.signOut()

	// A second user rejects it, with a reason.
	const reason = "The subject says February: this is the March newsletter"
	b.signIn(base, "approver@example.com", approverPW)
	b.do(
		chromedp.Navigate(base+campaignPath+"/approval"),
		chromedp.WaitVisible(css("reject-form")),
		chromedp.SendKeys(css("reject-reason"), reason),
		chromedp.Click(css("reject")),
	)
	b.waitJS(`location.pathname.endsWith('/draft') && document.querySelector('[data-testid="flash"]') !== null`, 30*time.Second, "the draft after the rejection")
	b.signOut()

	// The proposer sees who rejected it, and why, on the draft, with its
	// history.
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaign-link")), chromedp.Click(css("campaign-link")),
		chromedp.WaitVisible(css("rejection-notice")))
	notice := b.text("rejection-notice")
	require.Contains(t, notice, "rejected by approver@example.com")
	require.Contains(t, notice, reason)
	actions := b.strings(`[...document.querySelectorAll('[data-testid="history"] [data-testid="event"]')].map(e => e.dataset.action)`)
	require.Equal(t, []string{"reject", "submit", "test_send", "import", "create"}, actions, "newest first")
	require.Equal(t, []string{reason}, b.strings(`[...document.querySelectorAll('[data-testid="history"] [data-testid="event"][data-action="reject"] [data-testid="event-reason"]')].map(e => e.textContent)`))
	lines := b.strings(`[...document.querySelectorAll('[data-testid="history"] [data-testid="event-rejected-line"]')].map(e => e.textContent)`)
	require.Len(t, lines, 1, "the import's refused line")
	require.Regexp(t, `^line 3: \S`, lines[0])
	testSend := b.strings(`[...document.querySelectorAll('[data-testid="history"] [data-testid="event"][data-action="test_send"] [data-testid="event-summary"]')].map(e => e.textContent)`)
	require.Len(t, testSend, 1)
	require.Contains(t, testSend[0], "proposer@example.com (done)")
	b.shot("draft-rejected")

	// The campaign was never approved: its History page answers.
	b.do(chromedp.Click(css("tab-history")), chromedp.WaitVisible(css("no-plan")))
	require.Equal(t, []string{"create", "import", "test_send", "submit", "reject"},
		b.strings(`[...document.querySelectorAll('[data-testid="event"]')].map(e => e.dataset.action)`), "oldest first")
	b.waitJS(`document.title.startsWith('History of March newsletter')`, 5*time.Second, "the history page's title")

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s.cmd.Wait(), s.output())
}

// strings evaluates a JavaScript expression that gives a list of strings.
func (b *browser) strings(expr string) []string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](expr))
	require.NoError(b.t, err, expr)
	return v
}
