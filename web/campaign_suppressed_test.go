package web

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestApprovalPageSaysWhoWillNotBeMailed: an address suppressed before the
// import is left out of the list (the draft's import report names its
// line), and the approval page counts it; one suppressed after the import
// is counted as a target of the list that will not be mailed.
func TestApprovalPageSaysWhoWillNotBeMailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	add := func(address string) {
		_, _, err := suppression.Add(ctx, b.pool, suppression.AddParams{Address: address, Reason: suppression.Unsubscribed,
			Source: suppression.FromActor, Actor: "ops@example.com"})
		require.NoError(t, err)
	}
	add("user0002@example.com")
	c := b.pending(campaignOpts{Targets: csvOf(4)})
	require.Equal(t, 3, b.campaignTargets(c.ID))

	page := func() (string, string, string) {
		d := parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/approval"))
		n := tid(d, "suppressed-count")
		return n.AttrOr("data-left-out", ""), n.AttrOr("data-suppressed", ""), strings.Join(strings.Fields(n.Text()), " ")
	}
	left, now, text := page()
	require.Equal(t, "1", left)
	require.Equal(t, "0", now)
	require.Equal(t, "1 left out of the list at import (suppressed: unsubscribed, bounced or complained)", text)

	add("USER0003@example.com")
	left, now, text = page()
	require.Equal(t, "1", left)
	require.Equal(t, "1", now)
	require.Contains(t, text, "1 target of the list suppressed since, not mailed when their turn comes")
}

// campaignTargets is the size of a campaign's current draft list.
func (b *bundle) campaignTargets(id string) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `
		SELECT l.target_count FROM campaign c JOIN draft d ON d.campaign_id = c.id AND d.version = c.version
		JOIN target_list l ON l.id = d.list_id WHERE c.id = $1`, id).Scan(&n))
	return n
}

// TestSuppressedTargetSaysWhyOnItsPage: a target the claim found
// suppressed shows as suppressed in the run page's counts and table, and
// its page says who suppressed it, why and when.
func TestSuppressedTargetSaysWhyOnItsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{Targets: csvOf(3)})
	e, _, err := suppression.Add(ctx, b.pool, suppression.AddParams{Address: "user0002@example.com", Reason: suppression.Complaint,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	// As the claim records it (ledger.Gate.Suppressed).
	_, err = b.pool.Exec(ctx, `INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, owner) VALUES ($1, 2, $2, $3, 'w/1/x')`,
		p.ID, b.keyOf(p, 2), e.ID)
	require.NoError(t, err)

	op := b.as["operator"]
	d := parse(t, op.get("/campaigns/"+c.ID+"/run"))
	require.Equal(t, "1", tid(d, "count-suppressed").Text())
	require.Equal(t, "suppressed", d.Find(`[data-testid="target-row"][data-ordinal="2"]`).AttrOr("data-state", ""))
	d = parse(t, op.get("/campaigns/"+c.ID+"/targets/2"))
	why := strings.Join(strings.Fields(tid(d, "target-suppressed").Text()), " ")
	require.Contains(t, why, "its address was suppressed before its turn: complaint (actor, by ops@example.com)")
}
