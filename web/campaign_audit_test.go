package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/ledger"
)

// The UI's downloads are the one per-target export, audit.Export's, byte
// for byte: the CSV as it is, the JSON array inside the envelope with the
// metric.
func TestAuditDownloadsAreTheAuditExport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, p := b.started(campaignOpts{Targets: csvOf(4)})
	b.effect(p, 1, ledger.StateDone, "250 ok")
	b.effect(p, 2, ledger.StateFailed, "550 no")
	b.effect(p, 3, ledger.StateUnknown, "reset")
	ctx := context.Background()
	v := b.as["viewer"]

	var want bytes.Buffer
	require.NoError(t, audit.Export(ctx, b.pool, p.ID, audit.ExportCSV, &want))
	rec := v.get("/campaigns/" + c.ID + "/audit.csv")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/csv; charset=utf-8", rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Header().Get("Content-Disposition"), "onceplan-"+c.ID+"-audit.csv")
	require.Equal(t, want.String(), rec.Body.String())

	want.Reset()
	require.NoError(t, audit.Export(ctx, b.pool, p.ID, audit.ExportJSON, &want))
	rec = v.get("/campaigns/" + c.ID + "/audit.json")
	require.Equal(t, http.StatusOK, rec.Code)
	var env struct {
		CampaignID string          `json:"campaign_id"`
		PlanHash   string          `json:"plan_hash"`
		Metric     map[string]any  `json:"metric"`
		Targets    json.RawMessage `json:"targets"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &env), rec.Body.String())
	require.Equal(t, []string{c.ID, p.Hash}, []string{env.CampaignID, env.PlanHash})
	require.EqualValues(t, 4, env.Metric["approved"])
	require.Equal(t, bytes.TrimSpace(want.Bytes()), bytes.TrimSpace(env.Targets))
}
