package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDiffRoute: GET /campaigns/{id}/diff over HTTP with an agent's token,
// before and after an approved version is edited and resubmitted, one page
// at a time, and its refusals.
func TestDiffRoute(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	created := s.json("agent", "POST", "/campaigns", newCampaign(5))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	diff := func(query string) reply {
		t.Helper()
		return s.do("agent", "GET", "/campaigns/"+id+"/diff?"+query, "", "")
	}

	// Never approved: 200, nothing to compare with, and why.
	r := diff("against=approved")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Nil(t, r.body["base"])
	require.Nil(t, r.body["targets"])
	require.Nil(t, r.body["payload"])
	require.Contains(t, r.body["message"], "never been approved")
	require.Equal(t, "https://onceplan.example/campaigns/"+id+"/diff?against=approved", r.body["url"])

	sub := s.do("agent", "POST", "/campaigns/"+id+"/submit", "", "")
	require.Equal(t, http.StatusOK, sub.status, sub.raw)
	approved := s.json("approver", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": sub.body["plan_hash"]})
	require.Equal(t, http.StatusOK, approved.status, approved.raw)

	// Version 2: another subject, three targets appended; submitted.
	edited := s.json("agent", "PATCH", "/campaigns/"+id, map[string]any{"subject": "Hello again {{.first_name}}"})
	require.Equal(t, http.StatusOK, edited.status, edited.raw)
	more := []map[string]any{
		{"address": "zoe@example.com", "vars": map[string]any{"first_name": "Zoe"}},
		{"address": "yan@example.com", "vars": map[string]any{"first_name": "Yan"}},
		{"address": "xia@example.com", "vars": map[string]any{"first_name": "Xia"}},
	}
	imp := s.json("agent", "POST", "/campaigns/"+id+"/targets?append=true", more)
	require.Equal(t, http.StatusOK, imp.status, imp.raw)
	sub = s.do("agent", "POST", "/campaigns/"+id+"/submit", "", "")
	require.Equal(t, http.StatusOK, sub.status, sub.raw)

	for _, against := range []string{"approved", "previous"} {
		r := diff("against=" + against)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, against, r.body["against"])
		base := r.body["base"].(map[string]any)
		require.EqualValues(t, 1, base["version"], against)
		require.Equal(t, true, base["payload_kept"])
		require.EqualValues(t, 2, r.body["current"].(map[string]any)["version"])
		require.Equal(t, "pending_approval", r.body["current"].(map[string]any)["state"])
		var subject map[string]any
		for _, f := range r.body["payload"].([]any) {
			if f := f.(map[string]any); f["field"] == "subject" {
				subject = f
			} else {
				require.Equal(t, false, f["changed"], f["field"])
			}
		}
		require.Equal(t, []any{
			map[string]any{"op": "removed", "text": "Hello {{.first_name}}"},
			map[string]any{"op": "added", "text": "Hello again {{.first_name}}"},
		}, subject["lines"])
		targets := r.body["targets"].(map[string]any)
		added := targets["added"].(map[string]any)
		require.EqualValues(t, 3, added["count"])
		require.Len(t, added["items"], 3)
		require.Nil(t, added["next"])
		require.EqualValues(t, 0, targets["removed"].(map[string]any)["count"])
		require.EqualValues(t, 0, targets["changed"].(map[string]any)["count"])
		require.EqualValues(t, 5, targets["unchanged"])
		require.EqualValues(t, 0, r.body["done"].(map[string]any)["count"])
	}

	// Page by page: every added target once.
	var got []string
	q := url.Values{"against": {"previous"}, "rows": {"added"}, "limit": {"2"}}
	for range 5 {
		r := diff(q.Encode())
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, "added", r.body["rows"])
		for _, it := range r.body["items"].([]any) {
			got = append(got, it.(map[string]any)["target"].(string))
		}
		next, _ := r.body["next"].(string)
		if next == "" {
			break
		}
		q.Set("after", next)
	}
	require.ElementsMatch(t, []string{"zoe@example.com", "yan@example.com", "xia@example.com"}, got)
	r = diff("rows=removed")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, "approved", r.body["against"], "against defaults to the approved version")
	require.Empty(t, r.body["items"])

	// Refusals: one sentence naming the parameter; unknown campaigns.
	for _, c := range []struct{ query, field string }{
		{"against=latest", "against"},
		{"against=", "against"},
		{"against=approved&rows=moved", "rows"},
		{"against=approved&rows=added&after=zoe@example.com", "after"},
		{"against=approved&limit=0", "limit"},
		{"against=approved&rows=added&limit=5000", "limit"},
	} {
		r := diff(c.query)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.query, r.raw)
		require.Equal(t, c.field, r.body["error"].(map[string]any)["field"], c.query)
		require.Contains(t, r.errMessage(), c.field, c.query)
	}
	require.Contains(t, diff("against=latest").errMessage(), `"approved"`)
	for _, other := range []string{"00000000-0000-4000-8000-000000000000", "not-a-campaign"} {
		r := s.do("agent", "GET", "/campaigns/"+other+"/diff?against=approved", "", "")
		require.Equal(t, http.StatusNotFound, r.status, r.raw)
		require.Equal(t, "not_found", r.errCode())
	}
	require.Equal(t, http.StatusUnauthorized, s.do("", "GET", "/campaigns/"+id+"/diff", "", "").status)
}
