package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestNULIsRefusedAtTheBoundary: PostgreSQL's text cannot hold a NUL, and
// each of these reached it and answered 500. A NUL anywhere a request can
// carry text — a path segment (raw or %00), a query parameter, a JSON
// string (\u0000), a JSON key, a nested value — is a 400 naming the field,
// and changes nothing.
func TestNULIsRefusedAtTheBoundary(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pending := w.campaignIn(t, "pending")
	running := w.campaignIn(t, "running")
	draft := w.campaignIn(t, "draft")
	unknown := w.campaignIn(t, "unknown")
	tool := w.campaignIn(t, "tool")
	_, _, err := suppression.Add(w.ctx, w.pool, suppression.AddParams{Address: "gone@example.com", Reason: suppression.Manual,
		Source: suppression.FromActor, Actor: "admin@example.com"})
	require.NoError(t, err)
	const json = "application/json"
	for _, tc := range []struct {
		who, method, path, ctype, body, field string
	}{
		// The reported ones.
		{"approver", http.MethodPost, "/campaigns/" + pending.id + "/reject", json, `{"reason":"no\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/campaigns/" + running.id + "/pause", json, `{"reason":"\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/campaigns/" + running.id + "/cancel", json, `{"reason":"stop\u0000now"}`, "reason"},
		{"operator", http.MethodPost, "/effects/" + unknown.key + "/revoke", json, `{"reason":"\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/effects/" + unknown.key + "/resolve", json, `{"outcome":"delivered","reason":"seen\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/effects/" + tool.key + "/revoke", json, `{"reason":"\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/effects/" + tool.key + "/resolve", json, `{"outcome":"not_delivered","reason":"\u0000"}`, "reason"},
		{"operator", http.MethodPost, "/suppressions", json, `{"address":"x@example.com","reason":"manual","note":"a\u0000b"}`, "note"},
		{"viewer", http.MethodGet, "/suppressions?address=%00", "", "", "address"},
		{"operator", http.MethodPost, "/effects/%00/resolve", json, `{"outcome":"delivered","reason":"r"}`, "key"},
		// Their kin: every other string a route takes.
		{"admin", http.MethodPost, "/suppressions/gone@example.com/remove", json, `{"reason":"\u0000"}`, "reason"},
		{"admin", http.MethodPost, "/suppressions/gone%00@example.com/remove", json, `{"reason":"back"}`, "address"},
		{"approver", http.MethodPost, "/campaigns/" + pending.id + "/approve", json, `{"plan_hash":"\u0000"}`, "plan_hash"},
		{"approver", http.MethodPost, "/effects/" + unknown.key + "/supersede", json, `{"target":"new@example.com","reason":"\u0000"}`, "reason"},
		{"proposer", http.MethodPost, "/campaigns", json, `{"name":"n\u0000","provider":"outbox","from":"a@example.com","subject":"s","text":"t"}`, "name"},
		{"proposer", http.MethodPost, "/campaigns", json, `{"name":"n","provider":"outbox","from":"a@example.com","subject":"s","text":"t","targets":[{"address":"a@example.com","vars":{"x":"\u0000"}}]}`, "targets"},
		{"proposer", http.MethodPatch, "/campaigns/" + draft.id, json, `{"subject":"\u0000"}`, "subject"},
		{"proposer", http.MethodPost, "/campaigns/" + draft.id + "/test", json, `{"to":["proposer@example.com","a\u0000@example.com"]}`, "to[1]"},
		{"agent", http.MethodPost, "/effects", json, `{"event":"e\u0000","tool":"t","target":{"kind":"subject","value":"v"},"args":{}}`, "event"},
		{"agent", http.MethodPost, "/effects", json, `{"event":"e","tool":"t","target":{"kind":"subject","value":"v\u0000"},"args":{}}`, "target.value"},
		{"agent", http.MethodPost, "/effects", json, `{"event":"e","tool":"t","target":{"kind":"subject","value":"v"},"args":{"a":["\u0000"]}}`, "args"},
		{"agent", http.MethodPost, "/effects/" + tool.key + "/settle", json, `{"lease":"` + tool.hash + `","outcome":"done","receipt":"r\u0000"}`, "receipt"},
		{"agent", http.MethodPost, "/effects/" + tool.key + "/heartbeat", json, `{"lease":"\u0000"}`, "lease"},
		{"viewer", http.MethodGet, "/campaigns?q=%00", "", "", "q"},
		{"viewer", http.MethodGet, "/campaigns?after=%00", "", "", "after"},
		{"viewer", http.MethodGet, "/campaigns/%00", "", "", "id"},
		{"viewer", http.MethodGet, "/campaigns/" + running.id + "/targets?q=a%00", "", "", "q"},
		{"viewer", http.MethodGet, "/campaigns/" + running.id + "/diff?after=%00", "", "", "after"},
		{"viewer", http.MethodGet, "/campaigns/" + running.id + "/decision?wait=%00", "", "", "wait"},
		{"viewer", http.MethodGet, "/effects/" + url.PathEscape(tool.key) + "%00", "", "", "key"},
		{"viewer", http.MethodGet, "/suppressions?x%00=1", "", "", "x\x00"},
		{"proposer", http.MethodPost, "/campaigns/" + draft.id + "/targets?address_column=%00", "text/csv", "email\na@example.com\n", "address_column"},
	} {
		r := w.refused(tc.who, tc.method, tc.path, tc.ctype, tc.body, http.StatusBadRequest, "invalid", "NUL")
		e, _ := r.body["error"].(map[string]any)
		require.Equal(t, tc.field, e["field"], "%s %s: %s", tc.method, tc.path, r.raw)
		require.Contains(t, r.errMessage(), strings.Trim(tc.field, "\x00"), "%s %s: the message names the field", tc.method, tc.path)
	}
}

// TestInvalidUTF8IsRefusedAtTheBoundary: bytes that are not UTF-8 in a
// path segment or a query parameter (%B8, %FF), which the fuzzer found
// answering 500 like a NUL (PostgreSQL's text holds neither), are a 400
// naming the field, and change nothing. (encoding/json turns them into
// U+FFFD in a JSON string; a target list's own importer refuses them.)
func TestInvalidUTF8IsRefusedAtTheBoundary(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	running := w.campaignIn(t, "running")
	const json = "application/json"
	for _, tc := range []struct {
		who, method, path, ctype, body, field string
	}{
		{"operator", http.MethodPost, "/effects/%B8/resolve", json, `{"outcome":"delivered","reason":"r"}`, "key"},
		{"operator", http.MethodPost, "/effects/%B8/revoke", json, `{"reason":"r"}`, "key"},
		{"viewer", http.MethodGet, "/effects/a%FFb", "", "", "key"},
		{"viewer", http.MethodGet, "/campaigns/%C3%28", "", "", "id"},
		{"viewer", http.MethodGet, "/suppressions?address=%FF", "", "", "address"},
		{"viewer", http.MethodGet, "/campaigns/" + running.id + "/targets?q=%ED%A0%80", "", "", "q"},
		{"admin", http.MethodPost, "/suppressions/gone%FE@example.com/remove", json, `{"reason":"back"}`, "address"},
		{"agent", http.MethodPost, "/effects", json, "{\"event\":\"e\",\"tool\":\"t\",\"target\":{\"kind\":\"subject\",\"value\":\"v\"},\"args\":{\"a\":\"\xff\"}}", "args"},
	} {
		r := w.refused(tc.who, tc.method, tc.path, tc.ctype, tc.body, http.StatusBadRequest, "invalid", "not valid UTF-8")
		e, _ := r.body["error"].(map[string]any)
		require.Equal(t, tc.field, e["field"], "%s %s: %s", tc.method, tc.path, r.raw)
	}
}
