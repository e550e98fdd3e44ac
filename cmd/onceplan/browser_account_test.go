package main

// In a real headless Chromium against `onceplan serve`, what a listmonk
// user looks for after the demo: changing one's own password, scheduling
// a campaign on the form, and a new campaign cloned from a previous one
// (its list imported again, the suppression list applied).

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

func TestBrowserPasswordScheduleAndClone(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)
	s := serveUI(t, dir, "3s")
	base := s.url

	b.signIn(base, adminEmail, adminPassword)
	proposerPW := b.addUser(base, "proposer@example.com", "proposer")
	b.signOut()

	// The proposer changes the one-time password they were given.
	const newPassword = "my own passphrase, not the admin's"
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Click(css("nav-password")),
		chromedp.WaitVisible(css("password-form")),
		chromedp.SendKeys(css("current-password"), "not the password"),
		chromedp.SendKeys(css("new-password"), newPassword),
		chromedp.SendKeys(css("new-password-confirm"), newPassword),
		chromedp.Click(css("password-save")),
		chromedp.WaitVisible(css("error-current_password")),
	)
	b.do(
		chromedp.SendKeys(css("current-password"), proposerPW),
		chromedp.SendKeys(css("new-password"), newPassword),
		chromedp.SendKeys(css("new-password-confirm"), newPassword),
		chromedp.Click(css("password-save")),
	)
	b.waitJS(`document.querySelector('[data-testid="flash"]') !== null && document.querySelector('[data-testid="flash"]').textContent.includes('Your password is changed')`,
		30*time.Second, "the password changed")
	require.Contains(t, b.text("signed-in-as"), "proposer@example.com", "this browser stays signed in")
	b.signOut()
	b.do(
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(css("login-email")),
		chromedp.SendKeys(css("login-email"), "proposer@example.com"),
		chromedp.SendKeys(css("login-password"), proposerPW),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("error")),
	)
	require.Contains(t, b.text("error"), "wrong", "the old password no longer signs in")
	b.signIn(base, "proposer@example.com", newPassword)

	// A campaign scheduled on the form.
	csvPath := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte("email,first_name\nann@example.com,Ann\nbob@example.com,Bob\ncat@example.com,Cat\n"), 0o644))
	b.do(
		chromedp.Navigate(base+"/campaigns/new"),
		chromedp.WaitVisible(css("new-campaign-form")),
		chromedp.SendKeys(css("field-name"), "Spring sale"),
		chromedp.SendKeys(css("field-from"), "Sales <sales@example.com>"),
		chromedp.SendKeys(css("field-subject"), "Spring, {{.first_name}}"),
		chromedp.SetValue(css("field-text"), "Dear {{.first_name}},\nspring is here."),
		chromedp.Click(css("field-start-at")),
		chromedp.SetValue(css("field-scheduled-at"), "2030-03-20T09:00"),
		chromedp.SetUploadFiles(css("field-targets"), []string{csvPath}),
		chromedp.Click(css("create-campaign")),
		chromedp.WaitVisible(css("import-report")),
	)
	require.Equal(t, "starts by itself at 2030-03-20 09:00:00 UTC, once approved", b.text("starts"))
	b.signOut()

	// Bob unsubscribed meanwhile: the admin suppresses him.
	b.signIn(base, adminEmail, adminPassword)
	b.do(
		chromedp.Navigate(base+"/suppressions"),
		chromedp.WaitVisible(css("suppression-add-form")),
		chromedp.SendKeys(css("suppression-address"), "bob@example.com"),
		chromedp.SetValue(css("suppression-reason"), "unsubscribed"),
		chromedp.Click(css("suppression-add")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="suppression"][data-address="bob@example.com"]`)),
	)
	// The admin trail says the proposer changed their own password.
	b.do(chromedp.Navigate(base+"/admin"), chromedp.WaitVisible(css("admin-events")))
	b.waitJS(`[...document.querySelectorAll('[data-testid="admin-event"][data-action="user_password"]')].some(e => e.textContent.includes('proposer@example.com'))`,
		5*time.Second, "the password change in the admin trail")
	b.signOut()

	// The proposer clones the campaign: the form comes filled, the list is
	// imported again without Bob.
	b.signIn(base, "proposer@example.com", newPassword)
	b.do(
		chromedp.Navigate(base+"/campaigns"),
		chromedp.WaitVisible(css("clone")),
		chromedp.Click(css("clone")),
		chromedp.WaitVisible(css("copy-source")),
	)
	require.Contains(t, b.text("copy-source"), "3 targets")
	name, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="field-name"]').value`))
	require.NoError(t, err)
	require.Equal(t, "Spring sale (copy)", name)
	subject, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="field-subject"]').value`))
	require.NoError(t, err)
	require.Equal(t, "Spring, {{.first_name}}", subject)
	b.shot("clone-form")
	b.do(chromedp.Click(css("create-campaign")), chromedp.WaitVisible(css("import-report")))
	require.Equal(t, "Spring sale (copy)", b.text("campaign-name"))
	require.Equal(t, "2", b.text("import-accepted"))
	require.Equal(t, "1", b.text("import-suppressed"), "the suppression list applied at import")
	require.Equal(t, "2", b.text("target-count"))
	require.Contains(t, b.text("starts"), "when an operator presses Start", "the schedule is chosen anew")
	created := b.strings(`[...document.querySelectorAll('[data-testid="history"] [data-testid="event"][data-action="create"] [data-testid="event-summary"]')].map(e => e.textContent)`)
	require.Len(t, created, 1)
	require.Contains(t, created[0], `from campaign "Spring sale"`)
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	campaigns, err := chromedp.Run(b.ctx, chromedp.Evaluate[int64](`document.querySelectorAll('[data-testid="campaign-row"]').length`))
	require.NoError(t, err)
	require.EqualValues(t, 2, campaigns)

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s.cmd.Wait(), s.output())
}
