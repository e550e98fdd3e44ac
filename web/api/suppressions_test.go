package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSuppressionsRoundTrip: an operator adds (normalised, the actor
// recorded), a second add finds the entry, the list pages and filters by
// prefix, an admin takes it off with a reason (the entry stays, with its
// removal), and each refusal — an agent adding, an operator removing, a
// removal without a reason, an address not on the list — changes nothing.
func TestSuppressionsRoundTrip(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	added := w.json("operator", "POST", "/suppressions", map[string]any{"address": " Ann@Example.COM ", "reason": "manual", "note": "asked by phone"})
	require.Equal(t, http.StatusCreated, added.status, added.raw)
	require.Equal(t, "ann@example.com", added.body["address"])
	require.Equal(t, "operator@example.com", added.body["actor"])
	require.Equal(t, "actor", added.body["source"])
	require.Equal(t, true, added.body["added"])
	again := w.json("admin", "POST", "/suppressions", map[string]any{"address": "ann@example.com", "reason": "complaint"})
	require.Equal(t, http.StatusOK, again.status, again.raw)
	require.Equal(t, false, again.body["added"])
	require.Equal(t, added.body["id"], again.body["id"])
	require.Equal(t, "manual", again.body["reason"], "the first entry stands")

	for _, a := range []string{"anna@example.com", "bob@example.com"} {
		r := w.json("operator", "POST", "/suppressions", map[string]any{"address": a, "reason": "hard_bounce"})
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}

	// Refusals.
	w.refused("agent", "POST", "/suppressions", "application/json", `{"address":"cy@example.com","reason":"manual"}`, 403, "forbidden", "agent")
	w.refused("viewer", "POST", "/suppressions", "application/json", `{"address":"cy@example.com","reason":"manual"}`, 403, "forbidden")
	w.refused("operator", "POST", "/suppressions", "application/json", `{"address":"cy@example.com"}`, 400, "invalid", "reason")
	w.refused("operator", "POST", "/suppressions", "application/json", `{"address":"cy@example.com","reason":"bored"}`, 400, "invalid", "reason")
	w.refused("operator", "POST", "/suppressions", "application/json", `{"address":"not an address","reason":"manual"}`, 400, "invalid", "address")
	w.refused("operator", "POST", "/suppressions/ann@example.com/remove", "application/json", `{"reason":"ok again"}`, 403, "forbidden", "admin")
	w.refused("agent", "POST", "/suppressions/ann@example.com/remove", "application/json", `{"reason":"ok again"}`, 403, "forbidden")
	w.refused("admin", "POST", "/suppressions/ann@example.com/remove", "application/json", `{"reason":" "}`, 400, "invalid", "reason")
	w.refused("admin", "POST", "/suppressions/ann@example.com/remove", "application/json", `{}`, 400, "invalid", "reason")
	w.refused("admin", "POST", "/suppressions/cy@example.com/remove", "application/json", `{"reason":"x"}`, 404, "not_suppressed", "cy@example.com")

	// Listing: any signed-in caller, agents included; newest first, by
	// pages, by prefix.
	list := w.do("agent", "GET", "/suppressions?limit=2", "", "")
	require.Equal(t, http.StatusOK, list.status, list.raw)
	items := list.body["items"].([]any)
	require.Len(t, items, 2)
	require.Equal(t, "bob@example.com", items[0].(map[string]any)["address"])
	next := list.body["next"].(string)
	rest := w.do("viewer", "GET", "/suppressions?limit=2&after="+next, "", "")
	require.Equal(t, http.StatusOK, rest.status, rest.raw)
	require.Len(t, rest.body["items"].([]any), 1)
	require.Nil(t, rest.body["next"])
	prefix := w.do("viewer", "GET", "/suppressions?address=ANN", "", "")
	require.Len(t, prefix.body["items"].([]any), 2, "ann@ and anna@")
	w.refused("viewer", "GET", "/suppressions?after=zzz", "", "", 400, "invalid", "after")
	w.refused("viewer", "GET", "/suppressions?limit=1001", "", "", 400, "invalid", "limit")
	w.refused("viewer", "GET", "/suppressions?include_removed=perhaps", "", "", 400, "invalid", "include_removed")
	w.refused("", "GET", "/suppressions", "", "", 401, "unauthenticated")

	// An admin takes it off: the entry stays, with who and why.
	removed := w.json("admin", "POST", "/suppressions/Ann@Example.com/remove", map[string]any{"reason": "she asked to be mailed again"})
	require.Equal(t, http.StatusOK, removed.status, removed.raw)
	rm := removed.body["removed"].(map[string]any)
	require.Equal(t, "admin@example.com", rm["actor"])
	require.Equal(t, "she asked to be mailed again", rm["reason"])
	active := w.do("viewer", "GET", "/suppressions?address=ann@example.com", "", "")
	require.Empty(t, active.body["items"].([]any))
	all := w.do("viewer", "GET", "/suppressions?address=ann@example.com&include_removed=true", "", "")
	require.Len(t, all.body["items"].([]any), 1)
	require.NotNil(t, all.body["items"].([]any)[0].(map[string]any)["removed"])
	// Suppressed again later: a new entry, the old one kept.
	re := w.json("operator", "POST", "/suppressions", map[string]any{"address": "ann@example.com", "reason": "unsubscribed"})
	require.Equal(t, http.StatusCreated, re.status, re.raw)
	require.NotEqual(t, added.body["id"], re.body["id"])
}
