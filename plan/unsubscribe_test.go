package plan_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/plan"
)

// TestPlanHashCoversTransactional: a transactional campaign's plan hash is
// the layout's with "list_unsubscribe": false among the members (computed
// here by hand), so it differs from the same campaign's with the link, whose
// hash is what every plan's was before the choice existed (the golden
// vector of TestPlanHashGolden is unchanged).
func TestPlanHashCoversTransactional(t *testing.T) {
	t.Parallel()
	in := plan.PlanHashInput{
		Payload:  plan.Payload{From: "a@example.com", Subject: "S", Text: "T"},
		Provider: "outbox", Tool: "email.send", TargetCount: 1, ListDigest: strings.Repeat("0", 64),
	}
	withLink := plan.PlanHash(in)
	in.Transactional = true
	transactional := plan.PlanHash(in)
	require.NotEqual(t, withLink, transactional)

	byHand := func(head string) string {
		sum := sha256.Sum256([]byte("onceplan-plan-v1\n" + head + "\n1\n" + strings.Repeat("0", 64)))
		return hex.EncodeToString(sum[:])
	}
	require.Equal(t, byHand(`{"from":"a@example.com","html":"","provider":"outbox","subject":"S","text":"T","tool":"email.send"}`), withLink)
	require.Equal(t, byHand(`{"from":"a@example.com","html":"","list_unsubscribe":false,"provider":"outbox","subject":"S","text":"T","tool":"email.send"}`), transactional)
}

// TestUnsubscribeURLVariable: {{.unsubscribe_url}} is the message's link,
// not a target's variable: no target needs it (Fields, Check), Render puts
// the link there (escaped for HTML by context) and in ListUnsubscribe,
// whatever a target carries under the name, and a message without a link
// (transactional) renders it empty.
func TestUnsubscribeURLVariable(t *testing.T) {
	t.Parallel()
	p := plan.Payload{From: "a@example.com", Subject: "Hi {{.name}}",
		Text: "Hello {{.name}}\nStop: {{.unsubscribe_url}}",
		HTML: `<p>Hello {{.name}}</p><a href="{{.unsubscribe_url}}">Unsubscribe</a>`}
	tpl, err := p.Compile()
	require.NoError(t, err)
	require.Equal(t, []string{"name"}, tpl.Fields())

	const link = "https://onceplan.example.com/u/AQID-_x"
	m, err := tpl.RenderWithLink("ann@example.com", map[string]string{"name": "Ann", "unsubscribe_url": "https://evil.example/"}, link)
	require.NoError(t, err)
	require.Equal(t, link, m.ListUnsubscribe)
	require.Equal(t, "Hello Ann\nStop: "+link, m.Text)
	require.Equal(t, `<p>Hello Ann</p><a href="`+link+`">Unsubscribe</a>`, m.HTML)

	m, err = tpl.Render("ann@example.com", map[string]string{"name": "Ann"})
	require.NoError(t, err)
	require.Empty(t, m.ListUnsubscribe)
	require.Equal(t, "Hello Ann\nStop: ", m.Text)

	// Check does not report it missing from targets that lack it; the
	// preview shows a sample link.
	b := setup(t)
	_, err = b.svc.Edit(b.ctx, b.proposer, b.campaign.ID, p)
	require.NoError(t, err)
	_, err = b.importList(t, plan.ImportParams{Body: strings.NewReader("email,name\nann@example.com,Ann\n")})
	require.NoError(t, err)
	d, err := approval.GetDraft(b.ctx, b.pool, b.campaign.ID, 1)
	require.NoError(t, err)
	r, err := plan.Check(b.ctx, b.pool, d.Content())
	require.NoError(t, err)
	require.Zero(t, r.MissingCount)
	require.Empty(t, r.Missing)
	pv, err := plan.Preview(b.ctx, b.pool, d.Content(), "", 1)
	require.NoError(t, err)
	require.Equal(t, plan.SampleUnsubscribeURL, pv.ListUnsubscribe)
	require.Contains(t, pv.Text, "Stop: "+plan.SampleUnsubscribeURL)
	pv, err = plan.PreviewWithLink(b.ctx, b.pool, d.Content(), "", 1, "")
	require.NoError(t, err)
	require.Empty(t, pv.ListUnsubscribe)
}

// TestListUnsubscribeFixedInTheDatabase: a campaign's choice never changes
// (even for the owner), and a plan with another choice than its
// campaign's is refused.
func TestListUnsubscribeFixedInTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.True(t, b.campaign.ListUnsubscribe)
	_, err := b.pool.Exec(b.ctx, `UPDATE campaign SET list_unsubscribe = false WHERE id = $1`, b.campaign.ID)
	require.ErrorContains(t, err, "fixed at create")
	_, err = b.pool.Exec(b.ctx, `
		INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
		                  list_id, target_count, plan_hash, proposed_by, list_unsubscribe)
		VALUES ($1, 1, 'outbox', 'email.send', 'a@example.com', 'S', 'T', '', 0, 1, repeat('a', 64), $2, false)`,
		b.campaign.ID, b.user)
	require.ErrorContains(t, err, "is not its campaign's")

	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{Name: "Receipts", Provider: "outbox", Transactional: true,
		Payload: plan.Payload{From: "a@example.com", Subject: "Receipt", Text: "Thanks"}})
	require.NoError(t, err)
	c := res.Campaign
	require.False(t, c.ListUnsubscribe)
	got, err := approval.GetCampaign(b.ctx, b.pool, c.ID)
	require.NoError(t, err)
	require.False(t, got.ListUnsubscribe)
}
