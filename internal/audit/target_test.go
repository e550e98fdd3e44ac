package audit_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

func TestExportCSVAndJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, states := b.everyState(t)

	var out bytes.Buffer
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportCSV, &out))
	recs, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"ordinal", "target", "key", "epoch", "state", "attempts", "receipt", "first_at", "last_at",
		"resolved_by", "resolution_reason", "reason", "revoked_by", "revoke_reason", "failure"}, recs[0])
	require.Len(t, recs, 1+len(c.Targets))
	for i, rec := range recs[1:] {
		tg := c.Targets[i]
		require.Equal(t, strconv.Itoa(i+1), rec[0])
		require.Equal(t, tg.Address, rec[1])
		require.Equal(t, string(tg.Key), rec[2])
		require.Equal(t, states[i+1], rec[4], "target %d", i+1)
	}

	out.Reset()
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportJSON, &out))
	var rows []audit.TargetRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows), out.String())
	require.Len(t, rows, len(c.Targets))
	byOrdinal := map[int]audit.TargetRow{}
	for _, r := range rows {
		require.Equal(t, states[r.Ordinal], r.State, "target %d", r.Ordinal)
		byOrdinal[r.Ordinal] = r
	}
	// The raw JSON carries the contract's names: the CSV's columns, no
	// more and no fewer.
	var raw []map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &raw))
	names := make([]string, 0, len(raw[0]))
	for name := range raw[0] {
		names = append(names, name)
	}
	require.ElementsMatch(t, recs[0], names)

	// A retry: two attempts, done with its receipt.
	r := byOrdinal[2]
	require.Equal(t, 2, r.Attempts)
	require.Regexp(t, `^r-\d+$`, r.Receipt)
	require.NotNil(t, r.FirstAt)
	require.False(t, r.LastAt.Before(*r.FirstAt))
	require.Equal(t, time.UTC, r.FirstAt.Location())
	// Never started.
	r = byOrdinal[8]
	require.Equal(t, audit.TargetRow{Ordinal: 8, Target: c.Targets[7].Address, Key: string(c.Targets[7].Key), State: "not_started"}, r)
	// Bumped and not sent again: the current epoch has no attempt.
	r = byOrdinal[9]
	require.Equal(t, 1, r.Epoch)
	require.Equal(t, 0, r.Attempts)
	// Bumped and sent again.
	r = byOrdinal[10]
	require.Equal(t, []any{1, 1, "done"}, []any{r.Epoch, r.Attempts, r.State})
	// Resolved by a person, with the reason.
	r = byOrdinal[11]
	require.Equal(t, "user:"+b.f.Approver.Email, r.ResolvedBy)
	require.Equal(t, "checked the mailbox", r.ResolutionReason)
	r = byOrdinal[12]
	require.Equal(t, []string{"failed", "checked the mailbox"}, []string{r.State, r.ResolutionReason})
	// Revoked, with who and why.
	r = byOrdinal[7]
	require.Equal(t, []string{"revoked", "user:" + b.f.Approver.Email, "sent in error"}, []string{r.State, r.RevokedBy, r.RevokeReason})
	// Failed: the reason.
	require.Equal(t, "audittest: failed", byOrdinal[5].Reason)
}

// Pages of 5,000: the export must cross page boundaries without losing or
// repeating a target.
func TestExportPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("pages", audittest.Addresses(5003))
	b.f.Attempt(c.Targets[5001], ledger.StateDone)

	var out bytes.Buffer
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportCSV, &out))
	recs, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 5004)
	for i, rec := range recs[1:] {
		require.Equal(t, "person"+strconv.Itoa(i+1)+"@example.com", rec[1])
	}
	require.Equal(t, "done", recs[5002][4])
}

func TestExportErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := audit.Export(b.ctx, b.f.Pool, 4242, audit.ExportCSV, &bytes.Buffer{})
	require.ErrorIs(t, err, onceplan.ErrNotFound)
	_, err = audit.ParseExportFormat("xml")
	require.EqualError(t, err, `export format "xml" is not csv or json`)
}

func TestExportDefusesFormulas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("formulas", []string{"=cmd@example.com", "+1@example.com", "ann@example.com"})
	var out bytes.Buffer
	require.NoError(t, audit.Export(b.ctx, b.f.Pool, c.PlanID, audit.ExportCSV, &out))
	recs, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Equal(t, "'=cmd@example.com", recs[1][1])
	require.Equal(t, "'+1@example.com", recs[2][1])
	require.Equal(t, "ann@example.com", recs[3][1])
}
