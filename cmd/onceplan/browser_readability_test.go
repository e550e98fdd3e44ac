package main

// In a real headless Chromium against `onceplan serve` (as
// TestBrowserApproveRunKillResume): what a newcomer reads after the demo.
// One target is "1 target"; the merge-variable hint names the list's own
// columns; a preview by address moves "Target #" and the test send to
// that target; the campaign list shows its colour legend once and says
// whether the audit holds; the unsubscribe page names the campaign and
// its sender; and the Suppressions page names that campaign, linked, not
// its id.

import (
	"net/mail"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

var unsubscribeLinkRE = regexp.MustCompile(`/u/([A-Za-z0-9_-]+)>`)

// outboxMessage is the first message in the outbox whose header passes ok.
func outboxMessage(t *testing.T, dir string, ok func(mail.Header) bool) (mail.Header, string) {
	t.Helper()
	for _, name := range outboxFiles(t, dir) {
		raw, err := os.ReadFile(filepath.Join(dir, "outbox", "new", name))
		require.NoError(t, err)
		m, err := mail.ReadMessage(strings.NewReader(string(raw)))
		require.NoError(t, err)
		if ok(m.Header) {
			return m.Header, string(raw)
		}
	}
	return nil, ""
}

func TestBrowserReadability(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)
	s := serveUI(t, dir, "3s")
	base := s.url

	b.signIn(base, adminEmail, adminPassword)
	proposerPW := b.addUser(base, "proposer@example.com", "proposer")
	b.signOut()

	writeCSV := func(name, body string) string {
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		return path
	}
	one := writeCSV("one.csv", "email,first_name,company\nann@example.com,Ann,Acme\n")
	three := writeCSV("three.csv", "email,first_name,company\nann@example.com,Ann,Acme\nbob@example.com,Bob,Bolt\ncat@example.com,Cat,Cogs\n")

	// A list of one: "1 target", and the hint names its columns.
	b.signIn(base, "proposer@example.com", proposerPW)
	b.do(
		chromedp.Click(css("new-campaign")),
		chromedp.WaitVisible(css("new-campaign-form")),
		chromedp.SendKeys(css("field-name"), "Spring newsletter"),
		chromedp.SendKeys(css("field-from"), "Acme News <news@example.com>"),
		chromedp.SendKeys(css("field-subject"), "Hello {{.first_name}}"),
		chromedp.SetValue(css("field-text"), "Dear {{.first_name}} of {{.company}}:\n{{.unsubscribe_url}}"),
		chromedp.SetUploadFiles(css("field-targets"), []string{one}),
		chromedp.Click(css("create-campaign")),
		chromedp.WaitVisible(css("import-report")),
	)
	campaignPath := strings.TrimPrefix(strings.TrimSuffix(strings.SplitN(b.location(), "?", 2)[0], "/draft"), base)
	b.waitJS(`document.querySelector('[data-testid="target-count"]').parentElement.textContent.includes('1 target.')`,
		10*time.Second, `"1 target." beside the count`)
	require.Contains(t, b.text("import-report"), "The draft now has 1 target.")
	require.Contains(t, b.text("import-report"), "1 line:")
	vars, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('[data-testid="merge-variable"]')].map(e => e.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"{{.company}}", "{{.first_name}}"}, vars, "the list's own columns")
	require.Contains(t, b.text("merge-hint"), "Merge variables of this list:")

	// Three targets; a preview by address shows that target's number, and
	// the test send renders that target.
	b.do(
		chromedp.SetUploadFiles(css("import-file"), []string{three}),
		chromedp.Click(css("import-submit")),
	)
	// The first import's report is still on the page until the second's
	// answer replaces it: wait for the new count, not for any report.
	b.waitJS(`document.querySelector('[data-testid="import-target-count"]')?.textContent === '3'`,
		30*time.Second, "the report of the second import")
	b.do(
		chromedp.SendKeys(css("preview-address"), "Cat@Example.com"),
		chromedp.Click(css("preview-submit")),
	)
	b.waitJS(`document.querySelector('[data-testid="preview-to"]') !== null && document.querySelector('[data-testid="preview-to"]').textContent === 'cat@example.com'`,
		10*time.Second, "the preview of cat@example.com")
	ordinal, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="preview-ordinal"]').value`))
	require.NoError(t, err)
	require.Equal(t, "3", ordinal, `"Target #" follows the previewed address`)
	sendOrdinal, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="test-send-ordinal"]').value`))
	require.NoError(t, err)
	require.Equal(t, "3", sendOrdinal, "the test send renders the previewed target")
	b.shot("readability-draft")
	b.do(chromedp.Click(css("test-send-submit")), chromedp.WaitVisible(css("flash")))
	h, _ := outboxMessage(t, dir, func(h mail.Header) bool { return strings.Contains(h.Get("To"), "proposer@example.com") })
	require.NotNil(t, h, "the test message is in the outbox")
	require.Equal(t, "[Test] Hello Cat", h.Get("Subject"))

	// Submitted, approved and started by the admin; the campaign list shows
	// the legend once and says whether the audit holds.
	b.do(chromedp.Click(css("submit-for-approval")), chromedp.WaitVisible(css("approval")))
	b.signOut()
	b.signIn(base, adminEmail, adminPassword)
	b.do(chromedp.Navigate(base+campaignPath+"/approval"), chromedp.WaitVisible(css("approve")), chromedp.Click(css("approve")))
	b.waitJS(`location.pathname.endsWith('/run')`, 30*time.Second, "the run page after the approval")
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	require.Equal(t, "audit: does not hold yet (3 not sent)", b.text("audit-verdict"))
	b.do(chromedp.Navigate(base+campaignPath+"/run"), chromedp.WaitVisible(css("action-start")), chromedp.Click(css("action-start")))
	b.waitJS(`document.querySelector('[data-testid="count-done"]') !== null && document.querySelector('[data-testid="count-done"]').textContent === '3'`,
		60*time.Second, "the three messages sent")
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	require.Equal(t, "audit: holds", b.text("audit-verdict"))
	require.Equal(t, "3 / 3", b.text("headline"))
	require.Equal(t, "3 done", b.text("counts-brief"))
	legends, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]int](
		`[document.querySelectorAll('[data-testid="counts-legend"]').length, document.querySelectorAll('[data-testid="campaign-row"] ul').length]`))
	require.NoError(t, err)
	require.Equal(t, []int{1, 0}, legends, "one legend above the list, none in its rows")
	b.shot("readability-campaigns")
	b.signOut()

	// Bob follows his message's unsubscribe link: the page names the
	// campaign and its sender.
	_, raw := outboxMessage(t, dir, func(h mail.Header) bool { return strings.Contains(h.Get("To"), "bob@example.com") })
	m := unsubscribeLinkRE.FindStringSubmatch(raw)
	require.NotNil(t, m, "bob's message carries an unsubscribe link:\n%s", raw)
	b.do(chromedp.Navigate(base+"/u/"+m[1]), chromedp.WaitVisible(css("unsubscribe-confirm")))
	require.Equal(t, "This link came in “Spring newsletter”, from Acme News <news@example.com>.", b.text("unsubscribe-campaign"))
	b.do(chromedp.Click(css("unsubscribe-confirm")), chromedp.WaitVisible(css("unsubscribe-done")))
	require.Equal(t, "You are unsubscribed: bob@example.com will get no more campaign messages sent through this mailing service (127.0.0.1), "+
		"from Acme News <news@example.com> or from any other sender that uses it.", b.text("unsubscribe-done"))

	// The Suppressions page names the campaign, linked, not its id.
	b.signIn(base, adminEmail, adminPassword)
	b.do(chromedp.Navigate(base+"/suppressions"), chromedp.WaitVisible(css("suppressions")))
	require.Equal(t, "unsubscribe link", b.text("suppression-source"))
	require.Equal(t, "Spring newsletter", b.text("suppression-campaign"))
	require.Equal(t, campaignPath, b.attr("suppression-campaign", "href"))
	b.shot("readability-suppressions")

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s.cmd.Wait(), s.output())
}
