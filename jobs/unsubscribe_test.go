package jobs_test

import (
	"encoding/base64"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web"
)

// TestUnsubscribeLinkEndToEnd: a campaign's message in the maildir outbox
// carries List-Unsubscribe (an absolute link under the public URL) and
// List-Unsubscribe-Post; {{.unsubscribe_url}} puts the same link in the
// body. A GET of the link (a mail scanner) changes nothing; a forged or
// tampered link changes nothing and says so; the RFC 8058 POST, with no
// cookie and no CSRF token, suppresses the address (200), and a second
// one is a no-op that still answers 200. A transactional campaign's
// message carries no such header, and its plan hash differs from the same
// campaign's with the link.
func TestUnsubscribeLinkEndToEnd(t *testing.T) {
	t.Parallel()
	// The server answering the links; its URL is the public URL the
	// workers build them from.
	var handler http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	outbox := t.TempDir()
	w := newWorld(t, jobs.Config{PublicURL: ts.URL + "/onceplan"}, "outbox=maildir://"+outbox)
	handler = http.StripPrefix("/onceplan", web.NewServer(web.Config{Pool: w.pool, Approval: w.svc}).Handler())

	create := func(name string, transactional bool) approval.Result {
		res, err := w.svc.Create(w.ctx, w.proposer, approval.CreateParams{
			Name: name, Provider: "outbox", Transactional: transactional,
			Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}",
				Text: "Hi {{.name}}\nUnsubscribe: {{.unsubscribe_url}}\n"},
			Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email,name\nAnn@Example.com,Ann\n")},
		})
		require.NoError(t, err)
		return res
	}
	run := func(res approval.Result) {
		sub, err := w.svc.Submit(w.ctx, w.proposer, res.Campaign.ID)
		require.NoError(t, err)
		_, err = w.svc.Approve(w.ctx, w.approver, res.Campaign.ID, sub.PlanHash)
		require.NoError(t, err)
		_, err = w.svc.Start(w.ctx, w.operator, res.Campaign.ID)
		require.NoError(t, err)
		await.Until(t, 30*time.Second, "the campaign to complete", func() bool { return w.campaignState(t, res.Campaign.ID) == approval.StateCompleted })
	}
	w.start(t)

	// The same campaign with the link and without: the hash covers the
	// choice, and the link's is the hash every plan had before it.
	linked := create("newsletter", false)
	transactional := create("newsletter", true)
	require.True(t, linked.Campaign.ListUnsubscribe)
	require.False(t, transactional.Campaign.ListUnsubscribe)
	hash := func(d approval.Draft, transactional bool) string {
		return plan.PlanHash(plan.PlanHashInput{Payload: d.Payload, Provider: "outbox", Tool: "email.send",
			TargetCount: d.TargetCount, ListDigest: d.ListDigest, Transactional: transactional})
	}
	require.Equal(t, linked.PlanHash, hash(linked.Draft, false), "a campaign with the link hashes as every plan did before the choice existed")
	require.Equal(t, transactional.PlanHash, hash(transactional.Draft, true))
	require.NotEqual(t, transactional.PlanHash, hash(transactional.Draft, false), "the same campaign with the link has another hash")

	run(linked)
	msg := onlyMessage(t, outbox)
	link := msg.Header.Get("List-Unsubscribe")
	require.Equal(t, "List-Unsubscribe=One-Click", msg.Header.Get("List-Unsubscribe-Post"))
	require.True(t, strings.HasPrefix(link, "<"+ts.URL+"/onceplan/u/") && strings.HasSuffix(link, ">"), link)
	link = strings.TrimSuffix(strings.TrimPrefix(link, "<"), ">")
	body := messageBody(t, msg)
	require.Contains(t, body, "Unsubscribe: "+link, "{{.unsubscribe_url}} renders the link")
	require.NotContains(t, link, "v1:", "the link is not the effect key")

	suppressed := func() bool {
		_, found, err := suppression.Lookup(w.ctx, w.pool, "ann@example.com")
		require.NoError(t, err)
		return found
	}
	oneClick := func(u string) *http.Response {
		resp, err := http.Post(u, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}

	// A mail scanner's GET: the confirm page, nothing changed.
	resp, err := http.Get(link)
	require.NoError(t, err)
	page := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `data-testid="unsubscribe-confirm"`)
	require.Contains(t, page, "ann@example.com")
	require.False(t, suppressed(), "a GET never unsubscribes")

	// Forged and tampered links: refused, nothing changed.
	token := link[strings.LastIndex(link, "/")+1:]
	tampered := []byte(token)
	tampered[len(tampered)/2] ^= 1
	if tampered[len(tampered)/2] == '-' || tampered[len(tampered)/2] == '_' {
		tampered[len(tampered)/2] = 'A'
	}
	base := ts.URL + "/onceplan/u/"
	for _, forged := range []string{base + string(tampered), base + "not-a-token", base + url.PathEscape(strings.Repeat("A", 80))} {
		resp := oneClick(forged)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, resp.StatusCode, forged)
		require.False(t, suppressed(), "a forged link changes nothing: %s", forged)
	}

	// The one-click POST, as a mail provider sends it: no cookie, no
	// CSRF token.
	require.Equal(t, http.StatusOK, oneClick(link).StatusCode)
	require.True(t, suppressed())
	e, found, err := suppression.Lookup(w.ctx, w.pool, "ann@example.com")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, suppression.Unsubscribed, e.Reason)
	require.Equal(t, suppression.FromUnsubscribe, e.Source)
	require.Equal(t, linked.Campaign.ID, e.CampaignID)
	// Again (the confirm page's button, after the provider's POST): a
	// no-op, still 200, with the "unsubscribed" page.
	resp, err = http.PostForm(link, url.Values{"List-Unsubscribe": {"One-Click"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, readAll(t, resp), `data-testid="unsubscribe-done"`)
	entries, _, err := suppression.List(w.ctx, w.pool, suppression.ListParams{Address: "ann@example.com"})
	require.NoError(t, err)
	require.Len(t, entries, 1)

	// A second campaign's list with her address: the import leaves the
	// line out and names it.
	second, err := w.svc.Create(w.ctx, w.proposer, approval.CreateParams{
		Name: "next newsletter", Provider: "outbox",
		Payload: plan.Payload{From: "sender@example.com", Subject: "Hello {{.name}}", Text: "Hi {{.name}}"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader("email,name\nbob@example.com,Bob\nANN@example.com,Ann\n")},
	})
	require.NoError(t, err)
	require.Equal(t, []plan.Suppressed{{Line: 3, Reason: "unsubscribed"}}, second.Import.Suppressed)
	require.Equal(t, 1, second.Import.TargetCount)

	// The transactional campaign's message: no unsubscribe headers, and
	// {{.unsubscribe_url}} renders empty. (Its address is suppressed
	// now; take it off first, so it is sent.)
	_, err = suppression.Remove(w.ctx, w.pool, "ann@example.com", "admin@example.com", "test: transactional mail")
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(outbox, "new")))
	require.NoError(t, os.MkdirAll(filepath.Join(outbox, "new"), 0o755))
	run(transactional)
	msg = onlyMessage(t, outbox)
	require.Empty(t, msg.Header.Get("List-Unsubscribe"))
	require.Empty(t, msg.Header.Get("List-Unsubscribe-Post"))
	require.Contains(t, messageBody(t, msg), "Unsubscribe: \n")
}

func onlyMessage(t *testing.T, outbox string) *mail.Message {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(outbox, "new", "*"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	f, err := os.Open(files[0])
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	m, err := mail.ReadMessage(f)
	require.NoError(t, err)
	return m
}

// messageBody is a single-part message's body, decoded, with LF line ends.
func messageBody(t *testing.T, m *mail.Message) string {
	t.Helper()
	var r io.Reader = m.Body
	switch strings.ToLower(m.Header.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r)
	}
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
