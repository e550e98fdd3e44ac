package main

// In a real headless Chromium against `onceplan serve`: a campaign whose
// provider cannot be reached (nothing listens on its port: every request
// fails before it is written). While its targets wait between tries, the
// run page says why — the error, grouped, with the count and an example —
// and when they are tried again; after the last try the campaign ends
// non-green, saying that they never reached the provider, with the count;
// the campaigns list and the API say the same.

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// apiCall calls the JSON API with a bearer token and decodes the answer.
func apiCall(t *testing.T, base, token, method, path string, body any) map[string]any {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, base+"/api/v1"+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Less(t, resp.StatusCode, 300, "%s %s: %v", method, path, out)
	return out
}

// onceplanCLI runs the binary on the server's data dir and returns its stdout.
func onceplanCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append(args, "--data-dir", dir)...)
	cmd.Env = append(cmd.Environ(), "DATABASE_URL=")
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "onceplan %v: %s", args, stderr)
	return strings.TrimSpace(string(out))
}

var nextTryRE = regexp.MustCompile(`^will try again at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`)

func TestBrowserUnreachableProviderEndsSayingSo(t *testing.T) {
	chrome := chromium(t)
	t.Parallel()
	dir := dataDir(t)
	b := newBrowser(t, chrome)

	// A port nobody listens on: connection refused, before any request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/hook"
	require.NoError(t, ln.Close())
	s := serveUIWith(t, dir, "127.0.0.1:0", browserRate, "--owner-timeout", "3s",
		"--provider", "dead="+dead, "--max-attempts", "5")
	base := s.url

	// A proposer drafts three targets on that provider; the admin
	// approves and starts it (the API, as a script would).
	onceplanCLI(t, dir, "user", "add", "--email", "pat@example.com", "--role", "proposer")
	pat := onceplanCLI(t, dir, "token", "create", "--user", "pat@example.com", "--name", "e2e")
	admin := onceplanCLI(t, dir, "token", "create", "--user", adminEmail, "--name", "e2e")
	created := apiCall(t, base, pat, http.MethodPost, "/campaigns", map[string]any{
		"name": "Unreachable", "provider": "dead", "from": "news@example.com", "subject": "Hi {{.first_name}}", "text": "Hello",
		"targets": []map[string]any{
			{"address": "ann@example.com", "vars": map[string]string{"first_name": "Ann"}},
			{"address": "bob@example.com", "vars": map[string]string{"first_name": "Bob"}},
			{"address": "cat@example.com", "vars": map[string]string{"first_name": "Cat"}},
		}})
	id := created["id"].(string)
	sub := apiCall(t, base, pat, http.MethodPost, "/campaigns/"+id+"/submit", nil)
	apiCall(t, base, admin, http.MethodPost, "/campaigns/"+id+"/approve", map[string]any{"plan_hash": sub["plan_hash"]})
	apiCall(t, base, admin, http.MethodPost, "/campaigns/"+id+"/start", nil)
	run := base + "/campaigns/" + id + "/run"

	// While the targets wait between tries: why, grouped, and when the
	// next try is (the page is read again until it says so).
	b.signIn(base, adminEmail, adminPassword)
	b.do(chromedp.Navigate(run), chromedp.WaitVisible(css("live")))
	const waiting = `(() => { const g = document.querySelector('[data-testid="why-group"][data-kind="unsent"]');
		return g !== null && g.dataset.count === '3' && g.dataset.retrying === 'yes' &&
			g.querySelector('[data-testid="why-next"]').textContent.startsWith('will try again at '); })()`
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](waiting))
		if err == nil && ok {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run page never said the targets wait for a next try:\n%s", s.output())
		b.do(chromedp.Navigate(run), chromedp.WaitVisible(css("live")))
	}
	require.Regexp(t, nextTryRE, b.text("why-next"))
	require.Contains(t, b.text("why-what"), "did not reach the provider")
	reason := b.text("why-reason")
	require.Contains(t, reason, "connection refused")
	require.Contains(t, reason, ln.Addr().String())
	require.Contains(t, []string{"ann@example.com", "bob@example.com", "cat@example.com"}, b.text("why-example"))
	require.Equal(t, "running", b.attr("state", "data-state"))
	b.shot("run-retrying")

	// After the last try: the campaign completes, and the page (reloaded
	// by its script when the state changes) ends non-green, naming what
	// happened and how many.
	b.waitJS(`document.querySelector('[data-testid="ending"]') !== null`, 120*time.Second, "the campaign's ending on the run page")
	require.Equal(t, "incomplete", b.attr("ending", "data-ending"))
	require.Equal(t, "The campaign completed without every target getting its effect: 0 of 3 sent; 3 never reached the provider.", b.text("ending-summary"))
	require.Contains(t, b.text("ending-hint"), "check its address (--provider) and the network")
	require.Equal(t, "completed", b.attr("state", "data-state"))
	require.Equal(t, "incomplete", b.attr("state", "data-ending"))
	require.Equal(t, "completed, not all sent", b.text("state"))
	green, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('[data-testid="state"]')).backgroundColor`))
	require.NoError(t, err)
	require.NotEqual(t, "rgb(223, 240, 227)", green, "not the green of a completed campaign")
	require.Equal(t, "unreached", b.attr("why-group", "data-kind"))
	require.Equal(t, "3", b.text("why-count"))
	require.Contains(t, b.text("why-what"), "never reached the provider")
	require.Contains(t, b.text("why-reason"), "(never reached the provider; no retries left after 5 attempts)")
	require.Equal(t, "no, not by itself: a resume sends them once more", b.text("why-next"))
	b.shot("run-never-reached")

	// The list says the same.
	b.do(chromedp.Navigate(base+"/campaigns"), chromedp.WaitVisible(css("campaigns")))
	row := `document.querySelector('[data-testid="campaign-row"][data-id="` + id + `"]')`
	list, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[`+row+`.querySelector('[data-testid="state"]').dataset.ending, `+
		row+`.querySelector('[data-testid="outcome-parts"]').textContent, `+row+`.querySelector('[data-testid="audit-verdict"]').textContent]`))
	require.NoError(t, err)
	require.Equal(t, []string{"incomplete", "3 never reached the provider", "audit: does not hold (3 never reached the provider)"}, list)

	// The audit page: the same ending, and the reason in words.
	b.do(chromedp.Navigate(base+"/campaigns/"+id+"/audit"), chromedp.WaitVisible(css("audit")))
	require.Equal(t, "incomplete", b.attr("state", "data-ending"))
	require.Equal(t, "does not hold", b.text("audit-holds"))
	require.Equal(t, "The campaign completed without every target getting its effect: 0 of 3 sent; 3 never reached the provider.", b.text("audit-ending"))
	require.Contains(t, b.text("audit-reason"), "3 targets never reached the provider: every try failed before the request left")

	// And the API: state completed (the contract's name), the outcome,
	// the next step, the list's outcome and the audit.
	got := apiCall(t, base, admin, http.MethodGet, "/campaigns/"+id, nil)
	require.Equal(t, "completed", got["state"])
	outcome := got["outcome"].(map[string]any)
	require.Equal(t, "incomplete", outcome["ending"])
	require.Equal(t, float64(3), outcome["never_reached"])
	require.Equal(t, float64(0), outcome["refused"])
	require.Equal(t, b.textOfEnding(t, base, id), outcome["summary"])
	var unreached map[string]any
	for _, st := range got["next_steps"].([]any) {
		if st := st.(map[string]any); st["kind"] == "unreached" {
			unreached = st
		}
	}
	require.NotNil(t, unreached, "%v", got["next_steps"])
	require.Equal(t, float64(3), unreached["count"])
	page := apiCall(t, base, admin, http.MethodGet, "/campaigns", nil)
	for _, it := range page["items"].([]any) {
		if it := it.(map[string]any); it["id"] == id {
			require.Equal(t, outcome, it["outcome"])
		}
	}
	audit := apiCall(t, base, admin, http.MethodGet, "/campaigns/"+id+"/audit", nil)
	require.Equal(t, []any{float64(3), float64(3), false}, []any{audit["failed"], audit["unreached"], audit["holds"]})

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, s.cmd.Wait(), s.output())
}

// textOfEnding is the ending's summary as the run page shows it.
func (b *browser) textOfEnding(t *testing.T, base, id string) string {
	t.Helper()
	b.do(chromedp.Navigate(base+"/campaigns/"+id+"/run"), chromedp.WaitVisible(css("ending-summary")))
	return b.text("ending-summary")
}
