package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
)

// follow GETs where a redirect leads, as the browser does after a POST.
func (c *client) follow(rec *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	c.t.Helper()
	require.Equal(c.t, http.StatusSeeOther, rec.Code, rec.Body.String())
	return c.get(rec.Header().Get("Location"))
}

// formTokenOn returns the one-time token of the first form on the page at
// path that posts to action.
func (c *client) formTokenOn(path, action string) string {
	c.t.Helper()
	d := parse(c.t, c.get(path))
	form := d.Find(`form[method=post][action="` + action + `"]`).First()
	require.Equal(c.t, 1, form.Length(), "no form posting to %s on %s", action, path)
	token := form.Find(`input[name=form_token]`).AttrOr("value", "")
	require.NotEmpty(c.t, token)
	return token
}

// campaignsNamed counts the campaigns with a name.
func (b *bundle) campaignsNamed(name string) int {
	var n int
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM campaign WHERE name = $1`, name).Scan(&n))
	return n
}

// events lists a campaign's audit trail actions, oldest first.
func (b *bundle) events(id string) []string {
	evs, err := approval.Events(context.Background(), b.pool, id)
	require.NoError(b.t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Action)
	}
	return out
}

// TestCreateFormSentTwiceMakesOneCampaign: "Create draft" with a list
// answers with a redirect to the draft, which shows the import report; the
// same form sent again (a reload of the old answer, the back button, a
// double click, even after a restart) makes no second campaign and lands
// where the first did.
func TestCreateFormSentTwiceMakesOneCampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.as["proposer"]
	fields := func(token string) map[string]string {
		return map[string]string{"name": "Once only", "provider": "outbox", "required_approvals": "1",
			"from": "Billing <billing@example.com>", "subject": "Hello {{.first_name}}", "text": "Dear {{.first_name}}",
			formTokenField: token}
	}
	token := p.formTokenOn("/campaigns/new", "/campaigns")
	firstToken := token
	first := p.upload("/campaigns", fields(token), csvOf(3))
	require.Equal(t, http.StatusSeeOther, first.Code, first.Body.String())
	loc := first.Header().Get("Location")
	require.Contains(t, loc, "/draft?")
	d := parse(t, p.follow(first))
	require.Equal(t, "3", tid(d, "import-accepted").Text())
	require.Equal(t, "Hello Name 1", tid(d, "preview-subject").Text())
	require.Equal(t, "Draft created.", tid(d, "flash").Text())

	again := p.upload("/campaigns", fields(token), csvOf(3))
	require.Equal(t, http.StatusSeeOther, again.Code, again.Body.String())
	require.Equal(t, loc, again.Header().Get("Location"))
	require.Equal(t, 1, b.campaignsNamed("Once only"))

	// A double click: both at once, one campaign.
	token = p.formTokenOn("/campaigns/new", "/campaigns")
	var wg sync.WaitGroup
	locs := make([]string, 2)
	for i := range locs {
		wg.Go(func() {
			f := fields(token)
			f["name"] = "Double click"
			rec := p.upload("/campaigns", f, csvOf(3))
			locs[i] = rec.Header().Get("Location")
		})
	}
	await.Group(t, &wg, time.Minute, "both submits of the double click to be answered")
	require.Equal(t, 1, b.campaignsNamed("Double click"))
	require.NotEmpty(t, locs[0])
	require.Equal(t, locs[0], locs[1])

	// After a restart this process has forgotten the token; the workflow's
	// idempotency key still finds the campaign.
	restarted := NewServer(Config{Pool: b.pool, Approval: b.svc, Providers: b.srv.cfg.Providers})
	p2 := *p
	p2.h = restarted.Handler()
	rec := p2.upload("/campaigns", fields(firstToken), csvOf(3))
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, 1, b.campaignsNamed("Once only"))
	require.True(t, strings.HasPrefix(rec.Header().Get("Location"), strings.Split(loc, "?")[0]), rec.Header().Get("Location"))
}

// TestEveryStateChangingFormCarriesAToken walks the pages a campaign goes
// through: every form that posts carries a one-time token.
func TestEveryStateChangingFormCarriesAToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	draft := b.draft(campaignOpts{})
	pending := b.pending(campaignOpts{})
	running, _ := b.started(campaignOpts{})
	pages := map[string]*client{
		"/campaigns/new":                          b.as["proposer"],
		"/campaigns/" + draft.ID + "/draft":       b.as["proposer"],
		"/campaigns/" + pending.ID + "/approval":  b.as["approver"],
		"/campaigns/" + running.ID + "/run":       b.as["operator"],
		"/campaigns/" + running.ID + "/targets/1": b.as["admin"],
		"/admin": b.as["admin"],
		"/campaigns/" + running.ID + "/draft?preview=2": b.as["proposer"],
	}
	for path, c := range pages {
		d := parse(t, c.get(path))
		forms := d.Find(`form[method=post]`)
		require.Greater(t, forms.Length(), 0, path)
		seen := map[string]bool{}
		forms.Each(func(_ int, f *goquerySelection) {
			token := f.Find(`input[name=form_token]`).AttrOr("value", "")
			require.NotEmpty(t, token, "%s: the form posting to %s has no form token", path, f.AttrOr("action", ""))
			require.False(t, seen[token], "%s: two forms share a token", path)
			seen[token] = true
		})
	}
}

// TestActionSentTwiceActsOnce: a decision's form sent again answers as the
// first did and records nothing more; the same POST without a token (a
// script) is still refused as before.
func TestActionSentTwiceActsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.started(campaignOpts{})
	op := b.as["operator"]
	run := "/campaigns/" + c.ID + "/run"
	token := op.formTokenOn(run, "/campaigns/"+c.ID+"/pause")
	for range 2 {
		rec := op.post("/campaigns/"+c.ID+"/pause", url.Values{formTokenField: {token}})
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		require.Equal(t, run+"?flash=paused", rec.Header().Get("Location"))
	}
	require.Equal(t, approval.StatePaused, b.campaign(c.ID).State)
	require.Equal(t, 1, count(b.events(c.ID), "pause"))
	require.Equal(t, http.StatusConflict, op.post("/campaigns/"+c.ID+"/pause", nil).Code)

	// The proposer saves the same message form twice: one edit.
	d := b.draft(campaignOpts{})
	p := b.as["proposer"]
	token = p.formTokenOn("/campaigns/"+d.ID+"/draft", "/campaigns/"+d.ID+"/payload")
	form := url.Values{"from": {"a@example.com"}, "subject": {"Hi {{.first_name}}"}, "text": {"x"}, formTokenField: {token}}
	for range 2 {
		require.Equal(t, http.StatusSeeOther, p.post("/campaigns/"+d.ID+"/payload", form).Code)
	}
	require.Equal(t, 1, count(b.events(d.ID), "edit"))

	// An import sent twice: one import, and both land on its report.
	token = p.formTokenOn("/campaigns/"+d.ID+"/draft", "/campaigns/"+d.ID+"/import")
	var locs []string
	for range 2 {
		rec := p.upload("/campaigns/"+d.ID+"/import", map[string]string{formTokenField: token, "append": "1"}, "email,first_name\nzed@example.com,Zed\n")
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		locs = append(locs, rec.Header().Get("Location"))
	}
	require.Equal(t, locs[0], locs[1])
	require.Equal(t, 2, count(b.events(d.ID), "import"), "the draft's first list, and this one once")
	require.Equal(t, "6", tid(parse(t, p.get(locs[1])), "import-target-count").Text())
}

// TestRefusedFormMaySendAgain: a form refused with its field errors changed
// nothing, so its token is not spent.
func TestRefusedFormMaySendAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.as["proposer"]
	token := p.formTokenOn("/campaigns/new", "/campaigns")
	f := map[string]string{"name": "Second try", "provider": "outbox", "required_approvals": "1",
		"from": "not an address", "subject": "Hi", "text": "x", formTokenField: token}
	require.Equal(t, http.StatusUnprocessableEntity, p.upload("/campaigns", f, "").Code)
	f["from"] = "a@example.com"
	require.Equal(t, http.StatusSeeOther, p.upload("/campaigns", f, "").Code)
	require.Equal(t, 1, b.campaignsNamed("Second try"))
}

// TestSecretShownOnceAfterTheRedirect: a new token's secret is on the page
// the redirect leads to, once; the form sent again makes no second token.
func TestSecretShownOnceAfterTheRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.as["admin"]
	token := a.formTokenOn("/admin", "/admin/tokens")
	form := url.Values{"user": {"viewer@example.com"}, "name": {"nightly"}, formTokenField: {token}}
	rec := a.post("/admin/tokens", form)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	// Another admin cannot read what the redirect names.
	other := b.user("admin2@example.com", auth.RoleAdmin)
	require.Equal(t, 0, tid(parse(t, other.get(rec.Header().Get("Location"))), "new-token").Length())
	page := a.follow(rec)
	require.True(t, strings.HasPrefix(tid(parse(t, page), "new-token-value").Text(), "op_"))
	require.Equal(t, 0, tid(parse(t, a.get(rec.Header().Get("Location"))), "new-token").Length(), "shown once")
	require.Equal(t, http.StatusSeeOther, a.post("/admin/tokens", form).Code)
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_token WHERE name = 'nightly'`).Scan(&n))
	require.Equal(t, 1, n)
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
