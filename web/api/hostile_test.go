package api_test

// Hostile and broken API input (docs/RELIABILITY.md, "Hostile and
// broken input"), over real HTTP: each request gets
// one clear error (one line, naming the field or parameter) and a refused
// request changes nothing in the database. api_test.go has the basic
// malformed-JSON, unknown-field, wrong-type and 401/403/404/413/415/429
// cases; these go further.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/api"
)

// world is a server with campaigns in every state, made through the
// service by people other than the callers, so that any caller's
// permission alone decides.
type world struct {
	*server
	ctx     context.Context
	author  auth.Actor // proposes every campaign
	decider auth.Actor // approves and operates them
	tools   int        // single effects begun (toolCall)
}

func newWorld(t testing.TB) *world {
	t.Helper()
	s := newServer(t, func(c *api.Config) { c.RatePerToken = 10_000 })
	w := &world{server: s, ctx: context.Background()}
	actor := func(email string, roles ...auth.Role) auth.Actor {
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		id := pgtest.User(t, s.pool, pgtest.UserOpts{Email: email, Roles: names})
		return auth.Actor{UserID: id, Email: email, Roles: roles}
	}
	w.author = actor("author@example.com", auth.RoleProposer)
	w.decider = actor("decider@example.com", auth.RoleApprover, auth.RoleOperator)
	actor("admin@example.com", auth.RoleAdmin)
	secret, _, err := auth.CreateToken(w.ctx, s.pool, "admin@example.com", "admin token", false)
	require.NoError(t, err)
	s.token["admin"] = secret
	return w
}

// campaign is a campaign made for one request, and the first target of
// its plan (once it has one).
type campaign struct {
	id, hash    string
	key, target string
	planID      int64
	ordinal     int
}

// campaignIn makes a campaign of three targets in state: draft, pending,
// approved, running, paused, unknown (running, first target's effect
// unknown) or done (running, first target's effect done).
func (w *world) campaignIn(t testing.TB, state string) campaign {
	t.Helper()
	if state == "tool" {
		return w.toolCall(t)
	}
	res, err := w.svc.Create(w.ctx, w.author, approval.CreateParams{
		Name: "Campaign " + state, Provider: "outbox",
		Payload: plan.Payload{From: "news@example.com", Subject: "Hi {{.name}}", Text: "Hello {{.name}}"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(
			"email,name\nann@example.com,Ann\nbob@example.com,Bob\ncy@example.com,Cy\n")},
	})
	require.NoError(t, err)
	c := campaign{id: res.Campaign.ID, hash: res.PlanHash}
	steps := map[string]int{"draft": 0, "pending": 1, "approved": 2, "running": 3, "paused": 4, "unknown": 3, "done": 3}
	n, ok := steps[state]
	require.True(t, ok, state)
	if n >= 1 {
		_, err = w.svc.Submit(w.ctx, w.author, c.id)
		require.NoError(t, err)
	}
	if n >= 2 {
		_, err = w.svc.Approve(w.ctx, w.decider, c.id, c.hash)
		require.NoError(t, err)
		require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT t.key, t.target, p.id, t.ordinal FROM plan p JOIN target t ON t.list_id = p.list_id
			WHERE p.campaign_id = $1 ORDER BY t.ordinal LIMIT 1`, c.id).Scan(&c.key, &c.target, &c.planID, &c.ordinal))
	}
	if n >= 3 {
		_, err = w.svc.Start(w.ctx, w.decider, c.id)
		require.NoError(t, err)
	}
	if n >= 4 {
		_, err = w.svc.Pause(w.ctx, w.decider, c.id, "a break")
		require.NoError(t, err)
	}
	store := ledger.NewStore(w.pool)
	switch state {
	case "unknown":
		claim, err := store.Claim(w.ctx, ledger.ClaimParams{Key: ledger.Key(c.key), Owner: "dead-worker", PlanID: c.planID, Ordinal: c.ordinal})
		require.NoError(t, err)
		_, err = store.Settle(w.ctx, ledger.SettleParams{EffectID: claim.Effect.ID, State: ledger.StateUnknown, Reason: "worker died"})
		require.NoError(t, err)
	case "done":
		claim, err := store.Claim(w.ctx, ledger.ClaimParams{Key: ledger.Key(c.key), Owner: "worker", PlanID: c.planID, Ordinal: c.ordinal})
		require.NoError(t, err)
		_, err = store.RecordResponse(w.ctx, claim.Effect.ID, ledger.ResponseSend, []byte("ok"))
		require.NoError(t, err)
		_, err = store.Settle(w.ctx, ledger.SettleParams{EffectID: claim.Effect.ID, State: ledger.StateDone, Receipt: "msg-1"})
		require.NoError(t, err)
	}
	return c
}

// snapshot is every row of every table a request could change (API token
// use times aside), as text.
func snapshot(t testing.TB, s *server) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"campaign", "draft", "target_list", "target", "plan", "approval", "run", "campaign_event",
		"effect", "effect_bump", "effect_response", "api_idempotency", "river_job", "app_user",
		"suppression", "suppression_removal", "test_send_message",
		"tool_policy", "tool_call", "tool_attempt", "tool_approval_request", "tool_approval", "tool_call_event"} {
		var rows string
		require.NoError(t, s.pool.QueryRow(context.Background(),
			`SELECT coalesce(string_agg(to_jsonb(x)::text, E'\n' ORDER BY to_jsonb(x)::text), '') FROM `+table+` x`).Scan(&rows))
		out[table] = rows
	}
	return out
}

// refused sends a request, requires status and code with a one-line
// message mentioning each of mentions, and that nothing changed.
func (s *server) refused(who, method, path, ctype, body string, status int, code string, mentions ...string) reply {
	s.t.Helper()
	before := snapshot(s.t, s)
	r := s.do(who, method, path, ctype, body)
	require.Equal(s.t, status, r.status, "%s %s: %s", method, path, r.raw)
	require.Equal(s.t, code, r.errCode(), "%s %s: %s", method, path, r.raw)
	msg := r.errMessage()
	require.NotEmpty(s.t, msg)
	require.NotContains(s.t, msg, "\n", "one line")
	for _, m := range mentions {
		require.Contains(s.t, msg, m, "%s %s", method, path)
	}
	require.Equal(s.t, before, snapshot(s.t, s), "%s %s changed something", method, path)
	return r
}

func TestHostileAPIHugeNumbers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "running")
	base := `{"name":"x","provider":"outbox","from":"a@example.com","subject":"S","text":"T","required_approvals":%s}`
	for _, n := range []string{"1e400", "9223372036854775808", "-9223372036854775809", "99999999999999999999999999999999", "1.5", "1e2"} {
		r := w.refused("proposer", "POST", "/campaigns", "application/json", fmt.Sprintf(base, n), 400, "invalid", `"required_approvals"`)
		require.Equal(t, "required_approvals", r.body["error"].(map[string]any)["field"], n)
	}
	// A number that fits but is out of range is refused by the domain.
	// (0 means the default, 1.)
	for _, n := range []string{"2147483648", "-1", "11"} {
		r := w.refused("proposer", "POST", "/campaigns", "application/json", fmt.Sprintf(base, n), 400, "invalid", "required_approvals: must be between 1 and 10")
		require.Equal(t, "required_approvals", r.body["error"].(map[string]any)["field"], n)
	}
	for _, q := range []string{"limit=99999999999999999999", "limit=1e3", "limit=0x10", "limit=%2B5%2F", "limit=1001"} {
		w.refused("viewer", "GET", "/campaigns/"+c.id+"/targets?"+q, "", "", 400, "invalid", "limit")
		w.refused("viewer", "GET", "/campaigns?"+q, "", "", 400, "invalid", "limit")
	}
	// A cursor is opaque: a forged one with a huge number is answered
	// without an internal error, either refused naming "after" or as a page.
	for _, forged := range []string{"a:9223372036854775808", "a:99999999999999999999999999", "o:9223372036854775807", "a:-1"} {
		before := snapshot(t, w.server)
		r := w.do("viewer", "GET", "/campaigns/"+c.id+"/targets?after="+base64.RawURLEncoding.EncodeToString([]byte(forged)), "", "")
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, r.status, "%s: %s", forged, r.raw)
		if r.status == http.StatusBadRequest {
			require.Equal(t, "after", r.body["error"].(map[string]any)["field"])
		}
		require.Equal(t, before, snapshot(t, w.server))
	}
	// An epoch or ordinal smuggled into a body is an unknown field.
	w.refused("operator", "POST", "/effects/"+c.key+"/revoke", "application/json", `{"reason":"r","epoch":99999999999999999999}`, 400, "invalid", `"epoch"`)
}

func TestHostileAPINegativeLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "running")
	for _, q := range []string{"limit=-1", "limit=0", "limit=-9223372036854775808", "limit=-0"} {
		w.refused("viewer", "GET", "/campaigns/"+c.id+"/targets?"+q, "", "", 400, "invalid", "limit: must be between 1 and 1000")
		w.refused("viewer", "GET", "/campaigns?"+q, "", "", 400, "invalid", "limit: must be between 1 and 200")
	}
	w.refused("viewer", "GET", "/campaigns?after=-1", "", "", 400, "invalid", "")
}

// API tokens do not expire; they end by revocation, or with their user
// being disabled. Every kind of bad token is a 401 that changes nothing,
// on a reading route and on a deciding one.
func TestHostileAPIForgedExpiredRevokedTokens(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "running")
	revoked, tok, err := auth.CreateToken(w.ctx, w.pool, "operator@example.com", "to revoke", false)
	require.NoError(t, err)
	_, err = auth.RevokeToken(w.ctx, w.pool, tok.ID)
	require.NoError(t, err)
	pgtest.User(t, w.pool, pgtest.UserOpts{Email: "leaver@example.com", Roles: []string{"operator"}})
	disabled, _, err := auth.CreateToken(w.ctx, w.pool, "leaver@example.com", "left the company", false)
	require.NoError(t, err)
	_, err = auth.DisableUser(w.ctx, w.pool, "leaver@example.com")
	require.NoError(t, err)
	operator := w.token["operator"]
	changed := []byte(operator)
	changed[len(changed)-1] ^= 1 // still base64url, another secret

	for name, header := range map[string]string{
		"forged personal":          "Bearer op_" + strings.Repeat("A", 43),
		"forged agent":             "Bearer opa_" + strings.Repeat("A", 43),
		"real token, one changed":  "Bearer " + string(changed),
		"truncated":                "Bearer " + operator[:20],
		"another scheme":           "Basic " + base64.StdEncoding.EncodeToString([]byte("operator@example.com:"+operator)),
		"no token":                 "Bearer ",
		"revoked":                  "Bearer " + revoked,
		"user disabled":            "Bearer " + disabled,
		"token in the wrong place": operator,
	} {
		for _, route := range [][2]string{{"GET", "/campaigns/" + c.id}, {"POST", "/campaigns/" + c.id + "/cancel"}} {
			before := snapshot(t, w.server)
			r := w.do("", route[0], route[1], "", "", "Authorization", header)
			require.Equal(t, http.StatusUnauthorized, r.status, "%s on %s: %s", name, route[1], r.raw)
			require.Equal(t, "unauthenticated", r.errCode(), name)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer", name)
			require.NotContains(t, r.errMessage(), "\n")
			require.NotContains(t, r.raw, operator, "the token is never echoed")
			require.Equal(t, before, snapshot(t, w.server), name)
		}
	}
	// The operator's own token still works: the failures above locked nothing.
	require.Equal(t, http.StatusOK, w.do("operator", "GET", "/campaigns/"+c.id, "", "").status)
	// The scheme's name is case-insensitive (RFC 7235 §2.1).
	require.Equal(t, http.StatusOK, w.do("", "GET", "/campaigns/"+c.id, "", "", "Authorization", "bearer "+operator).status)
}

// An agent token never decides, whatever its owner's roles (its owner here
// is proposer, approver and operator): every deciding route is 403 and
// changes nothing, with the campaign in the state where a person could.
func TestHostileAPIAgentTokenOnEveryForbiddenRoute(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, tc := range []struct {
		state, route, body string
	}{
		{"pending", "approve", `{"plan_hash":"%s"}`},
		{"pending", "reject", `{"reason":"no"}`},
		{"approved", "start", ``},
		{"running", "pause", `{"reason":"wait"}`},
		{"paused", "resume", ``},
		{"running", "cancel", `{"reason":"stop"}`},
		{"unknown", "resolve", `{"outcome":"not_delivered","reason":"bounced"}`},
		{"done", "supersede", `{"target":"%s","reason":"again"}`},
		{"done", "revoke", `{"reason":"reversed"}`},
	} {
		c := w.campaignIn(t, tc.state)
		path := "/campaigns/" + c.id + "/" + tc.route
		body := tc.body
		switch tc.route {
		case "approve":
			body = fmt.Sprintf(body, c.hash)
		case "supersede":
			body = fmt.Sprintf(body, c.target)
		}
		if tc.route == "resolve" || tc.route == "supersede" || tc.route == "revoke" {
			path = "/effects/" + c.key + "/" + tc.route
		}
		ctype := "application/json"
		if body == "" {
			ctype = ""
		}
		w.refused("agent", "POST", path, ctype, body, http.StatusForbidden, "forbidden", "agent token may not "+tc.route)
	}
}

// Approving campaign A with campaign B's hash (or A's own stale hash) is a
// conflict: what the approver saw is not what would run.
func TestHostileAPIApprovalWithAnotherPlansHash(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.campaignIn(t, "pending")
	b := w.campaignIn(t, "pending")
	require.NotEqual(t, a.hash, b.hash, "the campaign is part of the hash")
	w.refused("approver", "POST", "/campaigns/"+a.id+"/approve", "application/json", `{"plan_hash":"`+b.hash+`"}`,
		http.StatusConflict, "conflict", "the draft changed since it was shown to you")

	// An edit after review makes the hash the approver saw stale.
	old := a.hash
	r := w.json("proposer", "PATCH", "/campaigns/"+a.id, map[string]any{"text": "Hello again {{.name}}"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.NotEqual(t, old, r.body["plan_hash"])
	require.Equal(t, http.StatusOK, w.do("proposer", "POST", "/campaigns/"+a.id+"/submit", "", "").status)
	w.refused("approver", "POST", "/campaigns/"+a.id+"/approve", "application/json", `{"plan_hash":"`+old+`"}`,
		http.StatusConflict, "conflict", "the draft changed since it was shown to you")

	// Not a hash at all.
	for _, h := range []string{strings.Repeat("A", 64), strings.Repeat("0", 63), "../../etc/passwd", strings.Repeat("0", 65)} {
		w.refused("approver", "POST", "/campaigns/"+a.id+"/approve", "application/json", `{"plan_hash":"`+h+`"}`,
			http.StatusBadRequest, "invalid", "plan_hash: must be 64 lowercase hexadecimal characters")
	}
}

// The effect routes find the campaign from the key; a key of no approved
// plan is 404. The service under them refuses a key of another campaign
// (which the UI's campaign-scoped routes rely on) with ErrNotFound, the
// API's 404, changing nothing.
func TestHostileAPIEffectOfAnotherCampaign(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.campaignIn(t, "done")
	b := w.campaignIn(t, "unknown")
	draft := w.campaignIn(t, "draft")
	var draftKey string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT t.key FROM draft d JOIN target t ON t.list_id = d.list_id WHERE d.campaign_id = $1 LIMIT 1`, draft.id).Scan(&draftKey))
	nobody, err := ledger.NewKey(ledger.KeyInput{Event: "8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000", Tool: "email.send",
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: "ann@example.com"}})
	require.NoError(t, err)

	for _, key := range []string{draftKey, string(nobody)} {
		w.refused("operator", "POST", "/effects/"+key+"/resolve", "application/json", `{"outcome":"delivered","reason":"seen"}`, 404, "not_found", "no approved plan")
		w.refused("approver", "POST", "/effects/"+key+"/supersede", "application/json", `{"target":"ann@example.com","reason":"again"}`, 404, "not_found", "no approved plan")
		w.refused("operator", "POST", "/effects/"+key+"/revoke", "application/json", `{"reason":"reversed"}`, 404, "not_found", "no approved plan")
	}

	before := snapshot(t, w.server)
	operator := auth.Actor{UserID: w.decider.UserID, Email: w.decider.Email, Roles: []auth.Role{auth.RoleApprover, auth.RoleOperator}}
	_, err = w.svc.ResolveEffect(w.ctx, operator, a.id, b.key, ledger.NotDelivered, "bounced")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	require.Contains(t, err.Error(), "is not a target of campaign "+a.id)
	_, err = w.svc.SupersedeEffect(w.ctx, operator, b.id, a.key, a.target, "again")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = w.svc.RevokeEffect(w.ctx, operator, b.id, a.key, "reversed")
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	require.Equal(t, before, snapshot(t, w.server))
}

func TestHostileAPIPayloads(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "draft")
	patch := func(field, value string) string {
		return fmt.Sprintf(`{%q: %q}`, field, value)
	}
	w.refused("proposer", "PATCH", "/campaigns/"+c.id, "application/json", patch("text", "Hello {{.name}},\n{{if .name}}"),
		400, "invalid", "text: line 2: unexpected EOF")
	w.refused("proposer", "PATCH", "/campaigns/"+c.id, "application/json", patch("subject", "Hi\r\nBcc: victim@example.com"),
		400, "invalid", "subject: must be one line (it contains a line break)")
	w.refused("proposer", "PATCH", "/campaigns/"+c.id, "application/json", patch("html", `<p title="{{.name}}>`),
		400, "invalid", "html: the HTML ends inside a tag, an attribute or a quoted value")
	ten := strings.Repeat("x", 10<<20)
	w.refused("proposer", "PATCH", "/campaigns/"+c.id, "application/json", patch("text", ten),
		400, "invalid", "text: is 10485760 bytes; the limit is 2097152")
	create := func(subject string) string {
		return fmt.Sprintf(`{"name":"x","provider":"outbox","from":"a@example.com","subject":%q,"text":"T"}`, subject)
	}
	w.refused("proposer", "POST", "/campaigns", "application/json", create("Hi {{.name"), 400, "invalid", "subject: line 1: unclosed action")
	w.refused("proposer", "POST", "/campaigns", "application/json", create("Hi\nBcc: victim@example.com"), 400, "invalid", "subject: must be one line")
	r := w.refused("proposer", "POST", "/campaigns", "application/json", `{"name":"x","provider":"outbox"}`, 400, "invalid", "from: is required")
	require.Equal(t, "from", r.body["error"].(map[string]any)["field"])

	// HTML with scripts is stored and answered as given.
	html := `<script>alert(document.cookie)</script><img src=x onerror="alert(1)"><p>{{.name}}</p>`
	r = w.json("proposer", "PATCH", "/campaigns/"+c.id, map[string]any{"html": html})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	got := w.do("viewer", "GET", "/campaigns/"+c.id, "", "")
	require.Equal(t, html, got.body["payload"].(map[string]any)["html"])
	require.True(t, strings.HasPrefix(got.header.Get("Content-Type"), "application/json"))
	require.NotContains(t, got.raw, "<script>", "JSON escapes markup, so a browser never renders the answer")
}
