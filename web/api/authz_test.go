package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/web/api"
)

// routeAction says which approval action each API route takes ("" for a
// read, which any signed-in caller may do; "public" for no token at all),
// the campaign state the request finds, and a request that succeeds when
// the caller may take the action. The expected allow/deny of every caller
// is then auth.Authorize's (approval/actor.go's permission table), not
// a second copy of it.
var routeAction = map[string]struct {
	action auth.Action
	state  string // see world.campaignIn; "" for routes on no campaign
	body   string // %[1]s is the plan hash, %[2]s the first target, %[3]d a number unique to the request
	status int    // when allowed
}{
	"GET /api/v1/openapi.yaml":             {"public", "", "", 200},
	"GET /api/v1/campaigns":                {"", "", "", 200},
	"POST /api/v1/campaigns":               {auth.ActionCreate, "", `{"name":"New","provider":"outbox","from":"a@example.com","subject":"S","text":"T"}`, 201},
	"GET /api/v1/campaigns/{id}":           {"", "draft", "", 200},
	"PATCH /api/v1/campaigns/{id}":         {auth.ActionEdit, "draft", `{"subject":"Changed {{.name}}"}`, 200},
	"POST /api/v1/campaigns/{id}/targets":  {auth.ActionImport, "draft", `[{"address":"new@example.com","vars":{"name":"New"}}]`, 200},
	"GET /api/v1/campaigns/{id}/targets":   {"", "running", "", 200},
	"POST /api/v1/campaigns/{id}/submit":   {auth.ActionSubmit, "draft", "", 200},
	"POST /api/v1/campaigns/{id}/approve":  {auth.ActionApprove, "pending", `{"plan_hash":"%[1]s"}`, 200},
	"POST /api/v1/campaigns/{id}/reject":   {auth.ActionReject, "pending", `{"reason":"not yet"}`, 200},
	"POST /api/v1/campaigns/{id}/start":    {auth.ActionStart, "approved", "", 200},
	"POST /api/v1/campaigns/{id}/pause":    {auth.ActionPause, "running", `{"reason":"wait"}`, 200},
	"POST /api/v1/campaigns/{id}/resume":   {auth.ActionResume, "paused", "", 200},
	"POST /api/v1/campaigns/{id}/cancel":   {auth.ActionCancel, "running", `{"reason":"stop"}`, 200},
	"POST /api/v1/campaigns/{id}/discard":  {auth.ActionDiscard, "draft", `{"reason":"wrong list"}`, 200},
	"GET /api/v1/campaigns/{id}/audit":     {"", "running", "", 200},
	"GET /api/v1/campaigns/{id}/diff":      {"", "pending", "", 200},
	"GET /api/v1/campaigns/{id}/decision":  {"", "pending", "", 200},
	"POST /api/v1/effects":                 {auth.ActionPerform, "", `{"event":"matrix-%[3]d","tool":"matrix.tool","target":{"kind":"subject","value":"t"},"args":{}}`, 201},
	"GET /api/v1/effects/{key}":            {"reader", "tool", "", 200},                                                                      // the call's user, operators and admins; 404 to others (toolcall.Status.MayRead)
	"POST /api/v1/effects/{key}/settle":    {auth.ActionPerform, "tool", `{"lease":"%[1]s","outcome":"done","receipt":"r","raw":"ok"}`, 200}, // "tool": a single effect begun, pending; %[1]s is its lease
	"POST /api/v1/effects/{key}/heartbeat": {auth.ActionPerform, "tool", `{"lease":"%[1]s"}`, 200},
	"POST /api/v1/effects/{key}/resolve":   {auth.ActionResolve, "unknown", `{"outcome":"not_delivered","reason":"bounced"}`, 200},
	"POST /api/v1/effects/{key}/supersede": {auth.ActionSupersede, "done", `{"target":"%[2]s","reason":"asked again"}`, 200},
	"POST /api/v1/effects/{key}/revoke":    {auth.ActionRevoke, "done", `{"reason":"reversed"}`, 200},
	"POST /api/v1/campaigns/{id}/test":     {auth.ActionTestSend, "draft", `{"to":["decider@example.com"]}`, 200},
	"GET /api/v1/suppressions":             {"", "", "", 200},
	"POST /api/v1/suppressions":            {auth.ActionSuppress, "", `{"address":"blocked%[3]d@example.com","reason":"manual"}`, 201},
	// {address} is suppressedAddress, suppressed before the matrix runs:
	// only an admin may take it off (once: the admin column comes first).
	"POST /api/v1/suppressions/{address}/remove": {auth.ActionUnsuppress, "", `{"reason":"asked to be mailed again"}`, 200},
}

// suppressedAddress is the address the matrix's remove route names.
const suppressedAddress = "suppressed@example.com"

// caller is one column of the matrix: a token of one role, an agent token
// (whose owner holds proposer, approver and operator), an operator's agent
// token, or none.
type caller struct {
	name  string
	actor auth.Actor
}

var callers = []caller{
	{"admin", auth.Actor{Roles: []auth.Role{auth.RoleAdmin}}},
	{"proposer", auth.Actor{Roles: []auth.Role{auth.RoleProposer}}},
	{"approver", auth.Actor{Roles: []auth.Role{auth.RoleApprover}}},
	{"operator", auth.Actor{Roles: []auth.Role{auth.RoleOperator}}},
	{"viewer", auth.Actor{Roles: []auth.Role{auth.RoleViewer}}},
	{"agent", auth.Actor{Roles: []auth.Role{auth.RoleProposer, auth.RoleApprover, auth.RoleOperator}, Agent: true}},
	{"operator-agent", auth.Actor{Roles: []auth.Role{auth.RoleOperator}, Agent: true}},
	{"", auth.Actor{}}, // no token
}

// TestAuthorizationMatrix calls every API route as every role, an agent
// token, an operator's agent token and no token, each on a campaign in
// the state where the request would succeed. Allowed: the route's success
// status. Denied: 403 forbidden (401 without a token) and nothing
// changed. A route missing from routeAction fails the test. (Every GET
// route is walked again by web's TestReadMatrix, beside the UI's, on
// objects of the caller's own user and of someone else.)
func TestAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	routes := api.Routes()
	var tabled []string
	for r := range routeAction {
		tabled = append(tabled, r)
	}
	slices.Sort(routes)
	slices.Sort(tabled)
	require.Equal(t, routes, tabled, "every route has a row in routeAction, and only routes do")

	w := newWorld(t)
	secret, _, err := auth.CreateToken(w.ctx, w.pool, "operator@example.com", "operator's agent", true)
	require.NoError(t, err)
	w.token["operator-agent"] = secret
	_, _, err = suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: suppressedAddress, Reason: suppression.Manual,
		Source: suppression.FromActor, Actor: "matrix@example.com"})
	require.NoError(t, err)
	var matrix strings.Builder
	requests := 0
	for _, route := range routes {
		row := routeAction[route]
		method, path, _ := strings.Cut(route, " ")
		path = strings.TrimPrefix(path, api.Prefix)
		fmt.Fprintf(&matrix, "%-48s", route)
		for _, who := range callers {
			var allowed bool
			switch {
			case row.action == "public":
				allowed = true
			case who.name == "":
				allowed = false
			case row.action == "":
				allowed = true // reading needs a signed-in caller, no role
			case row.action == "reader":
				// A tool call begun by the world's author, whose token is
				// not among the callers: people with the operator role.
				allowed = !who.actor.Agent && who.actor.Has(auth.RoleOperator)
			default:
				allowed = auth.Authorize(who.actor, row.action) == nil
			}
			var c campaign
			if row.state != "" {
				c = w.campaignIn(t, row.state)
			}
			p := strings.NewReplacer("{id}", c.id, "{key}", c.key, "{address}", suppressedAddress).Replace(path)
			body := row.body
			if strings.Contains(body, "%[") {
				requests++
				body = fmt.Sprintf(body, c.hash, c.target, requests)
			}
			ctype := ""
			if body != "" {
				ctype = "application/json"
			}
			before := snapshot(t, w.server)
			r := w.do(who.name, method, p, ctype, body)
			label := fmt.Sprintf("%s as %q", route, who.name)
			switch {
			case allowed:
				require.Equal(t, row.status, r.status, "%s is allowed: %s", label, r.raw)
				matrix.WriteString(" allow ")
			case who.name == "":
				require.Equal(t, http.StatusUnauthorized, r.status, "%s: %s", label, r.raw)
				require.Equal(t, "unauthenticated", r.errCode(), label)
				matrix.WriteString(" 401   ")
			case row.action == "reader":
				require.Equal(t, http.StatusNotFound, r.status, "%s is denied as if there were no such call: %s", label, r.raw)
				require.Equal(t, "not_found", r.errCode(), label)
				matrix.WriteString(" 404   ")
			default:
				require.Equal(t, http.StatusForbidden, r.status, "%s is denied: %s", label, r.raw)
				require.Equal(t, "forbidden", r.errCode(), label)
				matrix.WriteString(" deny  ")
			}
			if !allowed {
				require.Equal(t, before, snapshot(t, w.server), "%s changed something", label)
			}
		}
		matrix.WriteString("\n")
	}
	t.Logf("route × admin proposer approver operator viewer agent operator-agent none\n%s", matrix.String())
}
