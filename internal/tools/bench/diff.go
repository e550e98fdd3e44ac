package main

// Scenario "diff": what changed between two versions of a
// campaign of N targets. Version 1 is audittest.Seed's running plan (its
// ledger nearly all done); version 2 is an edit of it whose list (imported
// as JSON through the approval workflow) drops 1% of the targets, changes
// the variables of 1% and appends 1% new ones, then is submitted. Timed,
// best of 3: the counts (plan.ListDiffCounts), the targets already done
// (plan.DoneCount), the whole comparison (approval.CompareVersions), and the
// first page of 100 rows of each kind (plan.DiffTargets); then, with one
// target appended to version 2, the comparison with its submission and the
// page of that one row (a rare kind: found past the walked window by a
// join); against a count(*) of both lists' rows in the same run.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
)

// diffShape is how version 2's list differs from version 1's, by ordinal
// i of version 1: removed, changed, or kept as it is; n/100 targets are
// appended.
func diffShape(i int) (removed, changed bool) { return i%100 == 50, i%100 == 51 }

// diffList streams version 2's list as the API's JSON list.
type diffList struct {
	n, i int
	buf  bytes.Buffer
}

func (g *diffList) Read(p []byte) (int, error) {
	for g.buf.Len() < len(p) && g.i <= g.n+g.n/100 {
		switch {
		case g.i == 0:
			g.buf.WriteString("[")
		case g.i > g.n:
			fmt.Fprintf(&g.buf, `,{"address":"person%d@example.com","vars":{"note":"new"}}`, g.i)
		default:
			removed, changed := diffShape(g.i)
			comma := ","
			if g.i == 1 {
				comma = ""
			}
			switch {
			case removed:
			case changed:
				fmt.Fprintf(&g.buf, `%s{"address":"person%d@example.com","vars":{"note":"changed"}}`, comma, g.i)
			default:
				fmt.Fprintf(&g.buf, `%s{"address":"person%d@example.com"}`, comma, g.i)
			}
		}
		g.i++
		if g.i > g.n+g.n/100 {
			g.buf.WriteString("]")
		}
	}
	if g.buf.Len() == 0 {
		return 0, io.EOF
	}
	return g.buf.Read(p)
}

func benchDiff(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if n < 1000 {
		return fmt.Errorf("-diff-targets: at least 1000 (the seeded ledger's shapes repeat every 1000), not %d", n)
	}
	t := time.Now()
	seeded, err := audittest.Seed(ctx, pool, n)
	if err != nil {
		return err
	}
	seeding := time.Since(t)
	proposer, err := user(ctx, pool, "diff-proposer@example.com", auth.RoleProposer)
	if err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	svc := approval.NewService(pool, jobs.NewEnqueuer(client))
	svc.MaxTargets = n + n/100
	t = time.Now()
	// Version 2: the seeded payload with another subject, and the list.
	if _, err := svc.Edit(ctx, proposer, seeded.CampaignID, plan.Payload{From: "bench@example.com", Subject: "Hello again", Text: "Hi"}); err != nil {
		return fmt.Errorf("edit: %w", err)
	}
	if _, err := svc.ImportTargets(ctx, proposer, seeded.CampaignID, approval.TargetsParams{Format: plan.FormatJSON, Body: &diffList{n: n}}); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if _, err := svc.Submit(ctx, proposer, seeded.CampaignID); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	version2 := time.Since(t)
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE target`); err != nil {
		return err
	}

	cmp, err := approval.Compare(ctx, pool, seeded.CampaignID, approval.AgainstApproved)
	if err != nil {
		return err
	}
	if cmp.Base == nil || cmp.Base.Version != 1 || cmp.Current.Version != 2 {
		return fmt.Errorf("the comparison is of the wrong versions: %+v", cmp)
	}
	base, current := cmp.Base.ListID, cmp.Current.ListID
	var want plan.DiffCounts
	wantDone := 0
	for i := 1; i <= n; i++ {
		removed, changed := diffShape(i)
		switch {
		case removed:
			want.Removed++
		case changed:
			want.Changed++
		default:
			want.Unchanged++
		}
		// Seed's shapes: i%1000 in 2…7 is not done at its current epoch
		// (unknown, pending, stranded, failed, revoked, never started).
		if m := i % 1000; !removed && (m < 2 || m > 7) {
			wantDone++
		}
	}
	want.Added = n / 100

	var rows int
	scanTime, err := bestOf(3, func() error {
		return pool.QueryRow(ctx, `SELECT count(*) FROM target WHERE list_id = $1 OR list_id = $2`, base, current).Scan(&rows)
	})
	if err != nil {
		return err
	}
	var counts plan.DiffCounts
	countsTime, err := bestOf(3, func() error { counts, err = plan.ListDiffCounts(ctx, pool, base, current); return err })
	if err != nil {
		return err
	}
	if counts != want {
		return fmt.Errorf("the diff counts %+v, want %+v", counts, want)
	}
	var done int
	doneTime, err := bestOf(3, func() error { done, err = plan.DoneCount(ctx, pool, current); return err })
	if err != nil {
		return err
	}
	if done != wantDone {
		return fmt.Errorf("the diff counts %d targets done, want %d", done, wantDone)
	}
	var d approval.Diff
	compareTime, err := bestOf(2, func() error {
		d, err = approval.CompareVersions(ctx, pool, seeded.CampaignID, approval.AgainstApproved)
		return err
	})
	if err != nil {
		return err
	}
	if d.Targets != want || d.Done != wantDone || d.Changes() != want.Added+want.Removed+want.Changed+1 {
		return fmt.Errorf("the comparison says %+v (done %d, %d changes)", d.Targets, d.Done, d.Changes())
	}
	var pages []string
	var worstPage time.Duration
	for _, k := range plan.RowChanges {
		q := plan.DiffRowsQuery{Base: base, Current: current, Kind: k, Limit: 100}
		if explainPages {
			fmt.Printf("  EXPLAIN of the first page of %s:\n", k)
			if _, err := plan.DiffTargets(ctx, explainDB{pool}, q); err != nil {
				return err
			}
		}
		var p plan.DiffPage
		pageTime, err := bestOf(3, func() error { p, err = plan.DiffTargets(ctx, pool, q); return err })
		if err != nil {
			return err
		}
		count := want.Count(k)
		if k == plan.RowsDone {
			count = wantDone
		}
		if len(p.Rows) != min(count, 100) || (p.Next != "") != (count > 100) {
			return fmt.Errorf("the first page of %s has %d rows (next %q) of %d", k, len(p.Rows), p.Next, count)
		}
		pages = append(pages, fmt.Sprintf("%s %s", k, pageTime.Round(100*time.Microsecond)))
		worstPage = max(worstPage, pageTime)
	}
	// One target more, appended while version 2 waits for approval: the
	// rare kind a page must not walk a million targets to find.
	t = time.Now()
	one := strings.NewReader(fmt.Sprintf(`[{"address":"person%d@example.com"}]`, n+n/100+1))
	if _, err := svc.ImportTargets(ctx, proposer, seeded.CampaignID, approval.TargetsParams{Format: plan.FormatJSON, Body: one, Append: true}); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	appended := time.Since(t)
	var sparse approval.Diff
	sparseTime, err := bestOf(2, func() error {
		sparse, err = approval.CompareVersions(ctx, pool, seeded.CampaignID, approval.AgainstPrevious)
		return err
	})
	if err != nil {
		return err
	}
	if sparse.Targets.Added != 1 || sparse.Targets.Removed != 0 || sparse.Targets.Changed != 0 {
		return fmt.Errorf("one target appended: the comparison with the submission says %+v", sparse.Targets)
	}
	var onePage plan.DiffPage
	onePageTime, err := bestOf(3, func() error {
		onePage, err = plan.DiffTargets(ctx, pool, plan.DiffRowsQuery{Base: sparse.Base.ListID, Current: sparse.Current.ListID, Kind: plan.RowsAdded, Limit: 100})
		return err
	})
	if err != nil {
		return err
	}
	if len(onePage.Rows) != 1 {
		return fmt.Errorf("one target appended: its page has %d rows", len(onePage.Rows))
	}
	worstPage = max(worstPage, onePageTime)
	if explainPages {
		fmt.Println("  EXPLAIN of the counts and of the done count:")
		if _, err := plan.ListDiffCounts(ctx, explainDB{pool}, base, current); err != nil {
			return err
		}
		if _, err := plan.DoneCount(ctx, explainDB{pool}, current); err != nil {
			return err
		}
	}
	fmt.Printf("diff: version 1 of %d targets (seeded in %s, ledger nearly all done) against version 2 (edited, list imported and submitted in %s): %d added, %d removed, %d changed, %d done; best of 3\n",
		n, seeding.Round(time.Second), version2.Round(time.Second), want.Added, want.Removed, want.Changed, wantDone)
	fmt.Printf("  plan.ListDiffCounts (join by key):          %s\n", countsTime.Round(time.Millisecond))
	fmt.Printf("  plan.DoneCount (the ledger, current epoch): %s\n", doneTime.Round(time.Millisecond))
	fmt.Printf("  approval.CompareVersions (all of it, best of 2): %s\n", compareTime.Round(time.Millisecond))
	fmt.Printf("  first page of 100 rows: %s\n", strings.Join(pages, ", "))
	fmt.Printf("  baseline count(*) of both lists' %d rows:   %s (%.1fx)\n", rows, scanTime.Round(time.Millisecond), countsTime.Seconds()/scanTime.Seconds())
	fmt.Printf("  one target appended (in %s): comparison with the submission %s, the page of its 1 row %s\n",
		appended.Round(time.Second), sparseTime.Round(time.Millisecond), onePageTime.Round(time.Millisecond))
	record("11. diff", fmt.Sprintf("%s-target versions (1%% removed, 1%% changed, 1%% added; ledger %s done): counts **%s**, done count %s, whole comparison **%s**; first page of 100 rows: %s; one target appended: comparison %s, its page %s; `count(*)` of both lists %s (%.1f×)",
		thousands(n), thousands(wantDone), countsTime.Round(time.Millisecond), doneTime.Round(time.Millisecond), compareTime.Round(time.Millisecond),
		strings.Join(pages, ", "), sparseTime.Round(time.Millisecond), onePageTime.Round(time.Millisecond),
		scanTime.Round(time.Millisecond), countsTime.Seconds()/scanTime.Seconds()),
		"comparison ≤ 5 s, a page ≤ 2 s", compareTime <= 5*time.Second && worstPage <= 2*time.Second)
	return nil
}
