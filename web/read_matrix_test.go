package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/api"
)

// The read rule of every object, as the UI, the API and MCP (a client of
// the API) must all apply it (docs/ARCHITECTURE.md, "Where each rule
// lives"):
//
//   - a campaign and everything of it (its drafts, plan, targets, a
//     target, counts, audit and exports, diff, decision, trail), the
//     campaign list and the suppression list: every signed-in person, any
//     role, and every API token, agents' included, whoever proposed it;
//   - a tool call (its args, its raw answer): the user it was begun for,
//     with any of their tokens, and operators and admins in person or
//     with a personal token; an agent token reads its own user's calls
//     only, whatever roles the user holds. To anyone else it does not
//     exist (404, as a key nobody began);
//   - a tool call's approval request (its args): the call's readers, and
//     the people who may approve it;
//   - an upload of a provider's export and what it proposes (the run
//     page's evidence): the operator who uploaded it, only.
//
// Each GET route says which object it reads (readRoutes); the route's own
// role (the UI's route table) and the door's sign-in come first.

// readKind is the object a GET route reads.
type readKind string

const (
	readNothing  readKind = ""         // no object of anyone's (a list, a form, a page of one's own)
	readCampaign readKind = "campaign" // :id
	readCall     readKind = "call"     // :key, a tool call
	readRequest  readKind = "request"  // :rid, a tool call's approval request
	readEvidence readKind = "evidence" // :id?shown=, an operator's upload of a provider's export
	readAbsent   readKind = "absent"   // nothing there: 404 to everyone
)

// readRoute is one GET route's entry: what it reads, whether it is open
// to anyone (no sign-in), and for the tool calls' list which calls it may
// show (listsCalls: only those the reader may read).
type readRoute struct {
	kind       readKind
	public     bool
	listsCalls bool
}

// readRoutes has an entry for every GET route the server answers, the
// UI's, the API's (mounted as serve mounts it) and the server's own: a
// GET route added without one fails TestReadMatrix.
var readRoutes = map[string]readRoute{
	// The server's own: open to anyone.
	"GET /healthz":      {public: true},
	"GET /readyz":       {public: true},
	"GET /static/:name": {public: true},
	"GET /login":        {public: true},
	"GET /u/:token":     {public: true}, // the link's token is its authentication
	// River's UI: admins (the route's role).
	"GET /riverui":   {},
	"GET /riverui/*": {},

	"GET /":                               {},
	"GET /campaigns":                      {},
	"GET /campaigns/new":                  {},
	"GET /campaigns/:id":                  {kind: readCampaign},
	"GET /campaigns/:id/draft":            {kind: readCampaign},
	"GET /campaigns/:id/preview.html":     {kind: readCampaign},
	"GET /campaigns/:id/approval":         {kind: readCampaign},
	"GET /campaigns/:id/diff":             {kind: readCampaign},
	"GET /campaigns/:id/run":              {kind: readCampaign},
	"GET /campaigns/:id/counts":           {kind: readCampaign},
	"GET /campaigns/:id/run/live":         {kind: readCampaign},
	"GET /campaigns/:id/evidence":         {kind: readEvidence},
	"GET /campaigns/:id/targets/:ordinal": {kind: readCampaign},
	"GET /campaigns/:id/audit":            {kind: readCampaign},
	"GET /campaigns/:id/audit.csv":        {kind: readCampaign},
	"GET /campaigns/:id/audit.json":       {kind: readCampaign},
	"GET /suppressions":                   {},
	"GET /tool-calls":                     {listsCalls: true},
	"GET /tool-calls/approvals/:rid":      {kind: readRequest},
	"GET /tool-calls/effects/:key":        {kind: readCall},
	"GET /account/notifications":          {},
	"GET /account/password":               {},
	"GET /admin":                          {},
	"GET /api/v1/openapi.yaml":            {public: true},
	"GET /api/v1/*":                       {kind: readAbsent, public: true}, // no such API route: a JSON 404
	"GET /api/v1/campaigns":               {},
	"GET /api/v1/campaigns/:id":           {kind: readCampaign},
	"GET /api/v1/campaigns/:id/targets":   {kind: readCampaign},
	"GET /api/v1/campaigns/:id/audit":     {kind: readCampaign},
	"GET /api/v1/campaigns/:id/diff":      {kind: readCampaign},
	"GET /api/v1/campaigns/:id/decision":  {kind: readCampaign},
	"GET /api/v1/effects/:key":            {kind: readCall},
	"GET /api/v1/suppressions":            {},
}

// mayReadCall is the tool call's read rule (above): owner is the user the
// call was begun for.
func mayReadCall(a auth.Actor, owner int64) bool {
	return (!a.Agent && a.Has(auth.RoleOperator)) || (a.UserID != 0 && a.UserID == owner)
}

// mayReadRequest: the call's readers, and the people who may approve.
func mayReadRequest(a auth.Actor, owner int64) bool {
	return mayReadCall(a, owner) || auth.Authorize(a, auth.ActionApprove) == nil
}

// readCaller is one column of the read matrix: a visitor, a person of
// one role (a session in the UI, a personal token in the API) or an
// agent token (no UI: to the UI it is a visitor with a header).
type readCaller struct {
	name    string
	actor   auth.Actor // as the rules see it; zero for the visitor
	session string     // the UI's session secret (persons)
	token   string     // the API's bearer token
}

// readObjects are one owner's objects: a running campaign (its first
// target's outcome unknown), a tool call, an approval request and an
// upload of evidence (of the author's campaign).
type readObjects struct {
	owner    auth.Actor
	campaign string
	call     string
	request  string
	evidence string    // the upload's "shown" id
	events   [2]string // the call's and the request's event ids
}

// readWorld is a server with the UI, the API and River's UI, the callers
// and the objects: the author's (someone else's to every caller) and each
// caller's own, where its user may make them.
type readWorld struct {
	b       *bundle
	srv     *Server
	callers []readCaller
	author  readObjects
	own     map[string]readObjects // by the owner's email
	// draft is the author's campaign never submitted; absent names a
	// campaign, a call and a request nobody made.
	draft              string
	absentCampaign     string
	absentCall         string
	absentRequest      string
	unsubscribe, asset string
}

func newReadWorld(t *testing.T) *readWorld {
	t.Helper()
	b := setup(t)
	ctx := context.Background()
	rc, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
	require.NoError(t, err)
	w := &readWorld{b: b, own: map[string]readObjects{}, absentCampaign: "8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000",
		absentCall: "v1:" + strings.Repeat("ab", 32), absentRequest: "987654321"}
	w.srv = NewServer(Config{Pool: b.pool, Approval: b.svc, River: rc, Mount: func(e *echo.Echo) {
		api.Register(e, api.Config{Pool: b.pool, Approval: b.svc, RatePerToken: 1_000_000})
	}})
	t.Cleanup(func() { w.srv.Shutdown(context.Background()) })
	_, err = toolcall.Register(ctx, b.pool, toolcall.RegisterParams{Tool: "matrix.pay", Recovery: toolcall.RecoveryNone,
		ApprovalRequired: true, Description: "pays, once a person approves", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)

	token := func(email string, agent bool) string {
		secret, _, err := auth.CreateToken(ctx, b.pool, email, fmt.Sprintf("matrix %v", agent), agent)
		require.NoError(t, err)
		return secret
	}
	author := b.user("author@example.com", auth.RoleProposer)
	authorAgent := token("author@example.com", true)
	w.author = w.objects(t, author.actor, authorAgent, true)
	// Someone else's upload of evidence: another operator's.
	w.author.evidence = w.upload(t, b.user("uploader@example.com", auth.RoleOperator))

	w.callers = []readCaller{{name: "visitor"}}
	for _, role := range []string{"admin", "proposer", "approver", "operator", "viewer"} {
		p := b.as[role]
		w.callers = append(w.callers, readCaller{name: role, actor: p.actor, session: p.token, token: token(p.actor.Email, false)})
	}
	// The proposer's agent, and an agent token of an operator: an agent
	// reads its own user's calls only, whatever the user's roles.
	for _, a := range []struct{ name, role string }{{"agent", "proposer"}, {"operator-agent", "operator"}} {
		actor := b.as[a.role].actor
		actor.Agent = true
		w.callers = append(w.callers, readCaller{name: a.name, actor: actor, token: token(actor.Email, true)})
	}
	// Each caller's user's own objects, made with a token of theirs: a
	// campaign where they may propose, a call and a request where they
	// may perform.
	for _, c := range w.callers {
		if c.actor.UserID == 0 || c.actor.Agent {
			continue
		}
		if auth.Authorize(c.actor, auth.ActionPerform) != nil {
			continue
		}
		own := w.objects(t, c.actor, c.token, auth.Authorize(c.actor, auth.ActionCreate) == nil)
		if auth.Authorize(c.actor, auth.ActionResolve) == nil {
			own.evidence = w.upload(t, b.as[c.name])
		}
		w.own[c.actor.Email] = own
	}

	d := w.b.draft(campaignOpts{})
	w.draft = d.ID
	w.unsubscribe, err = suppression.NewLinks(b.pool, "").Token(ctx, w.author.campaign, "user0001@example.com")
	require.NoError(t, err)
	w.asset = strings.TrimPrefix(w.srv.assets.urls["app.css"], "/static/")
	require.NotEmpty(t, w.asset)
	return w
}

// objects makes owner's objects with their token: a tool call, an
// approval request, and (withCampaign) a running campaign proposed by
// them, whose first target's outcome is unknown.
func (w *readWorld) objects(t *testing.T, owner auth.Actor, token string, withCampaign bool) readObjects {
	t.Helper()
	o := readObjects{owner: owner, events: [2]string{"matrix-call-" + owner.Email, "matrix-request-" + owner.Email}}
	if withCampaign {
		ctx := context.Background()
		res, err := w.b.svc.Create(ctx, owner, approval.CreateParams{
			Name: "Campaign of " + owner.Email, Provider: "outbox", RequiredApprovals: 1,
			Payload: plan.Payload{From: "Billing <billing@example.com>", Subject: "Hello {{.first_name}}", Text: "Hi {{.first_name}}",
				HTML: "<p>Hi {{.first_name}}</p>"},
			Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csvOf(3))},
		})
		require.NoError(t, err)
		c := res.Campaign
		_, err = w.b.svc.Submit(ctx, owner, c.ID)
		require.NoError(t, err)
		_, err = w.b.svc.Approve(ctx, w.b.as["approver2"].actor, c.ID, w.b.hash(w.b.campaign(c.ID)))
		require.NoError(t, err)
		started, err := w.b.svc.Start(ctx, w.b.as["operator"].actor, c.ID)
		require.NoError(t, err)
		p, err := plan.GetPlan(ctx, w.b.pool, started.Campaign.PlanID)
		require.NoError(t, err)
		w.b.effect(p, 1, ledger.StateUnknown, "timeout")
		o.campaign = c.ID
	}
	begin := func(tool, event string, want int) map[string]any {
		body := fmt.Sprintf(`{"event":%q,"tool":%q,"target":{"kind":"subject","value":"t"},"args":{"card":"4111 1111 1111 1111"}}`, event, tool)
		req := httptest.NewRequest(http.MethodPost, "/api/v1/effects", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		w.srv.Handler().ServeHTTP(rec, req)
		require.Equal(t, want, rec.Code, rec.Body.String())
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
		return out
	}
	o.call = begin("matrix.tool", o.events[0], http.StatusCreated)["key"].(string)
	u := begin("matrix.pay", o.events[1], http.StatusAccepted)["approval_url"].(string)
	o.request = u[strings.LastIndex(u, "/")+1:]
	return o
}

// upload posts, as person p, the run page's upload of a provider's export
// saying that the author's campaign's first target (unknown) was
// delivered, and returns the id its proposals are shown under.
func (w *readWorld) upload(t *testing.T, p *client) string {
	t.Helper()
	ctx := context.Background()
	camp := w.b.campaign(w.author.campaign)
	pl, err := plan.GetPlan(ctx, w.b.pool, camp.PlanID)
	require.NoError(t, err)
	mid := provider.MessageID(w.b.keyOf(pl, 1), 0)
	export := sesLine("Delivery", addressOf(pl, 1), mid, `,"delivery":{"timestamp":"2026-12-01T10:00:02.000Z","recipients":["`+addressOf(pl, 1)+`"],"smtpResponse":"250 ok"}`) + "\n"
	c := &client{t: t, h: w.srv.Handler(), token: p.token, csrf: p.csrf}
	rec := c.uploadEvidence("/campaigns/"+camp.ID+"/evidence", "ses-events.jsonl", export, false)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	shown, ok := strings.CutPrefix(rec.Header().Get("Location"), "/campaigns/"+camp.ID+"/evidence?shown=")
	require.True(t, ok, rec.Header().Get("Location"))
	return shown
}

// readObject is one object a route is read on, for the matrix: whose it
// is (nil for one nobody made) and the route's parameters for it.
type readObject struct {
	name   string
	owner  *readObjects
	params *strings.Replacer
}

// objectsFor lists the objects route kind k is read on by c: someone
// else's (the author's), c's user's own when they have one, and one that
// does not exist.
func (w *readWorld) objectsFor(k readKind, c readCaller) []readObject {
	params := func(o readObjects) *strings.Replacer {
		id := o.campaign
		if k == readEvidence { // an upload is of the author's campaign
			id = w.author.campaign + "/evidence?shown=" + o.evidence
		}
		return strings.NewReplacer(":id/evidence", id, ":id", o.campaign, ":ordinal", "1", ":key", o.call, ":rid", o.request,
			":token", w.unsubscribe, ":name", w.asset, "*", "jobs")
	}
	whose := func(o readObjects) string {
		switch k {
		case readCampaign:
			return o.campaign
		case readCall:
			return o.call
		case readEvidence:
			return o.evidence
		}
		return o.request
	}
	none := params(readObjects{campaign: w.absentCampaign, call: w.absentCall, request: w.absentRequest, evidence: "nothing-shown"})
	switch k {
	case readNothing, readAbsent:
		return []readObject{{name: "-", params: none}}
	}
	author := w.author
	out := []readObject{{name: "someone else's", owner: &author, params: params(author)}}
	if own, ok := w.own[c.actor.Email]; ok && whose(own) != "" {
		out = append(out, readObject{name: "its own", owner: &own, params: params(own)})
	}
	return append(out, readObject{name: "nobody's", params: none})
}

// readOutcome is what a caller gets.
type readOutcome string

const (
	outcomeRead      readOutcome = "read"      // 2xx, or a redirect to another page of it
	outcomeSignIn    readOutcome = "sign in"   // the UI: to the sign-in page (401 for a JSON read)
	outcomeToken     readOutcome = "401"       // the API: no token
	outcomeForbidden readOutcome = "403"       // the route's role
	outcomeNotFound  readOutcome = "404"       // nothing there, or nothing the caller may know of
	outcomeOther     readOutcome = "something" // anything else (a 5xx, a 409): never expected
)

// outcomeOf classifies an answer.
func outcomeOf(rec *httptest.ResponseRecorder) readOutcome {
	switch {
	case rec.Code == http.StatusSeeOther && strings.HasPrefix(rec.Header().Get("Location"), "/login"):
		return outcomeSignIn
	case rec.Code >= 200 && rec.Code < 400:
		return outcomeRead
	case rec.Code == http.StatusUnauthorized:
		return outcomeToken
	case rec.Code == http.StatusForbidden:
		return outcomeForbidden
	case rec.Code == http.StatusNotFound:
		return outcomeNotFound
	}
	return outcomeOther
}

// get sends GET path as c: the UI with c's session (an agent's token as a
// bearer header, which the UI does not take), the API with c's token.
func (w *readWorld) get(c readCaller, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	switch {
	case strings.HasPrefix(path, api.Prefix+"/") && c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	case c.session != "":
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: c.session})
	case c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	rec := httptest.NewRecorder()
	w.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// uiNeed is the UI route's role, from its table (the server's own routes:
// anyone, River's UI: admins).
func uiNeed(path string) access {
	for _, r := range routeTable() {
		if r.method == http.MethodGet && r.path == path {
			return r.need
		}
	}
	if strings.HasPrefix(path, "/riverui") {
		return admin
	}
	return public
}

// expected is what the read rule gives caller c on route (method and
// path as echo lists it) for object o.
func expected(route string, rr readRoute, c readCaller, o readObject) readOutcome {
	path := strings.TrimPrefix(route, "GET ")
	isAPI := strings.HasPrefix(path, api.Prefix+"/")
	switch {
	case rr.kind == readAbsent:
		return outcomeNotFound
	case rr.public:
		return outcomeRead
	case isAPI && c.token == "":
		return outcomeToken
	case !isAPI && c.session == "":
		return outcomeSignIn
	case !isAPI && !allowed(c.actor, true, uiNeed(path)):
		return outcomeForbidden
	case o.owner == nil && rr.kind != readNothing:
		return outcomeNotFound
	case rr.kind == readCall && !mayReadCall(c.actor, o.owner.owner.UserID):
		return outcomeNotFound
	case rr.kind == readRequest && !mayReadRequest(c.actor, o.owner.owner.UserID):
		return outcomeNotFound
	case rr.kind == readEvidence && c.actor.UserID != o.owner.owner.UserID:
		return outcomeNotFound
	}
	return outcomeRead
}

// TestReadMatrix walks every GET route the server answers — the UI's
// route table, the API's routes and the server's own, as echo lists them
// with the API mounted as serve mounts it — as a visitor, a person of
// every role, the proposer's agent token and an operator's agent token,
// each on someone else's object, on one of its own user's where there is
// one, and on one that does not exist, and checks each answer against
// the read rule above: the same rule at every door. A GET route without
// an entry in readRoutes fails it; so does an entry without its route.
func TestReadMatrix(t *testing.T) {
	t.Parallel()
	w := newReadWorld(t)
	var routes []string
	for _, r := range w.srv.echo.Routes() {
		if r.Method == http.MethodGet {
			routes = append(routes, r.Method+" "+r.Path)
		}
	}
	slices.Sort(routes)
	routes = slices.Compact(routes)
	var tabled []string
	for r := range readRoutes {
		tabled = append(tabled, r)
	}
	slices.Sort(tabled)
	require.Equal(t, tabled, routes, "every GET route has an entry in readRoutes, and only routes do")

	var matrix strings.Builder
	for _, route := range routes {
		rr := readRoutes[route]
		for _, c := range w.callers {
			for _, o := range w.objectsFor(rr.kind, c) {
				path := o.params.Replace(strings.TrimPrefix(route, "GET "))
				want := expected(route, rr, c, o)
				t.Run(fmt.Sprintf("%s as %s on %s", route, c.name, o.name), func(t *testing.T) {
					rec := w.get(c, path)
					got := outcomeOf(rec)
					if want == outcomeSignIn && got == outcomeToken && (strings.HasSuffix(path, "/counts") || strings.HasSuffix(path, ".json")) {
						got = outcomeSignIn // a JSON read answers 401 where a page sends to sign in
					}
					require.Equal(t, want, got, "GET %s: %d %s", path, rec.Code, strings.TrimSpace(firstLine(rec.Body.String())))
					if rr.listsCalls && got == outcomeRead {
						w.requireListedCalls(t, c, rec.Body.String())
					}
				})
				fmt.Fprintf(&matrix, "%-46s %-15s %-15s %s\n", route, c.name, o.name, want)
			}
		}
	}
	t.Logf("route, caller, object, expected:\n%s", matrix.String())
}

// requireListedCalls: the tool calls' list shows c only the calls c may
// read (by their event ids): the author's, and c's user's own.
func (w *readWorld) requireListedCalls(t *testing.T, c readCaller, body string) {
	t.Helper()
	owners := []readObjects{w.author}
	if own, ok := w.own[c.actor.Email]; ok {
		owners = append(owners, own)
	}
	for _, o := range owners {
		require.Equal(t, mayReadCall(c.actor, o.owner.UserID), strings.Contains(body, o.events[0]),
			"the list shows %s's call to %s exactly when they may read it", o.owner.Email, c.name)
		require.Equal(t, mayReadRequest(c.actor, o.owner.UserID), strings.Contains(body, o.events[1]),
			"the list shows %s's approval request to %s exactly when they may read it", o.owner.Email, c.name)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// TestUIAndAPIReadAlike: for every object the UI shows and the API
// answers — a campaign, its targets, a target, its audit, its diff, its
// decision, the suppression list, a tool call — a person gets the same
// from both: both read it, or both refuse it with the same status (404
// and 404 for what they may not know of, 409 and 409 for an audit of a
// campaign never approved), through their session and through a personal
// token of theirs, on someone else's object, on their own and on one
// that does not exist. (A campaign's trail, an approval request and an
// upload of evidence have UI pages only; agent tokens have no UI:
// TestReadMatrix covers both.)
func TestUIAndAPIReadAlike(t *testing.T) {
	t.Parallel()
	w := newReadWorld(t)
	type objectKind struct {
		name    string
		ui, api []string // paths: :id a campaign, :key a tool call, :address its first target
		drafts  bool     // also read of a campaign never approved
		call    bool     // read of a tool call, not a campaign
	}
	kinds := []objectKind{
		{name: "campaign", ui: []string{"/campaigns/:id", "/campaigns/:id/draft", "/campaigns/:id/approval"}, api: []string{"/campaigns/:id"}, drafts: true},
		{name: "targets", ui: []string{"/campaigns/:id/run", "/campaigns/:id/counts", "/campaigns/:id/run/live"}, api: []string{"/campaigns/:id/targets"}},
		{name: "target", ui: []string{"/campaigns/:id/targets/1"}, api: []string{"/campaigns/:id/targets?q=:address"}},
		{name: "audit", ui: []string{"/campaigns/:id/audit.json", "/campaigns/:id/audit.csv"}, api: []string{"/campaigns/:id/audit"}, drafts: true},
		{name: "diff", ui: []string{"/campaigns/:id/diff?against=approved", "/campaigns/:id/diff?against=previous"},
			api: []string{"/campaigns/:id/diff?against=approved", "/campaigns/:id/diff?against=previous"}, drafts: true},
		{name: "decision", ui: []string{"/campaigns/:id/approval"}, api: []string{"/campaigns/:id/decision"}, drafts: true},
		{name: "suppressions", ui: []string{"/suppressions", "/suppressions?address=user"}, api: []string{"/suppressions", "/suppressions?address=user"}},
		{name: "tool call", ui: []string{"/tool-calls/effects/:key"}, api: []string{"/effects/:key"}, call: true},
	}
	type object struct{ name, id string }
	for _, c := range w.callers {
		if c.session == "" {
			continue // the visitor and the agents: no session, no UI
		}
		for _, k := range kinds {
			var objects []object
			switch {
			case k.call:
				objects = []object{{"someone else's", w.author.call}, {"nobody's", w.absentCall}}
				if own, ok := w.own[c.actor.Email]; ok {
					objects = append(objects, object{"its own", own.call})
				}
			case !strings.Contains(strings.Join(k.ui, ""), ":id"):
				objects = []object{{"-", ""}}
			default:
				objects = []object{{"someone else's", w.author.campaign}, {"nobody's", w.absentCampaign}}
				if own, ok := w.own[c.actor.Email]; ok && own.campaign != "" {
					objects = append(objects, object{"its own", own.campaign})
				}
				if k.drafts {
					objects = append(objects, object{"someone else's draft", w.draft})
				}
			}
			for _, o := range objects {
				t.Run(fmt.Sprintf("%s as %s on %s", k.name, c.name, o.name), func(t *testing.T) {
					params := strings.NewReplacer(":id", o.id, ":key", o.id, ":address", "user0001%40example.com")
					answers := map[readOutcome][]string{}
					var statuses []string
					for _, p := range k.ui {
						rec := w.get(c, params.Replace(p))
						got := outcomeOf(rec)
						if rec.Code == http.StatusConflict {
							got = "409"
						}
						answers[got] = append(answers[got], "UI "+p)
						statuses = append(statuses, fmt.Sprintf("UI %s: %d", params.Replace(p), rec.Code))
					}
					for _, p := range k.api {
						rec := w.get(c, api.Prefix+params.Replace(p))
						got := outcomeOf(rec)
						if rec.Code == http.StatusConflict {
							got = "409"
						}
						answers[got] = append(answers[got], "API "+p)
						statuses = append(statuses, fmt.Sprintf("API %s: %d %s", params.Replace(p), rec.Code, firstLine(rec.Body.String())))
					}
					require.Len(t, answers, 1, "the UI and the API disagree:\n%s", strings.Join(statuses, "\n"))
					for got := range answers {
						require.NotEqual(t, outcomeOther, got, "%s", strings.Join(statuses, "\n"))
					}
				})
			}
		}
	}
}
