package web

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestTargetPageShowsWhichMessageOfABatchCallItWas: a target sent in a
// batch call shows the call's one raw answer, and says which message of
// that answer is its own.
func TestTargetPageShowsWhichMessageOfABatchCallItWas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{})
	ctx := context.Background()
	store := ledger.NewStore(b.pool)
	reqs := []ledger.ClaimRequest{
		{ClaimParams: ledger.ClaimParams{Key: ledger.Key(b.keyOf(p, 1)), Owner: "test/1", PlanID: p.ID, Ordinal: 1}},
		{ClaimParams: ledger.ClaimParams{Key: ledger.Key(b.keyOf(p, 2)), Owner: "test/1", PlanID: p.ID, Ordinal: 2}},
	}
	call, won, err := store.ClaimCall(ctx, "outbox", reqs, ledger.Gate{}, func([]ledger.Effect) (string, []byte, error) {
		return "k", []byte("[...]"), nil
	})
	require.NoError(t, err)
	require.Len(t, won, 2)
	answer := `HTTP/1.1 200 OK` + "\r\n\r\n" + `{"data":[{"id":"first-id"},{"id":"second-id"}]}`
	_, err = store.AnswerCall(ctx, call.ID, ledger.ResponseSend, []byte(answer), call.Members, []ledger.SettleParams{
		{EffectID: won[0].ID, State: ledger.StateDone, Receipt: "first-id"},
		{EffectID: won[1].ID, State: ledger.StateDone, Receipt: "second-id"},
	})
	require.NoError(t, err)

	d := parse(t, b.as["viewer"].get("/campaigns/"+c.ID+"/targets/2"))
	raw := tid(d, "raw-response")
	require.Equal(t, 1, raw.Length())
	require.Contains(t, raw.Text(), `"second-id"`, "the call's answer, as received")
	require.Contains(t, d.Find("details.raw summary").Text(), "message 2 of its answer")
}
