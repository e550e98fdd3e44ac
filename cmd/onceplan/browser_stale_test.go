package main

// In a real headless Chromium against `onceplan serve --demo`: the run page
// of a running campaign, open while the server is SIGKILLed, says since
// when the server has not answered and disables its buttons; when the
// server is started again on the same database and address, the page
// recovers by itself, without a reload.

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

var silentSinceRE = regexp.MustCompile(`^The server has not answered since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: `)

func TestBrowserRunPageSaysWhenTheServerIsSilent(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)

	// The demo's 300 messages at 2 a second: still running when the
	// server is killed, and after it is back.
	const rate = "2/s"
	s1 := serveUIWith(t, dir, "127.0.0.1:0", rate, "--demo", "--owner-timeout", "3s")
	base := s1.url

	// The admin trail names the proposer the demo made.
	b.signIn(base, adminEmail, adminPassword)
	b.do(chromedp.Navigate(base+"/admin"), chromedp.WaitVisible(css("admin-events")))
	require.Contains(t, b.text("admin-events"), "demo-proposer@onceplan.local")
	b.waitJS(`[...document.querySelectorAll('[data-testid="admin-event"][data-action="user_add"]')].some(e => e.textContent.includes('demo-proposer@onceplan.local'))`,
		10*time.Second, "the demo proposer's user_add in the admin trail")

	// Approve the demo and start it.
	b.do(
		chromedp.Navigate(base+"/campaigns"),
		chromedp.WaitVisible(css("campaign-link")),
		chromedp.Click(css("campaign-link")),
		chromedp.WaitVisible(css("approve")),
		chromedp.Click(css("approve")),
		chromedp.WaitVisible(css("action-start")),
		chromedp.Click(css("action-start")),
		chromedp.WaitVisible(css("action-pause")),
	)
	_, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.onceplanSameDocument = true`))
	require.NoError(t, err)
	b.waitJS(`Number(document.querySelector('[data-testid="count-done"]').textContent.replace(/,/g, '')) >= 2`,
		60*time.Second, "the first messages done (live)")
	require.True(t, b.hidden("stale-banner"), "no banner while the server answers")

	// The server dies under the open page.
	require.NoError(t, s1.cmd.Process.Signal(syscall.SIGKILL))
	s1.cmd.Wait()
	b.waitJS(`document.querySelector('[data-testid="stale-banner"]').hidden === false`, 30*time.Second, "the banner saying the server is silent")
	banner := b.text("stale-banner")
	require.Regexp(t, silentSinceRE, banner)
	b.waitJS(`document.querySelector('[data-testid="action-pause"]').disabled && document.querySelector('[data-testid="action-cancel"]').disabled`,
		5*time.Second, "the buttons disabled")
	doneAtKill := b.number("count-done")
	b.shot("run-server-silent")

	// The server comes back on the same database and address: the page
	// recovers by itself, in the same document.
	s2 := serveUIWith(t, dir, strings.TrimPrefix(base, "http://"), rate, "--demo", "--owner-timeout", "3s")
	require.Equal(t, base, s2.url)
	b.waitJS(`document.querySelector('[data-testid="stale-banner"]').hidden === true && !document.querySelector('[data-testid="action-pause"]').disabled && !document.querySelector('[data-testid="action-cancel"]').disabled`,
		60*time.Second, "the banner gone and the buttons enabled again")
	b.waitJS(`Number(document.querySelector('[data-testid="count-done"]').textContent.replace(/,/g, '')) > `+strconv.Itoa(doneAtKill),
		60*time.Second, "the counts moving again")
	sameDocument, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.onceplanSameDocument === true`))
	require.NoError(t, err)
	require.True(t, sameDocument, "recovered without a reload")
	require.Equal(t, "", b.text("stale-banner"))

	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s2.cmd.Wait(), s2.output())
}

// hidden reports whether the element data-testid names is hidden.
func (b *browser) hidden(testid string) bool {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="`+testid+`"]').hidden`))
	require.NoError(b.t, err, testid)
	return v
}

// number is the number the element data-testid names shows ("1,234").
func (b *browser) number(testid string) int {
	b.t.Helper()
	n, err := strconv.Atoi(strings.ReplaceAll(b.text(testid), ",", ""))
	require.NoError(b.t, err, testid)
	return n
}
