package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestArchivedCampaign: GET /campaigns/{id} says when the campaign was
// archived (onceplan archive), and its counts and audit answer as before.
func TestArchivedCampaign(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	id := s.started(3)
	row := s.do("viewer", "GET", "/campaigns/"+id+"/targets", "", "").body["items"].([]any)[0].(map[string]any)
	store := ledger.NewStore(s.pool)
	ctx := context.Background()
	c, err := store.Claim(ctx, workerClaim(t, s, id, row, "w1"))
	require.NoError(t, err)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte(`{"id":"r-1"}`))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r-1"})
	require.NoError(t, err)
	cancelled := s.json("operator", "POST", "/campaigns/"+id+"/cancel", map[string]any{"reason": "one was enough"})
	require.Equal(t, http.StatusOK, cancelled.status, cancelled.raw)

	before := s.do("viewer", "GET", "/campaigns/"+id, "", "")
	require.NotContains(t, before.body, "archived_at")
	auditBefore := s.do("viewer", "GET", "/campaigns/"+id+"/audit", "", "")

	_, err = store.ArchiveCampaign(ctx, id, "ops@example.com")
	require.NoError(t, err)
	after := s.do("viewer", "GET", "/campaigns/"+id, "", "")
	require.Equal(t, http.StatusOK, after.status, after.raw)
	require.NotEmpty(t, after.body["archived_at"], "the campaign says it is archived")
	require.Equal(t, before.body["counts"], after.body["counts"], "its counts read as before")
	require.Equal(t, auditBefore.body, s.do("viewer", "GET", "/campaigns/"+id+"/audit", "", "").body, "its audit answers as before")
}
