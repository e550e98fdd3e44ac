package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// The form issues a pre-session CSRF cookie; the sign-in posts it back.
	rec := b.anon().get("/login?next=/campaigns/new")
	require.Equal(t, http.StatusOK, rec.Code)
	var csrfCk *http.Cookie
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == csrfCookie {
			csrfCk = ck
		}
	}
	require.NotNil(t, csrfCk)
	require.True(t, csrfCk.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, csrfCk.SameSite)
	d := parse(t, rec)
	require.Equal(t, csrfCk.Value, d.Find(`input[name=csrf_token]`).AttrOr("value", ""))

	signIn := func(password string) *http.Response {
		form := url.Values{"csrf_token": {csrfCk.Value}, "email": {"proposer@example.com"}, "password": {password}, "next": {"/campaigns/new"}}
		req := httpPost("/login", form)
		req.AddCookie(csrfCk)
		rec := httptestDo(b.srv.Handler(), req)
		return rec.Result()
	}
	resp := signIn("wrong password!!")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp = signIn(testPassword)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/campaigns/new", resp.Header.Get("Location"))
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			session = ck
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, session.SameSite)
	require.Equal(t, "/", session.Path)

	c := &client{t: t, h: b.srv.Handler(), token: session.Value, csrf: csrfFromSession(session.Value)}
	require.Equal(t, http.StatusOK, c.get("/campaigns").Code)
	require.Equal(t, http.StatusSeeOther, c.post("/logout", nil).Code)
	// The session is gone from the database: the old cookie no longer works.
	rec = c.get("/campaigns")
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.True(t, strings.HasPrefix(rec.Header().Get("Location"), "/login"))
}

func TestSignInRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	for _, next := range []string{"https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"} {
		require.Equal(t, "/campaigns", safeNext(next), next)
	}
	require.Equal(t, "/campaigns/x/run?state=done", safeNext("/campaigns/x/run?state=done"))
}

func TestCreateUploadPreviewSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.as["proposer"]

	d := parse(t, p.get("/campaigns/new"))
	require.Equal(t, 1, tid(d, "new-campaign-form").Length())

	// A bad payload is refused field by field.
	rec := p.upload("/campaigns", map[string]string{"name": "Reminder", "provider": "outbox", "required_approvals": "1",
		"from": "not an address", "subject": "Hi", "text": "x"}, "")
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error-from").Text(), "not an email address")

	rec = p.upload("/campaigns", map[string]string{"name": "Reminder", "provider": "outbox", "required_approvals": "1",
		"from": "Billing <billing@example.com>", "subject": "Hello {{.first_name}}", "text": "Dear {{.first_name}}", "html": "<p>Dear {{.first_name}}</p>"}, "")
	require.Equal(t, http.StatusSeeOther, rec.Code)
	loc := rec.Header().Get("Location")
	id := strings.TrimPrefix(strings.Split(loc, "/draft")[0], "/campaigns/")

	// The import report lists accepted, duplicate and rejected lines.
	csv := "email,first_name\nann@example.com,Ann\nANN@example.com,Ann again\nnot-an-address,X\nbob@example.com,Bob\n"
	rec = p.upload("/campaigns/"+id+"/import", nil, csv)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, p.follow(rec))
	require.Equal(t, "4", tid(d, "import-rows").Text())
	require.Equal(t, "2", tid(d, "import-accepted").Text())
	require.Equal(t, "1", tid(d, "import-duplicate").Text())
	require.Equal(t, "1", tid(d, "import-rejected").Text())
	require.Equal(t, 1, tid(d, "rejection").Length())
	require.Contains(t, tid(d, "rejection").Text(), "4")
	require.Equal(t, 1, tid(d, "duplicate").Length())
	// The first target's message is previewed; its HTML is behind a
	// sandboxed frame.
	require.Equal(t, "Hello Ann", tid(d, "preview-subject").Text())
	frame := tid(d, "preview-html")
	require.Equal(t, "", frame.AttrOr("sandbox", "missing"))
	src := frame.AttrOr("src", "")
	require.True(t, strings.HasPrefix(src, "/campaigns/"+id+"/preview.html?"), src)

	rec = p.get(src)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "<p>Dear Ann</p>", rec.Body.String())
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "sandbox")
	require.Equal(t, "SAMEORIGIN", rec.Header().Get("X-Frame-Options"))

	// Preview by address.
	d = parse(t, p.get("/campaigns/"+id+"/draft?address=bob@example.com"))
	require.Equal(t, "bob@example.com", tid(d, "preview-to").Text())

	// Submit posts the hash shown; a changed draft is refused.
	hash := tid(d, "plan-hash").AttrOr("title", "")
	require.Len(t, hash, 64)
	rec = p.post("/campaigns/"+id+"/submit", url.Values{"plan_hash": {strings.Repeat("0", 64)}})
	require.Equal(t, http.StatusConflict, rec.Code)
	rec = p.post("/campaigns/"+id+"/submit", url.Values{"plan_hash": {hash}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/campaigns/"+id+"/approval?flash=submitted", rec.Header().Get("Location"))
	require.Equal(t, approval.StatePendingApproval, b.campaign(id).State)
}

func TestSubmitShowsMissingVariables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{Targets: "email,first_name\nann@example.com,Ann\nbob@example.com,\n",
		Payload: plan.Payload{From: "a@example.com", Subject: "Hi {{.nickname}}", Text: "x"}})
	rec := b.as["proposer"].post("/campaigns/"+c.ID+"/submit", nil)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	d := parse(t, rec)
	require.Equal(t, 1, tid(d, "missing-vars").Length())
	require.Contains(t, tid(d, "missing-vars").Text(), "nickname")
}

func TestApprovalPageQuorumAndHash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{Targets: csvOf(150), Approvals: 2})
	path := "/campaigns/" + c.ID + "/approval"

	// The proposer sees why they cannot approve; no approve button.
	d := parse(t, b.as["proposer"].get(path))
	require.Equal(t, 0, tid(d, "approve").Length())
	require.Equal(t, 1, tid(d, "cannot-approve").Length())

	d = parse(t, b.as["approver"].get(path))
	require.Equal(t, "0 of 2 approvals", tid(d, "quorum").Text())
	require.Equal(t, "150", tid(d, "target-count").Text())
	hash := tid(d, "plan-hash").Text()
	require.Equal(t, hash, tid(d, "approve-hash").AttrOr("value", ""))
	require.Equal(t, b.hash(c), hash)
	require.Equal(t, 3, tid(d, "preview").Length())
	require.Equal(t, 100, tid(d, "draft-target").Length())
	next := tid(d, "next-page").AttrOr("href", "")
	require.Equal(t, path+"?after=100", next)
	d = parse(t, b.as["approver"].get(next))
	require.Equal(t, 50, tid(d, "draft-target").Length())
	require.Equal(t, 0, tid(d, "next-page").Length())

	// A hash not shown (stale) is refused and nothing is recorded.
	rec := b.as["approver"].post("/campaigns/"+c.ID+"/approve", url.Values{"plan_hash": {strings.Repeat("a", 64)}})
	require.Equal(t, http.StatusConflict, rec.Code)

	rec = b.as["approver"].post("/campaigns/"+c.ID+"/approve", url.Values{"plan_hash": {hash}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, path+"?flash=approval-recorded", rec.Header().Get("Location"))
	d = parse(t, b.as["approver2"].get(path))
	require.Equal(t, "1 of 2 approvals", tid(d, "quorum").Text())
	require.Equal(t, "approver@example.com", tid(d, "approvers").Text())

	rec = b.as["approver2"].post("/campaigns/"+c.ID+"/approve", url.Values{"plan_hash": {hash}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/campaigns/"+c.ID+"/run?flash=approved", rec.Header().Get("Location"))
	require.Equal(t, approval.StateApproved, b.campaign(c.ID).State)
}

func TestRejectNeedsReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	rec := b.as["approver"].post("/campaigns/"+c.ID+"/reject", url.Values{"reason": {" "}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	rec = b.as["approver"].post("/campaigns/"+c.ID+"/reject", url.Values{"reason": {"wrong month"}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, approval.StateDraft, b.campaign(c.ID).State)
}

func TestRunPageCountsFilterAndPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(120)})
	for i := 1; i <= 60; i++ {
		b.effect(p, i, ledger.StateDone, "250 ok")
	}
	b.effect(p, 61, ledger.StateUnknown, "timeout")
	b.effect(p, 62, ledger.StateFailed, "550 no such user")
	b.effect(p, 63, ledger.StatePending, "")
	op := b.as["operator"]
	path := "/campaigns/" + c.ID + "/run"

	d := parse(t, op.get(path))
	for state, want := range map[string]string{"done": "60", "unknown": "1", "failed": "1", "pending": "1", "not_started": "57", "planned": "120"} {
		require.Equal(t, want, tid(d, "count-"+state).Text(), state)
	}
	require.Equal(t, "60 / 120", tid(d, "headline").Text())
	require.Equal(t, 1, tid(d, "unknown-notice").Length())
	require.Equal(t, 50, tid(d, "target-row").Length())
	require.Equal(t, 1, tid(d, "action-pause").Length())
	require.Equal(t, 0, tid(d, "action-start").Length())

	// Keyset pagination by ordinal.
	next := tid(d, "next-page").AttrOr("href", "")
	require.Equal(t, path+"?after=50", next)
	d = parse(t, op.get(next))
	require.Equal(t, "51", tid(d, "target-row").First().AttrOr("data-ordinal", ""))
	d = parse(t, op.get(path+"?after=100"))
	require.Equal(t, 20, tid(d, "target-row").Length())
	require.Equal(t, 0, tid(d, "next-page").Length())

	// Filters, each by its own index shape.
	for state, want := range map[string]int{"unknown": 1, "pending": 1, "failed": 1, "done": 50, "not_started": 50} {
		d = parse(t, op.get(path+"?state="+state))
		rows := tid(d, "target-row")
		require.Equal(t, want, rows.Length(), state)
		rows.Each(func(_ int, s *goquerySelection) { require.Equal(t, state, s.AttrOr("data-state", "")) })
	}
	d = parse(t, op.get(path+"?state=done&after=50"))
	require.Equal(t, 10, tid(d, "target-row").Length())
	require.Equal(t, http.StatusBadRequest, op.get(path+"?state=bogus").Code)

	// Search by address prefix, in address order.
	d = parse(t, op.get(path+"?q=USER010"))
	require.Equal(t, 10, tid(d, "target-row").Length()) // user0100..user0109
	require.Equal(t, "user0100@example.com", tid(d, "target-link").First().Text())
	d = parse(t, op.get(path+"?q=user01&state=done"))
	require.Equal(t, 0, tid(d, "target-row").Length(), "user0100.. are not started")

	// Live counts as JSON.
	rec := op.get("/campaigns/" + c.ID + "/counts")
	require.Equal(t, http.StatusOK, rec.Code)
	var got countsJSON
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.Equal(t, "running", got.State)
	require.Equal(t, 60, got.Counts.Done)
	require.Equal(t, 57, got.Counts.NotStarted)
}

func TestFilteredScanStopsAtBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, p := b.started(campaignOpts{Targets: csvOf(12)})
	b.effect(p, 11, ledger.StateFailed, "550")
	ctx := context.Background()
	// A zero budget (here: 1ns) searches one window per page and says how
	// far it got.
	page, err := queryTargets(ctx, b.pool, audit.TargetQuery{ListID: p.ListID, Count: 12, State: "failed", Limit: 5, Budget: 1}, nil)
	require.NoError(t, err)
	require.Len(t, page.Rows, 1)
	require.Equal(t, "", page.Next, "one window covers 12 targets")
}

func TestTargetDetailAndDecisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{})
	b.effect(p, 1, ledger.StateDone, "250 2.0.0 queued as ABC")
	b.effect(p, 2, ledger.StateUnknown, "connection reset after DATA")
	op := b.as["operator"]
	base := "/campaigns/" + c.ID + "/targets/"

	d := parse(t, op.get(base+"2"))
	require.Equal(t, "user0002@example.com", tid(d, "target-address").Text())
	require.Equal(t, 1, tid(d, "attempt").Length())
	require.Equal(t, "connection reset after DATA", tid(d, "raw-response").Text())
	require.Equal(t, 1, tid(d, "resolve-form").Length())
	require.Equal(t, 0, tid(d, "supersede-form").Length())
	// A viewer sees the target but no decision.
	d = parse(t, b.as["viewer"].get(base+"2"))
	require.Equal(t, 0, tid(d, "target-actions").Length())

	// Resolve the unknown as not delivered: the key is free again.
	require.Equal(t, http.StatusBadRequest, op.post(base+"2/resolve", url.Values{"outcome": {"not_delivered"}}).Code)
	rec := op.post(base+"2/resolve", url.Values{"outcome": {"not_delivered"}, "reason": {"bounced per relay log"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, op.get(base+"2"))
	require.Equal(t, "failed", tid(d, "target-detail").Find(`[data-testid="state"]`).AttrOr("data-state", ""))

	// Supersede authorises one more effect: an approver's decision, with
	// the target typed exactly and a reason.
	d = parse(t, op.get(base+"1"))
	require.Equal(t, 0, tid(d, "supersede-form").Length(), "an operator does not supersede")
	require.Equal(t, http.StatusForbidden, op.post(base+"1/supersede", url.Values{"confirm_target": {"user0001@example.com"}, "reason": {"resend"}}).Code)
	ap := b.as["approver"]
	d = parse(t, ap.get(base+"1"))
	require.Equal(t, 1, tid(d, "supersede-form").Length())
	rec = ap.post(base+"1/supersede", url.Values{"confirm_target": {"someone@example.com"}, "reason": {"resend"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	rec = ap.post(base+"1/supersede", url.Values{"confirm_target": {"user0001@example.com"}, "reason": {"customer asked for a copy"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, op.get(base+"1"))
	require.Equal(t, "1", tid(d, "target-epoch").Text())
	require.Equal(t, "not_started", tid(d, "target-detail").Find(`[data-testid="state"]`).AttrOr("data-state", ""))
	require.Equal(t, 1, tid(d, "bumps").Find("tbody tr").Length())
	// Superseding again is refused: nothing is done at the new epoch.
	rec = ap.post(base+"1/supersede", url.Values{"confirm_target": {"user0001@example.com"}, "reason": {"again"}})
	require.Equal(t, http.StatusConflict, rec.Code)

	// Revoke a done target.
	b.effect(p, 3, ledger.StateDone, "250 ok")
	require.Equal(t, http.StatusBadRequest, op.post(base+"3/revoke", nil).Code)
	rec = op.post(base+"3/revoke", url.Values{"reason": {"recalled by hand"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, op.get(base+"3"))
	require.Equal(t, "revoked", tid(d, "target-detail").Find(`[data-testid="state"]`).AttrOr("data-state", ""))

	// Every decision is in the audit trail.
	d = parse(t, op.get("/campaigns/"+c.ID+"/audit"))
	for _, action := range []string{"resolve", "supersede", "revoke", "approve", "start"} {
		require.Equal(t, 1, d.Find(`[data-testid="event"][data-action="`+action+`"]`).Length(), action)
	}
}

func TestActionsStartPauseResumeCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	_, err := b.svc.Approve(context.Background(), b.as["approver"].actor, c.ID, b.hash(c))
	require.NoError(t, err)
	op := b.as["operator"]
	base := "/campaigns/" + c.ID
	d := parse(t, op.get(base+"/run"))
	require.Equal(t, 1, tid(d, "action-start").Length())
	for _, step := range []struct {
		action string
		state  approval.State
	}{{"start", approval.StateRunning}, {"pause", approval.StatePaused}, {"resume", approval.StateRunning}, {"cancel", approval.StateCancelled}} {
		rec := op.post(base+"/"+step.action, nil)
		require.Equal(t, http.StatusSeeOther, rec.Code, step.action+": "+rec.Body.String())
		require.Equal(t, step.state, b.campaign(c.ID).State, step.action)
	}
	// A second cancel is a conflict, shown as such.
	rec := op.post(base+"/cancel", nil)
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error-message").Text(), "cancelled")
}

func TestAuditExports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	for i := 1; i <= 3; i++ {
		b.effect(p, i, ledger.StateDone, "250 ok")
	}
	v := b.as["viewer"]
	d := parse(t, v.get("/campaigns/"+c.ID+"/audit"))
	require.Equal(t, "3 / 3", tid(d, "audit-headline").Text())
	require.Equal(t, "yes", tid(d, "audit-holds").AttrOr("data-holds", ""))

	rec := v.get("/campaigns/" + c.ID + "/audit.csv")
	require.Equal(t, http.StatusOK, rec.Code)
	lines := strings.Split(strings.TrimSpace(rec.Body.String()), "\n")
	require.Len(t, lines, 4)
	require.True(t, strings.HasPrefix(lines[1], "1,user0001@example.com,v1:"), lines[1])
	require.Contains(t, lines[1], ",done,1,receipt-1,")

	rec = v.get("/campaigns/" + c.ID + "/audit.json")
	require.Equal(t, http.StatusOK, rec.Code)
	var out struct {
		Metric  map[string]any   `json:"metric"`
		Targets []map[string]any `json:"targets"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	require.Equal(t, true, out.Metric["holds"])
	require.Len(t, out.Targets, 3)
	require.Equal(t, "done", out.Targets[2]["state"])
}

func TestCampaignListShowsProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.draft(campaignOpts{})
	_, p := b.started(campaignOpts{Targets: csvOf(4)})
	b.effect(p, 1, ledger.StateDone, "ok")
	d := parse(t, b.as["viewer"].get("/campaigns"))
	rows := tid(d, "campaign-row")
	require.Equal(t, 2, rows.Length())
	var headlines []string
	tid(d, "headline").Each(func(_ int, s *goquerySelection) { headlines = append(headlines, strings.TrimSpace(s.Text())) })
	require.ElementsMatch(t, []string{"1 / 4", "—"}, headlines)
	require.Equal(t, "1 done · 3 not started", tid(d, "counts-brief").Text())
	require.Equal(t, "audit: does not hold yet (3 not sent)", tid(d, "audit-verdict").Text())
	// Viewers cannot start a campaign; proposers can.
	require.Equal(t, 0, tid(d, "new-campaign").Length())
	require.Equal(t, 1, tid(parse(t, b.as["proposer"].get("/campaigns")), "new-campaign").Length())
}

func TestAdminUsersAndTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.as["admin"]
	d := parse(t, a.get("/admin"))
	require.Equal(t, 6, tid(d, "user-row").Length())
	require.Equal(t, 1, tid(d, "provider-row").Length())

	rec := a.post("/admin/users", url.Values{"email": {"new@example.com"}, "roles": {"viewer", "operator"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, a.follow(rec))
	require.Len(t, tid(d, "new-password-value").Text(), 20)

	rec = a.post("/admin/tokens", url.Values{"user": {"new@example.com"}, "name": {"ci"}, "agent": {"1"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	secret := tid(parse(t, a.follow(rec)), "new-token-value").Text()
	require.True(t, strings.HasPrefix(secret, "opa_"), secret)
	// Shown once: the admin page lists the prefix, never the secret again.
	body := a.get("/admin").Body.String()
	require.NotContains(t, body, secret)
	require.Contains(t, body, secret[:8])

	// Roles changed, the user disabled and enabled, the token revoked:
	// every administrative change is in the audit trail, with who did it.
	var uid, tokID int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM app_user WHERE email = 'new@example.com'`).Scan(&uid))
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM api_token WHERE name = 'ci'`).Scan(&tokID))
	uidS, tokS := strconv.FormatInt(uid, 10), strconv.FormatInt(tokID, 10)
	require.Equal(t, http.StatusSeeOther, a.post("/admin/users/"+uidS+"/roles", url.Values{"roles": {"viewer"}}).Code)
	require.Equal(t, http.StatusSeeOther, a.post("/admin/users/"+uidS+"/disable", nil).Code)
	require.Equal(t, http.StatusSeeOther, a.post("/admin/users/"+uidS+"/enable", nil).Code)
	require.Equal(t, http.StatusSeeOther, a.post("/admin/tokens/"+tokS+"/revoke", nil).Code)
	d = parse(t, a.get("/admin"))
	var actions []string
	tid(d, "admin-event").Each(func(_ int, sel *goquerySelection) { actions = append(actions, sel.AttrOr("data-action", "")) })
	require.Equal(t, []string{"token_revoke", "user_enable", "user_disable", "user_roles", "token_create", "user_add"}, actions)
	require.Contains(t, tid(d, "admin-events").Text(), "admin@example.com")
	// The trail is write-once, whoever asks.
	_, err := b.pool.Exec(context.Background(), `UPDATE admin_event SET subject = 'someone-else@example.com'`)
	require.ErrorContains(t, err, "write-once")
	_, err = b.pool.Exec(context.Background(), `DELETE FROM admin_event`)
	require.ErrorContains(t, err, "write-once")
}

func TestSignInIsThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	csrf := randomToken(32)
	try := func(password string) *httptest.ResponseRecorder {
		req := httpPost("/login", url.Values{"csrf_token": {csrf}, "email": {"viewer@example.com"}, "password": {password}})
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
		return httptestDo(b.srv.Handler(), req)
	}
	for range auth.FailuresBeforeDelay {
		require.Equal(t, http.StatusUnauthorized, try("not the password").Code)
	}
	// Even the right password is refused now, with when to try again.
	rec := try(testPassword)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error").Text(), "try again")
}

func TestEditAfterApprovalMakesANewVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, _ := b.started(campaignOpts{})
	p := b.as["proposer"]
	d := parse(t, p.get("/campaigns/"+c.ID+"/draft"))
	require.Equal(t, 1, tid(d, "new-version-notice").Length())
	rec := p.post("/campaigns/"+c.ID+"/payload", url.Values{"from": {"a@example.com"}, "subject": {"Hello again {{.first_name}}"}, "text": {"Hi"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	c2 := b.campaign(c.ID)
	require.Equal(t, approval.StateDraft, c2.State)
	require.Equal(t, 2, c2.Version)
	// The approval page of version 2 shows what changed since version 1.
	_, err := b.svc.Submit(context.Background(), p.actor, c.ID)
	require.NoError(t, err)
	d = parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/approval"))
	changed := d.Find(`[data-testid="diff"][data-against="approved"] [data-testid="diff-field"][data-changed="yes"]`)
	require.Equal(t, 4, changed.Length(), "from, subject, text and the html body (emptied)")
	require.Contains(t, changed.Find(`[data-op="added"]`).Text(), "Hello again")
}
