package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
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

// TestArchivedCampaignRefusesEveryAction: a campaign that completed with
// every target done is archived; every state action on it, with the real
// tokens of those who may take it, answers 409 in one sentence saying it is
// archived — resume included, which answered 500 — and changes nothing:
// not its state or version, not its trail, no job queued, no draft made.
func TestArchivedCampaignRefusesEveryAction(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := context.Background()
	id := s.started(3)
	store := ledger.NewStore(s.pool)
	items := s.do("viewer", "GET", "/campaigns/"+id+"/targets", "", "").body["items"].([]any)
	for i, it := range items {
		c, err := store.Claim(ctx, workerClaim(t, s, id, it, "w1"))
		require.NoError(t, err)
		_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, fmt.Appendf(nil, `{"id":"r-%d"}`, i))
		require.NoError(t, err)
		_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: fmt.Sprintf("r-%d", i)})
		require.NoError(t, err)
	}
	// Its jobs ran to the end, as workers would have run them (none runs here).
	_, err := s.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'onceplan_effect'`)
	require.NoError(t, err)
	completed, err := s.svc.CompleteIfDone(ctx, id, func(context.Context, pgx.Tx, approval.Campaign) (bool, error) { return true, nil })
	require.NoError(t, err)
	require.True(t, completed)
	_, err = store.ArchiveCampaign(ctx, id, "ops@example.com")
	require.NoError(t, err)
	hash := s.do("viewer", "GET", "/campaigns/"+id, "", "").body["plan_hash"]
	key := items[0].(map[string]any)["key"].(string)

	record := func() string {
		var out string
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT concat_ws(' ', c.state, c.version,
			(SELECT count(*) FROM river_job), (SELECT count(*) FROM campaign_event WHERE campaign_id = c.id),
			(SELECT count(*) FROM draft WHERE campaign_id = c.id), (SELECT count(*) FROM effect_bump_archive))
			FROM campaign c WHERE c.id = $1`, id).Scan(&out))
		return out
	}
	before := record()
	for _, a := range []struct {
		who, method, path, contentType, body string
	}{
		{"operator", "POST", "/campaigns/" + id + "/resume", "", ""},
		{"operator", "POST", "/campaigns/" + id + "/start", "", ""},
		{"operator", "POST", "/campaigns/" + id + "/pause", "application/json", `{"reason":"hold on"}`},
		{"operator", "POST", "/campaigns/" + id + "/cancel", "application/json", `{"reason":"enough"}`},
		{"proposer", "POST", "/campaigns/" + id + "/submit", "", ""},
		{"proposer", "PATCH", "/campaigns/" + id, "application/json", `{"subject":"Once more"}`},
		{"proposer", "POST", "/campaigns/" + id + "/targets", "application/json", `[{"address":"new@example.com"}]`},
		{"approver", "POST", "/campaigns/" + id + "/approve", "application/json", fmt.Sprintf(`{"plan_hash":%q}`, hash)},
		{"approver", "POST", "/campaigns/" + id + "/reject", "application/json", `{"reason":"no"}`},
		{"operator", "POST", "/effects/" + key + "/revoke", "application/json", `{"reason":"withdrawn"}`},
		{"approver", "POST", "/effects/" + key + "/supersede", "application/json", `{"reason":"send it again"}`},
		{"proposer", "POST", "/campaigns/" + id + "/test", "application/json", `{"to":["proposer@example.com"]}`},
	} {
		r := s.do(a.who, a.method, a.path, a.contentType, a.body)
		what := a.method + " " + a.path
		require.Equal(t, http.StatusConflict, r.status, "%s: %s", what, r.raw)
		require.Equal(t, "conflict", r.errCode(), what)
		require.Regexp(t, `^conflict: campaign `+id+` was archived on \d{4}-\d\d-\d\d \d\d:\d\d UTC, and an archived campaign never runs or changes again; clone it to send it anew$`,
			r.errMessage(), what)
		require.Equal(t, before, record(), "%s changed nothing", what)
	}
	steps := s.do("viewer", "GET", "/campaigns/"+id, "", "").body["next_steps"].([]any)
	require.Len(t, steps, 1)
	require.Contains(t, steps[0].(map[string]any)["what"], "the campaign is archived", "no step asks anyone to act")
}
