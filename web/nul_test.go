package web

import (
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// dbSnapshot is every row of the tables a form could change, as text.
func dbSnapshot(t *testing.T, b *bundle) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"campaign", "draft", "target_list", "plan", "approval", "run", "campaign_event",
		"effect", "effect_bump", "river_job", "app_user", "session", "login_attempt", "suppression", "suppression_removal"} {
		var rows string
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT coalesce(string_agg(to_jsonb(x)::text, E'\n' ORDER BY to_jsonb(x)::text), '') FROM `+table+` x`).Scan(&rows))
		out[table] = rows
	}
	return out
}

// TestNULIsRefusedInTheUI: a NUL in a form field, a query parameter or a
// path segment of the UI — sign-in included, open to anyone — is a 400
// page naming the field, and changes nothing (no sign-in attempt is even
// counted). Before, each reached PostgreSQL and answered 500.
func TestNULIsRefusedInTheUI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pending := b.pending(campaignOpts{})
	running, p := b.started(campaignOpts{})
	b.effect(p, 1, ledger.StateUnknown, "lost")
	_, err := b.pool.Exec(ctx, `INSERT INTO suppression (address, reason, source, actor) VALUES ('gone@example.com', 'manual', 'actor', 'admin@example.com')`)
	require.NoError(t, err)

	requireRefused := func(what string, rec *httptest.ResponseRecorder, field string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", what, rec.Body.String())
		msg := tid(parse(t, rec), "error-message").Text()
		require.Contains(t, msg, "NUL", what)
		require.True(t, strings.HasPrefix(msg, field+": "), "%s: the page names the field: %s", what, msg)
	}

	// Sign-in, open to anyone: a NUL in the email.
	before := dbSnapshot(t, b)
	csrf := randomToken(32)
	req := httpPost("/login", url.Values{"csrf_token": {csrf}, "email": {"admin@example.com\x00"}, "password": {testPassword}})
	req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
	rec := httptestDo(b.srv.Handler(), req)
	requireRefused("POST /login", rec, "email")
	for _, ck := range rec.Result().Cookies() {
		require.NotEqual(t, sessionCookie, ck.Name, "no session for a refused sign-in")
	}
	require.Equal(t, before, dbSnapshot(t, b), "POST /login changed something")

	run := "/campaigns/" + running.ID
	for _, tc := range []struct {
		who, path string
		form      url.Values
		field     string
	}{
		{"approver", "/campaigns/" + pending.ID + "/reject", url.Values{"reason": {"no\x00"}}, "reason"},
		{"operator", run + "/pause", url.Values{"reason": {"\x00"}}, "reason"},
		{"operator", run + "/cancel", url.Values{"reason": {"stop\x00"}}, "reason"},
		{"operator", run + "/targets/1/resolve", url.Values{"outcome": {"delivered"}, "reason": {"seen\x00"}}, "reason"},
		{"operator", run + "/targets/1/revoke", url.Values{"reason": {"\x00"}}, "reason"},
		{"approver", run + "/targets/1/supersede", url.Values{"confirm_target": {"x\x00@example.com"}, "reason": {"r"}}, "confirm_target"},
		{"operator", "/suppressions", url.Values{"address": {"x@example.com"}, "reason": {"manual"}, "note": {"a\x00b"}}, "note"},
		{"admin", "/suppressions/remove", url.Values{"address": {"gone@example.com"}, "reason": {"\x00"}}, "reason"},
		{"proposer", "/campaigns/" + pending.ID + "/payload", url.Values{"from": {"a@example.com"}, "subject": {"Hi\x00"}, "text": {"t"}}, "subject"},
		{"admin", "/admin/users", url.Values{"email": {"new\x00@example.com"}, "password": {testPassword}}, "email"},
	} {
		before := dbSnapshot(t, b)
		requireRefused("POST "+tc.path, b.as[tc.who].post(tc.path, tc.form), tc.field)
		require.Equal(t, before, dbSnapshot(t, b), "POST %s changed something", tc.path)
	}

	// A multipart form, as the new-campaign form sends: a field and a
	// file's name.
	before = dbSnapshot(t, b)
	requireRefused("POST /campaigns (multipart)", b.as["proposer"].upload("/campaigns",
		map[string]string{"name": "News\x00", "provider": "outbox", "required_approvals": "1", "from": "a@example.com", "subject": "Hi", "text": "t"},
		"email\nann@example.com\n"), "name")
	var body strings.Builder
	w := multipart.NewWriter(&body)
	w.WriteField(csrfField, b.as["proposer"].csrf)
	for k, v := range map[string]string{"name": "News", "provider": "outbox", "required_approvals": "1", "from": "a@example.com", "subject": "Hi", "text": "t"} {
		w.WriteField(k, v)
	}
	// RFC 2231's encoded filename*= decodes to a NUL (a raw one in the
	// header does not parse, and is refused as a forged form).
	fw, err := w.CreatePart(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="targets"; filename*=UTF-8''list%00.csv`},
		"Content-Type": {"text/csv"}})
	require.NoError(t, err)
	io.WriteString(fw, "email\nann@example.com\n")
	require.NoError(t, w.Close())
	req = httptest.NewRequest(http.MethodPost, "/campaigns", strings.NewReader(body.String()))
	req.Header.Set("Content-Type", w.FormDataContentType())
	requireRefused("POST /campaigns (file name)", b.as["proposer"].do(req), "targets")
	require.Equal(t, before, dbSnapshot(t, b), "POST /campaigns changed something")

	// Bytes that are not UTF-8, which PostgreSQL's text cannot hold either.
	for _, tc := range []struct{ path, field string }{
		{"/suppressions?address=%FF", "address"},
		{"/campaigns/%B8", "id"},
	} {
		rec := b.as["operator"].get(tc.path)
		require.Equal(t, http.StatusBadRequest, rec.Code, tc.path)
		require.Equal(t, tc.field+": the "+map[bool]string{true: "query parameter", false: "path segment"}[strings.Contains(tc.path, "?")]+
			" is not valid UTF-8 text; remove it", tid(parse(t, rec), "error-message").Text())
	}
	before = dbSnapshot(t, b)
	rec = b.as["operator"].post(run+"/pause", url.Values{"reason": {"caf\xe9"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Equal(t, "reason: the form field is not valid UTF-8 text; remove it", tid(parse(t, rec), "error-message").Text())
	require.Equal(t, before, dbSnapshot(t, b))

	// Query parameters and path segments.
	for _, tc := range []struct{ path, field string }{
		{"/suppressions?address=%00", "address"},
		{"/suppressions?address=a%00b&include_removed=true", "address"},
		{"/campaigns/%00", "id"},
		{run + "/run?q=%00", "q"},
		{run + "/targets/1%00", "ordinal"},
		{"/tool-calls?tool=%00", "tool"},
		{"/tool-calls/effects/%00", "key"},
		{"/login?next=/%00/evil.example", "next"},
	} {
		before := dbSnapshot(t, b)
		requireRefused("GET "+tc.path, b.as["operator"].get(tc.path), tc.field)
		require.Equal(t, before, dbSnapshot(t, b), "GET %s changed something", tc.path)
	}
}
