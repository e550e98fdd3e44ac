package plan_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

type bundle struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	user     int64
	svc      *approval.Service
	proposer auth.Actor // user, as the service knows them
	campaign approval.Campaign
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	b := &bundle{ctx: context.Background(), pool: pool}
	b.user = pgtest.User(t, pool, pgtest.UserOpts{Roles: []string{"proposer"}})
	b.svc = approval.NewService(pool, nil)
	b.proposer = auth.Actor{UserID: b.user, Roles: []auth.Role{auth.RoleProposer}}
	res, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Import test", Provider: "outbox",
		Payload: plan.Payload{From: "a@example.com", Subject: "Hi {{.name}}", Text: "Hello {{.name}}"},
	})
	require.NoError(t, err)
	b.campaign = res.Campaign
	return b
}

func (b *bundle) importList(t *testing.T, p plan.ImportParams) (plan.ImportReport, error) {
	t.Helper()
	p.CampaignID, p.ActorID = b.campaign.ID, b.user
	if p.Format == "" {
		p.Format = plan.FormatCSV
	}
	// As approval's import does: the draft's row locked, its list passed,
	// the draft pointed at the new list and the old one dropped.
	var report plan.ImportReport
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(b.ctx, `SELECT list_id FROM draft WHERE campaign_id = $1 AND version = 1 FOR UPDATE`, b.campaign.ID).Scan(&p.Current); err != nil {
			return err
		}
		var err error
		if report, err = plan.ImportTargets(b.ctx, tx, p); err != nil {
			return err
		}
		if _, err := tx.Exec(b.ctx, `UPDATE draft SET list_id = $2 WHERE campaign_id = $1 AND version = 1`, b.campaign.ID, report.ListID); err != nil {
			return err
		}
		if p.Current != nil {
			return plan.DropUnfrozenList(b.ctx, tx, *p.Current)
		}
		return nil
	})
	return report, err
}

func (b *bundle) targets(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT t.target FROM draft d JOIN target t ON t.list_id = d.list_id WHERE d.campaign_id = $1 ORDER BY t.ordinal`, b.campaign.ID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// A deliberately messy list: BOM, CRLF, a header in another case, duplicates
// that differ only by case, NFD or display name, invalid addresses, a row
// with the wrong number of fields.
const messy = "\ufeffEMAIL,name\r\n" +
	"ann@example.com,Ann\r\n" + // 2 accepted
	"ANN@Example.COM,Ann again\r\n" + // 3 duplicate of 2 (case)
	"jose\u0301@example.com,José NFD\r\n" + // 4 accepted
	"jos\u00e9@example.com,José NFC\r\n" + // 5 duplicate of 4 (NFC)
	"not-an-address,Nobody\r\n" + // 6 rejected
	"Bob Builder <bob@example.com>,Bob\r\n" + // 7 accepted (display name dropped)
	",Empty\r\n" + // 8 rejected
	"carol@example.com\r\n" + // 9 rejected (one field)
	"\"dave@example.com\",\"Dave, Jr.\"\r\n" + // 10 accepted
	"bob@EXAMPLE.com,Bob twice\r\n" + // 11 duplicate of 7
	"eve@bücher.example,Eve\r\n" + // 12 accepted (IDN)
	"eve@xn--bcher-kva.example,Eve punycode\r\n" // 13 duplicate of 12

func TestImportReportAccountsForEveryLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := b.importList(t, plan.ImportParams{Body: strings.NewReader(messy)})
	require.NoError(t, err)

	require.Equal(t, 12, r.Rows)
	require.Equal(t, r.Rows, r.Accepted+r.Duplicate+r.RejectedCount, "counts add up to the input rows")
	require.Equal(t, 5, r.Accepted)
	require.Equal(t, 4, r.Duplicate)
	require.Equal(t, 3, r.RejectedCount)
	require.Equal(t, []plan.Duplicate{{Line: 3, DuplicateOf: 2}, {Line: 5, DuplicateOf: 4}, {Line: 11, DuplicateOf: 7}, {Line: 13, DuplicateOf: 12}}, r.Duplicates)
	var lines []int
	for _, rej := range r.Rejected {
		lines = append(lines, rej.Line)
		require.NotEmpty(t, rej.Reason)
	}
	require.Equal(t, []int{6, 8, 9}, lines)
	require.Equal(t, 5, r.TargetCount)

	require.Equal(t, []string{"ann@example.com", "jos\u00e9@example.com", "bob@example.com", "dave@example.com", "eve@xn--bcher-kva.example"}, b.targets(t))

	// Keys are the ledger's, with the campaign as event.
	want, err := ledger.NewKey(ledger.KeyInput{Event: b.campaign.ID, Tool: "email.send", Target: ledger.Target{Kind: ledger.TargetEmail, Value: "ann@example.com"}})
	require.NoError(t, err)
	var key string
	var vars map[string]string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT t.key, t.vars FROM draft d JOIN target t ON t.list_id = d.list_id WHERE d.campaign_id = $1 AND t.ordinal = 1`, b.campaign.ID).Scan(&key, &vars))
	require.Equal(t, string(want), key)
	require.Equal(t, map[string]string{"name": "Ann"}, vars)
}

func TestImportLimitsRefuseTheWholeList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.importList(t, plan.ImportParams{Body: strings.NewReader("email,name\na@example.com,A\n")})
	require.NoError(t, err)
	before := b.targets(t)

	var list strings.Builder
	list.WriteString("email,name\n")
	for i := range 6 {
		fmt.Fprintf(&list, "p%d@example.com,P\n", i)
	}
	_, err = b.importList(t, plan.ImportParams{Body: strings.NewReader(list.String()), MaxTargets: 5})
	var le *plan.ListError
	require.True(t, errors.As(err, &le), "%v", err)
	require.Contains(t, err.Error(), "more than 5 targets")
	require.Equal(t, before, b.targets(t), "a failed import changes nothing")

	_, err = b.importList(t, plan.ImportParams{Body: strings.NewReader(list.String()), MaxBytes: 40})
	require.True(t, errors.As(err, &le), "%v", err)
	require.Equal(t, before, b.targets(t))

	// Only bad rows: nothing usable is an error too, and changes nothing.
	_, err = b.importList(t, plan.ImportParams{Body: strings.NewReader("email\nnope\n")})
	require.True(t, errors.As(err, &le), "%v", err)
	require.Contains(t, err.Error(), "the list's one row is not a usable target (1 rejected, 0 duplicates); line 2: ")
	require.Equal(t, before, b.targets(t))
	require.Equal(t, 1, countRows(t, b, `SELECT count(*) FROM target_list`), "no orphan list left behind")
}

func countRows(t *testing.T, b *bundle, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql).Scan(&n))
	return n
}

func TestImportAppendKeepsOrderAndDeduplicatesAcrossLists(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.importList(t, plan.ImportParams{Body: strings.NewReader("email,name\na@example.com,A\nb@example.com,B\n")})
	require.NoError(t, err)
	r, err := b.importList(t, plan.ImportParams{Append: true, Format: plan.FormatJSON, Body: strings.NewReader(
		`[{"address": "B@example.com", "vars": {"name": "B2"}}, {"address": "c@example.com", "vars": {"name": "C"}}]`)})
	require.NoError(t, err)
	require.Equal(t, 1, r.Accepted)
	require.Equal(t, 1, r.Duplicate)
	require.Equal(t, 3, r.TargetCount)
	require.Equal(t, []string{"a@example.com", "b@example.com", "c@example.com"}, b.targets(t))

	// The digest of the appended list equals that of the same list imported at once.
	once, err := b.importList(t, plan.ImportParams{Body: strings.NewReader("email,name\na@example.com,A\nb@example.com,B\nc@example.com,C\n")})
	require.NoError(t, err)
	require.Equal(t, once.ListDigest, r.ListDigest)
	require.NotEqual(t, first.ListDigest, r.ListDigest)
}

func TestPreviewRendersForAnyTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.importList(t, plan.ImportParams{Body: strings.NewReader("email,name\na@example.com,Ann\nb@example.com,Bob\n")})
	require.NoError(t, err)
	d, err := approval.GetDraft(b.ctx, b.pool, b.campaign.ID, 1)
	require.NoError(t, err)

	m, err := plan.Preview(b.ctx, b.pool, d.Content(), "", 2)
	require.NoError(t, err)
	require.Equal(t, "b@example.com", m.To)
	require.Equal(t, "Hi Bob", m.Subject)
	m, err = plan.Preview(b.ctx, b.pool, d.Content(), "a@example.com", 0)
	require.NoError(t, err)
	require.Equal(t, "Hello Ann", m.Text)
	_, err = plan.Preview(b.ctx, b.pool, d.Content(), "", 3)
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}
