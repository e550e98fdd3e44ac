package approval_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// importCSV replaces the draft's list with csv.
func (b *bundle) importCSV(t *testing.T, id, csv string) approval.Result {
	t.Helper()
	res, err := b.svc.ImportTargets(b.ctx, b.proposer, id, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv)})
	require.NoError(t, err)
	return res
}

// diffRows pages through every row of kind k, limit at a time, and returns
// the addresses in the order given, failing on a row given twice. It pages
// with the default window and with windows of 1 and 4 targets, so that
// pages are also found past the window (by a join), and fails when they
// differ.
func diffRows(t *testing.T, b *bundle, d approval.Diff, k plan.RowChange, limit int) ([]string, []plan.DiffRow) {
	t.Helper()
	addrs, rows := diffRowsWindow(t, b, d, k, limit, 0)
	for _, window := range []int{1, 4} {
		a, r := diffRowsWindow(t, b, d, k, limit, window)
		require.Equal(t, addrs, a, "%s, window %d", k, window)
		require.Equal(t, rows, r, "%s, window %d", k, window)
	}
	return addrs, rows
}

func diffRowsWindow(t *testing.T, b *bundle, d approval.Diff, k plan.RowChange, limit, window int) ([]string, []plan.DiffRow) {
	t.Helper()
	var (
		addrs []string
		all   []plan.DiffRow
		after string
		seen  = map[string]bool{}
	)
	var base int64
	if d.Base != nil {
		base = d.Base.ListID
	}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "paging does not end")
		p, err := plan.DiffTargets(b.ctx, b.pool, plan.DiffRowsQuery{Base: base, Current: d.Current.ListID, Kind: k, After: after, Limit: limit, Window: window})
		require.NoError(t, err)
		require.LessOrEqual(t, len(p.Rows), limit)
		for _, r := range p.Rows {
			require.False(t, seen[r.Key], "%s row %s given twice", k, r.Target)
			seen[r.Key] = true
			addrs = append(addrs, r.Target)
			all = append(all, r)
		}
		if p.Next == "" {
			return addrs, all
		}
		after = p.Next
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// field returns the diff of one payload field.
func field(t *testing.T, d approval.Diff, name string) plan.FieldDiff {
	t.Helper()
	for _, f := range d.Payload {
		if f.Field == name {
			return f
		}
	}
	t.Fatalf("no field %q in %+v", name, d.Payload)
	return plan.FieldDiff{}
}

const listV1 = "email,first_name,invoice\n" +
	"ann@example.com,Ann,INV-1\n" +
	"bob@example.com,Bob,INV-2\n" +
	"cat@example.com,Cat,INV-3\n" +
	"dan@example.com,Dan,INV-4\n" +
	"eve@example.com,Eve,INV-5\n"

// Version 2: bob removed, cat's invoice changed, fay added; ann, dan and
// eve unchanged (dan moves up a place: order is not a change).
const listV2 = "email,first_name,invoice\n" +
	"ann@example.com,Ann,INV-1\n" +
	"cat@example.com,Cat,INV-33\n" +
	"eve@example.com,Eve,INV-5\n" +
	"dan@example.com,Dan,INV-4\n" +
	"fay@example.com,Fay,INV-6\n"

func TestDiffAgainstApprovedAndPrevious(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Invoices", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(listV1)},
	})
	require.NoError(t, err)
	id := res.Campaign.ID

	// Never submitted, never approved: nothing to compare with.
	for _, against := range []approval.Against{approval.AgainstApproved, approval.AgainstPrevious} {
		d, err := approval.CompareVersions(b.ctx, b.pool, id, against)
		require.NoError(t, err)
		require.Nil(t, d.Base, against)
		require.Contains(t, d.Message, "there is no", against)
		require.Nil(t, d.Payload)
		require.Zero(t, d.Targets)
	}

	// Version 1 approved; 2 of its targets sent (done at epoch 0).
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	d, err := approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstPrevious)
	require.NoError(t, err)
	require.Nil(t, d.Base, "the first submission has no earlier one")
	require.Contains(t, d.Message, "first submission")
	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	d, err = approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstApproved)
	require.NoError(t, err)
	require.Equal(t, 1, d.Base.Version)
	require.Contains(t, d.Message, "is the approved version itself")
	require.Zero(t, d.Changes())
	require.Equal(t, plan.DiffCounts{Unchanged: 5}, d.Targets)
	store := ledger.NewStore(b.pool)
	for _, addr := range []string{"ann@example.com", "cat@example.com"} {
		var key string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT t.key FROM campaign c JOIN plan p ON p.id = c.plan_id
			JOIN target t ON t.list_id = p.list_id WHERE c.id = $1 AND t.target = $2`, id, addr).Scan(&key))
		c, err := store.Claim(b.ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "test"})
		require.NoError(t, err)
		_, err = store.RecordResponse(b.ctx, c.Effect.ID, ledger.ResponseSend, []byte("ok"))
		require.NoError(t, err)
		_, err = store.Settle(b.ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "r"})
		require.NoError(t, err)
	}

	// Version 2: a new subject and text line, the list above; submitted.
	v2 := payload
	v2.Subject = "Reminder: invoice {{.invoice}} is due"
	v2.Text = "Hello {{.first_name}},\ninvoice {{.invoice}} is due.\nThank you."
	ed, err := b.svc.Edit(b.ctx, b.proposer, id, v2)
	require.NoError(t, err)
	require.Equal(t, 2, ed.Campaign.Version)
	b.importCSV(t, id, listV2)
	_, err = b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)

	for _, against := range []approval.Against{approval.AgainstApproved, approval.AgainstPrevious} {
		d, err := approval.CompareVersions(b.ctx, b.pool, id, against)
		require.NoError(t, err)
		require.NotNil(t, d.Base, against)
		require.Equal(t, 1, d.Base.Version, against)
		require.Equal(t, 2, d.Current.Version)
		require.NotZero(t, d.Base.PlanID, "version 1 was frozen: its plan is known either way")
		require.NotNil(t, d.Base.Payload)

		// Exactly these payload lines changed.
		require.False(t, field(t, d, "from").Changed)
		require.Empty(t, field(t, d, "from").Lines)
		require.Equal(t, []plan.DiffLine{
			{Op: plan.LineRemoved, Text: "Invoice {{.invoice}} is due"},
			{Op: plan.LineAdded, Text: "Reminder: invoice {{.invoice}} is due"},
		}, field(t, d, "subject").Lines)
		require.Equal(t, []plan.DiffLine{
			{Op: plan.LineRemoved, Text: "Hello {{.first_name}}, invoice {{.invoice}} is due."},
			{Op: plan.LineAdded, Text: "Hello {{.first_name}},"},
			{Op: plan.LineAdded, Text: "invoice {{.invoice}} is due."},
			{Op: plan.LineAdded, Text: "Thank you."},
		}, field(t, d, "text").Lines)
		require.False(t, field(t, d, "html").Changed)

		// Exactly these targets.
		require.Equal(t, plan.DiffCounts{Added: 1, Removed: 1, Changed: 1, Unchanged: 3}, d.Targets, against)
		added, _ := diffRows(t, b, d, plan.RowsAdded, 10)
		removed, _ := diffRows(t, b, d, plan.RowsRemoved, 10)
		changedAddrs, changed := diffRows(t, b, d, plan.RowsChanged, 10)
		require.Equal(t, []string{"fay@example.com"}, added)
		require.Equal(t, []string{"bob@example.com"}, removed)
		require.Equal(t, []string{"cat@example.com"}, changedAddrs)
		require.Equal(t, map[string]string{"first_name": "Cat", "invoice": "INV-33"}, changed[0].Vars)
		require.Equal(t, &plan.DiffRowBefore{Ordinal: 3, Vars: map[string]string{"first_name": "Cat", "invoice": "INV-3"}}, changed[0].Before)
		require.Equal(t, 2, changed[0].Ordinal)
		// ann and cat were sent under version 1: version 2 does not send them again.
		require.Equal(t, 2, d.Done)
		done, _ := diffRows(t, b, d, plan.RowsDone, 1)
		require.Equal(t, []string{"ann@example.com", "cat@example.com"}, sorted(done))

		// Settings: recorded per version by the plan row, or fixed at create.
		require.Len(t, d.Settings, 6)
		for _, s := range d.Settings {
			require.False(t, s.Changed, s.Setting)
			require.Equal(t, s.Before, s.After, s.Setting)
		}
		require.Equal(t, "outbox", d.Settings[0].After)
		require.Equal(t, "required_approvals", d.Settings[3].Setting)
		require.True(t, d.Settings[3].Fixed)
	}

	// A deliberate second effect for ann (a bump): at her new epoch she is
	// not done, so version 2 would send to her again.
	var annKey string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT t.key FROM campaign c JOIN plan p ON p.id = c.plan_id
		JOIN target t ON t.list_id = p.list_id WHERE c.id = $1 AND t.target = 'ann@example.com'`, id).Scan(&annKey))
	_, err = store.Bump(b.ctx, ledger.BumpParams{Key: ledger.Key(annKey), ActorKind: ledger.ActorHuman, Actor: "user:amy", Reason: "asked again"})
	require.NoError(t, err)
	d, err = approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstApproved)
	require.NoError(t, err)
	require.Equal(t, 1, d.Done)
	done, _ := diffRows(t, b, d, plan.RowsDone, 1)
	require.Equal(t, []string{"cat@example.com"}, done)

	// Rejected, edited again (subject, and gus appended), not yet
	// submitted: against the previous submission (version 2 as submitted,
	// whose text the submission kept though the draft changed since) the
	// subject and gus are new; against the approved version 1 all of it.
	_, err = b.svc.Reject(b.ctx, b.approver, id, "say please")
	require.NoError(t, err)
	v2b := v2
	v2b.Subject = "Please: invoice {{.invoice}} is due"
	_, err = b.svc.Edit(b.ctx, b.proposer, id, v2b)
	require.NoError(t, err)
	b.importCSV(t, id, listV2+"gus@example.com,Gus,INV-7\n")

	d, err = approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstPrevious)
	require.NoError(t, err)
	require.Equal(t, 2, d.Base.Version)
	require.Equal(t, plan.SideSubmission, d.Base.Kind)
	require.Zero(t, d.Base.PlanID)
	require.NotNil(t, d.Base.Payload, "a submission keeps its text when its draft is edited after a rejection")
	require.Equal(t, v2.Subject, d.Base.Payload.Subject)
	require.Equal(t, []plan.DiffLine{
		{Op: plan.LineRemoved, Text: "Reminder: invoice {{.invoice}} is due"},
		{Op: plan.LineAdded, Text: "Please: invoice {{.invoice}} is due"},
	}, field(t, d, "subject").Lines)
	require.False(t, field(t, d, "text").Changed)
	require.NotContains(t, d.Message, "cannot be")
	require.Equal(t, plan.DiffCounts{Added: 1, Unchanged: 5}, d.Targets)
	added, _ := diffRows(t, b, d, plan.RowsAdded, 10)
	require.Equal(t, []string{"gus@example.com"}, added)

	d, err = approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstApproved)
	require.NoError(t, err)
	require.Equal(t, 1, d.Base.Version)
	require.Equal(t, []plan.DiffLine{
		{Op: plan.LineRemoved, Text: "Invoice {{.invoice}} is due"},
		{Op: plan.LineAdded, Text: "Please: invoice {{.invoice}} is due"},
	}, field(t, d, "subject").Lines)
	require.Equal(t, plan.DiffCounts{Added: 2, Removed: 1, Changed: 1, Unchanged: 3}, d.Targets)
	added, _ = diffRows(t, b, d, plan.RowsAdded, 1)
	require.Equal(t, []string{"fay@example.com", "gus@example.com"}, sorted(added))

	// Submitted again: the previous submission is still version 2's first.
	_, err = b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	d, err = approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstPrevious)
	require.NoError(t, err)
	require.Equal(t, 2, d.Base.Version)
	require.Equal(t, v2.Subject, d.Base.Payload.Subject)
	require.Equal(t, plan.DiffCounts{Added: 1, Unchanged: 5}, d.Targets)

	// Refusals name what is wrong.
	_, err = approval.CompareVersions(b.ctx, b.pool, id, "latest")
	var fe *onceplan.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "against", fe.Field)
	_, err = approval.CompareVersions(b.ctx, b.pool, "00000000-0000-4000-8000-000000000000", approval.AgainstApproved)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	for _, q := range []plan.DiffRowsQuery{
		{Kind: "moved", Limit: 1}, {Kind: plan.RowsAdded, Limit: 0}, {Kind: plan.RowsAdded, Limit: 1, After: "ann@example.com"},
	} {
		_, err := plan.DiffTargets(b.ctx, b.pool, q)
		require.ErrorIs(t, err, onceplan.ErrInvalid, "%+v", q)
	}
}

// TestDiffPagesGiveEveryRowOnce: a few hundred targets, a tenth of them
// added, removed and changed, paged 7 at a time: every row exactly once.
func TestDiffPagesGiveEveryRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	var v1, v2 strings.Builder
	v1.WriteString("email,first_name,invoice\n")
	v2.WriteString("email,first_name,invoice\n")
	var wantAdded, wantRemoved, wantChanged []string
	for i := range n {
		addr := fmt.Sprintf("p%03d@example.com", i)
		fmt.Fprintf(&v1, "%s,P%d,INV-%d\n", addr, i, i)
		switch i % 10 {
		case 1:
			wantRemoved = append(wantRemoved, addr)
		case 2:
			wantChanged = append(wantChanged, addr)
			fmt.Fprintf(&v2, "%s,P%d,INV-%d-b\n", addr, i, i)
		default:
			fmt.Fprintf(&v2, "%s,P%d,INV-%d\n", addr, i, i)
		}
	}
	for i := range n / 10 {
		addr := fmt.Sprintf("new%03d@example.com", i)
		wantAdded = append(wantAdded, addr)
		fmt.Fprintf(&v2, "%s,N%d,INV-N%d\n", addr, i, i)
	}
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Paging", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(v1.String())},
	})
	require.NoError(t, err)
	id := res.Campaign.ID
	sub, err := b.svc.Submit(b.ctx, b.proposer, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(b.ctx, b.approver, id, sub.PlanHash)
	require.NoError(t, err)
	_, err = b.svc.Edit(b.ctx, b.proposer, id, payload)
	require.NoError(t, err)
	b.importCSV(t, id, v2.String())

	d, err := approval.CompareVersions(b.ctx, b.pool, id, approval.AgainstApproved)
	require.NoError(t, err)
	require.Equal(t, plan.DiffCounts{Added: 30, Removed: 30, Changed: 30, Unchanged: 240}, d.Targets)
	require.Equal(t, 90, d.Changes(), "the payload is the same: only the 90 rows differ")
	for _, c := range []struct {
		kind plan.RowChange
		want []string
	}{{plan.RowsAdded, wantAdded}, {plan.RowsRemoved, wantRemoved}, {plan.RowsChanged, wantChanged}} {
		got, rows := diffRows(t, b, d, c.kind, 7)
		require.Equal(t, sorted(c.want), sorted(got), c.kind)
		require.Equal(t, d.Targets.Count(c.kind), len(got))
		require.True(t, slices.IsSortedFunc(rows, func(a, b plan.DiffRow) int { return strings.Compare(a.Key, b.Key) }), "pages are in key order")
	}
}
