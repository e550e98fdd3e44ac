package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/onceplan/onceplan/approval"
	"github.com/stretchr/testify/require"
)

// TestCreateTransactional: "list_unsubscribe": false makes a transactional
// campaign (the campaign says so; its plan hash differs from the same
// campaign's with the link); left out, or true, the messages carry the
// link. Every exchange is checked against the OpenAPI document.
func TestCreateTransactional(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	hashes, ids := map[string]string{}, map[string]string{}
	for name, flag := range map[string]any{"default": nil, "true": true, "false": false} {
		body := newCampaign(2)
		if flag != nil {
			body["list_unsubscribe"] = flag
		}
		r := s.json("agent", http.MethodPost, "/campaigns", body)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		require.Equal(t, flag != false, r.body["list_unsubscribe"], name)
		got := s.json("viewer", http.MethodGet, "/campaigns/"+r.body["id"].(string), nil)
		require.Equal(t, flag != false, got.body["list_unsubscribe"], name)
		hashes[name], ids[name] = r.body["plan_hash"].(string), r.body["id"].(string)
	}
	// Keys, and so hashes, differ between campaigns: compare the
	// transactional campaign's hash with its own as if it had the link.
	ctx := context.Background()
	c, err := approval.GetCampaign(ctx, s.pool, ids["false"])
	require.NoError(t, err)
	d, err := approval.GetDraft(ctx, s.pool, c.ID, c.Version)
	require.NoError(t, err)
	require.Equal(t, hashes["false"], d.Hash(c))
	c.ListUnsubscribe = true
	require.NotEqual(t, hashes["false"], d.Hash(c), "the plan hash covers the choice")

	body := newCampaign(1)
	body["list_unsubscribe"] = "no"
	r := s.json("agent", http.MethodPost, "/campaigns", body)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
}
