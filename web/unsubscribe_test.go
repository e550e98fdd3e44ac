package web

import (
	"context"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
)

// TestUnsubscribeRoutes: the /u routes need no session and no CSRF token
// (a mail provider's one-click POST has neither, and may come from another
// site); GET shows the confirm button and changes nothing; POST needs the
// RFC 8058 body; the body is bounded; a client address is rate-limited;
// a refused token gets one sentence and the same page whether the address
// exists or not.
func TestUnsubscribeRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.svc.Create(ctx, b.as["proposer"].actor, approval.CreateParams{
		Name: "news", Provider: "outbox",
		Payload: plan.Payload{From: "a@example.com", Subject: "Hi", Text: "Bye: {{.unsubscribe_url}}"},
	})
	require.NoError(t, err)
	token, err := suppression.NewLinks(b.pool, "").Token(ctx, res.Campaign.ID, "ann@example.com")
	require.NoError(t, err)
	path := "/u/" + token
	suppressed := func() bool {
		_, found, err := suppression.Lookup(ctx, b.pool, "ann@example.com")
		require.NoError(t, err)
		return found
	}
	anon := b.anon()
	post := func(p, body string, from string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, p, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "https://mail.example")
		if from != "" {
			req.RemoteAddr = from
		}
		return anon.do(req)
	}

	rec := anon.get(path)
	require.Equal(t, http.StatusOK, rec.Code)
	d := parse(t, rec)
	require.Equal(t, 1, tid(d, "unsubscribe-confirm").Length())
	require.Equal(t, token, tid(d, "unsubscribe-form").AttrOr("action", ""))
	require.Equal(t, "One-Click", d.Find(`input[name="List-Unsubscribe"]`).AttrOr("value", ""))
	require.False(t, suppressed(), "GET never unsubscribes")

	rec = post(path, "", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, tid(parse(t, rec), "unsubscribe-refused").Text(), "List-Unsubscribe=One-Click")
	rec = post(path, "List-Unsubscribe=One-Click&x="+strings.Repeat("a", 2048), "")
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	require.False(t, suppressed())

	// Refused tokens: one sentence; the same for an address Onceplan never
	// heard of as for a known one.
	for p, status := range map[string]int{"/u/x": http.StatusBadRequest, "/u/" + token[:len(token)-2] + "AA": http.StatusNotFound} {
		rec := post(p, "List-Unsubscribe=One-Click", "")
		require.Equal(t, status, rec.Code, p)
		msg := tid(parse(t, rec), "unsubscribe-refused").Text()
		require.Contains(t, msg, "nothing was changed")
		require.NotContains(t, msg, "ann@example.com")
	}
	require.False(t, suppressed())

	rec = post(path, "List-Unsubscribe=One-Click", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, 1, tid(parse(t, rec), "unsubscribe-done").Length())
	require.True(t, suppressed())
	stranger, err := suppression.NewLinks(b.pool, "").Token(ctx, res.Campaign.ID, "nobody@example.com")
	require.NoError(t, err)
	rec2 := post("/u/"+stranger, "List-Unsubscribe=One-Click", "")
	require.Equal(t, http.StatusOK, rec2.Code)
	nonce := regexp.MustCompile(`nonce="[^"]*"`)
	require.Equal(t, nonce.ReplaceAllString(strings.ReplaceAll(rec.Body.String(), "ann@example.com", "nobody@example.com"), ""),
		nonce.ReplaceAllString(rec2.Body.String(), ""), "a known and an unknown address get the same answer")

	// Rate limit per client address: another address is not slowed.
	var limited bool
	for range unsubscribeBurst + 1 {
		if post("/u/x", "List-Unsubscribe=One-Click", "198.51.100.7:1000").Code == http.StatusTooManyRequests {
			limited = true
		}
	}
	require.True(t, limited)
	require.Equal(t, http.StatusTooManyRequests, anonGet(anon, path, "198.51.100.7:1000").Code)
	require.Equal(t, http.StatusOK, anonGet(anon, path, "198.51.100.8:1000").Code)
}

func anonGet(c *client, path, from string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = from
	return c.do(req)
}

// TestTransactionalOnTheForms: the new-campaign form's box makes a
// campaign transactional; the approval page says which kind it is; the
// preview shows a sample link only for a campaign with links.
func TestTransactionalOnTheForms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	create := func(name string, transactional bool) approval.Campaign {
		fields := map[string]string{"name": name, "provider": "outbox", "required_approvals": "1",
			"from": "a@example.com", "subject": "Hi", "text": "Stop: {{.unsubscribe_url}}"}
		if transactional {
			fields["transactional"] = "1"
		}
		rec := b.as["proposer"].upload("/campaigns", fields, "email\nann@example.com\n")
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		id := strings.Split(strings.TrimPrefix(rec.Header().Get("Location"), "/campaigns/"), "/")[0]
		c, err := approval.GetCampaign(ctx, b.pool, id)
		require.NoError(t, err)
		_, err = b.svc.Submit(ctx, b.as["proposer"].actor, id)
		require.NoError(t, err)
		return c
	}
	linked, receipts := create("news", false), create("receipts", true)
	require.True(t, linked.ListUnsubscribe)
	require.False(t, receipts.ListUnsubscribe)

	for c, want := range map[approval.Campaign]string{linked: "Each message carries a one-click unsubscribe link", receipts: "Transactional: no unsubscribe link"} {
		d := parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/approval"))
		require.Equal(t, want, strings.TrimSpace(tid(d, "list-unsubscribe").Text()))
		require.Equal(t, c.ListUnsubscribe, strings.Contains(d.Text(), "Stop: "+suppression.DefaultPublicURL+"/u/sample"), c.Name)
	}
}

// TestOneClickUnsubscribeTakesTheBodyOnly: RFC 8058 puts
// List-Unsubscribe=One-Click in the POST body (urlencoded or multipart);
// in the query string it unsubscribes nobody. The link keeps working: a
// second click answers as the first and changes nothing.
func TestOneClickUnsubscribeTakesTheBodyOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.svc.Create(ctx, b.as["proposer"].actor, approval.CreateParams{
		Name: "news", Provider: "outbox",
		Payload: plan.Payload{From: "a@example.com", Subject: "Hi", Text: "Bye: {{.unsubscribe_url}}"},
	})
	require.NoError(t, err)
	links := suppression.NewLinks(b.pool, "")
	token, err := links.Token(ctx, res.Campaign.ID, "ann@example.com")
	require.NoError(t, err)
	suppressions := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM suppression`).Scan(&n))
		return n
	}
	anon := b.anon()
	post := func(path, contentType, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		return anon.do(req)
	}

	// The query string alone, with an empty body or another body.
	for _, r := range []struct{ ct, body string }{
		{"", ""},
		{"application/x-www-form-urlencoded", ""},
		{"application/x-www-form-urlencoded", "confirm=yes"},
		{"text/plain", "List-Unsubscribe=One-Click"},
	} {
		rec := post("/u/"+token+"?List-Unsubscribe=One-Click", r.ct, r.body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%+v", r)
		require.Contains(t, tid(parse(t, rec), "unsubscribe-refused").Text(), "nothing was changed")
		require.Equal(t, 0, suppressions(), "%+v: the query string unsubscribed", r)
	}

	// The body, multipart: unsubscribed.
	var mp strings.Builder
	w := multipart.NewWriter(&mp)
	require.NoError(t, w.WriteField("List-Unsubscribe", "One-Click"))
	require.NoError(t, w.Close())
	rec := post("/u/"+token, w.FormDataContentType(), mp.String())
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, 1, tid(parse(t, rec), "unsubscribe-done").Length())
	require.Equal(t, 1, suppressions())

	// A second click (urlencoded this time) still works and adds nothing.
	rec = post("/u/"+token, "application/x-www-form-urlencoded", "List-Unsubscribe=One-Click")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, 1, tid(parse(t, rec), "unsubscribe-done").Length())
	require.Equal(t, 1, suppressions())
}
