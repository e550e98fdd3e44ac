package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// TestApprovalPageShowsWhatChanged: an approved, partly sent version is
// edited (subject, one target out, one in) and resubmitted; the approver
// sees the counts, the subject's lines, the rows, and what is already
// done; each kind's link lists them page by page.
func TestApprovalPageShowsWhatChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, p := b.started(campaignOpts{})
	b.effect(p, 1, ledger.StateDone, "ok")
	b.effect(p, 2, ledger.StateDone, "ok")
	pr := b.as["proposer"]
	rec := pr.post("/campaigns/"+c.ID+"/payload", url.Values{"from": {"Billing <billing@example.com>"}, "subject": {"Reminder for {{.first_name}}"},
		"text": {"Hi {{.first_name}}"}, "html": {"<p>Hi {{.first_name}}</p>"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	list := strings.Replace(csvOf(5), "user0003@example.com,Name 3\n", "", 1) + "newcomer@example.com,Newcomer\n"
	_, err := b.svc.ImportTargets(ctx, pr.actor, c.ID, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(list)})
	require.NoError(t, err)
	_, err = b.svc.Submit(ctx, pr.actor, c.ID)
	require.NoError(t, err)

	d := parse(t, b.as["approver"].get("/campaigns/"+c.ID+"/approval"))
	require.Equal(t, 1, tid(d, "diff").Length(), "the previous submission is the approved version: shown once")
	diff := d.Find(`[data-testid="diff"][data-against="approved"]`)
	count := func(name string) string { return strings.TrimSpace(diff.Find(`[data-testid="` + name + `"]`).Text()) }
	require.Equal(t, "1", count("diff-added-count"))
	require.Equal(t, "1", count("diff-removed-count"))
	require.Equal(t, "0", count("diff-changed-count"))
	require.Equal(t, "4", count("diff-unchanged-count"))
	require.Equal(t, "2", count("diff-done-count"), "targets 1 and 2 were sent under version 1")
	subject := diff.Find(`[data-testid="diff-field"][data-field="subject"]`)
	require.Equal(t, "yes", subject.AttrOr("data-changed", ""))
	require.Equal(t, "− Hello {{.first_name}}", subject.Find(`[data-op="removed"]`).Text())
	require.Equal(t, "+ Reminder for {{.first_name}}", subject.Find(`[data-op="added"]`).Text())
	require.Equal(t, "no", diff.Find(`[data-testid="diff-field"][data-field="text"]`).AttrOr("data-changed", ""))
	require.Equal(t, 1, diff.Find(`[data-testid="diff-row"][data-kind="added"][data-target="newcomer@example.com"]`).Length())
	require.Equal(t, 1, diff.Find(`[data-testid="diff-row"][data-kind="removed"][data-target="user0003@example.com"]`).Length())
	require.Equal(t, 2, diff.Find(`[data-testid="diff-row"][data-kind="done"]`).Length())

	// The link to all added rows, for a viewer too.
	all, ok := diff.Find(`[data-testid="diff-all-added"]`).Attr("href")
	require.True(t, ok)
	page := parse(t, b.as["viewer"].get(all))
	require.Equal(t, "added", tid(page, "diff-rows-page").AttrOr("data-kind", ""))
	require.Equal(t, "newcomer@example.com", tid(page, "diff-row").AttrOr("data-target", ""))
	require.Zero(t, tid(page, "next-page").Length())

	// The comparison's own page, against the previous submission.
	page = parse(t, b.as["viewer"].get("/campaigns/"+c.ID+"/diff?against=previous"))
	require.Equal(t, "previous", tid(page, "diff").AttrOr("data-against", ""))
	require.Contains(t, tid(page, "diff-message").Text(), "compared with version 1")

	rec = b.as["viewer"].get("/campaigns/" + c.ID + "/diff?against=latest")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error-message").Text(), "against")
	require.Equal(t, http.StatusBadRequest, b.as["viewer"].get("/campaigns/"+c.ID+"/diff?rows=moved").Code)
	require.Equal(t, http.StatusNotFound, b.as["viewer"].get("/campaigns/00000000-0000-4000-8000-000000000000/diff").Code)
}

// TestDiffRowsPageByPage: 150 targets added, 100 a page: every one once,
// with a next and a first page.
func TestDiffRowsPageByPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, _ := b.started(campaignOpts{})
	pr := b.as["proposer"]
	list := csvOf(5)
	for i := range 150 {
		list += fmt.Sprintf("extra%03d@example.com,Extra %d\n", i, i)
	}
	_, err := b.svc.ImportTargets(ctx, pr.actor, c.ID, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(list)})
	require.NoError(t, err)

	seen := map[string]bool{}
	next := "/campaigns/" + c.ID + "/diff?against=approved&rows=added"
	for pages := 1; ; pages++ {
		d := parse(t, b.as["viewer"].get(next))
		rows := tid(d, "diff-row")
		require.Equal(t, map[int]int{1: 100, 2: 50}[pages], rows.Length(), "page %d", pages)
		for _, n := range rows.Nodes {
			addr := ""
			for _, a := range n.Attr {
				if a.Key == "data-target" {
					addr = a.Val
				}
			}
			require.False(t, seen[addr], "%s twice", addr)
			seen[addr] = true
		}
		require.Equal(t, pages > 1, tid(d, "first-page").Length() == 1)
		href, ok := tid(d, "next-page").Attr("href")
		if !ok {
			break
		}
		next = href
	}
	require.Len(t, seen, 150)
}
