package web

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/a-h/templ"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/web/view"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestApprovalPageGolden pins the approval page's HTML: what an approver
// is shown, and that the approve form posts exactly the hash displayed.
// Run `go test ./web -run Golden -update` after an intended change.
func TestApprovalPageGolden(t *testing.T) {
	t.Parallel()
	hash := strings.Repeat("3f9a", 16)
	p := view.ApprovalPage{
		Page: view.Page{
			Title: "Approve Invoice reminder", Nav: "campaigns", CSRF: "csrf-token",
			Assets: view.Assets{CSS: "/static/app.0000000000.css", JS: "/static/app.0000000000.js"},
			User:   &view.User{Email: "approver@example.com", Roles: []string{"approver"}, CanApprove: true},
		},
		Campaign: view.Campaign{ID: "00000000-0000-4000-8000-000000000001", Name: "Invoice <reminder>", State: "pending_approval",
			Provider: "outbox", Version: 2, RequiredApprovals: 2, ListUnsubscribe: true},
		PlanHash: hash, TargetCount: 2, Required: 2, Approvals: 1,
		Approvers:  []string{"first@example.com"},
		ProposedBy: "proposer@example.com",
		CanApprove: true,
		Payload:    view.Payload{From: "Billing <billing@example.com>", Subject: "Invoice {{.n}}", Text: "Pay {{.n}}"},
		Samples: []view.Preview{{Ordinal: 1, From: "Billing <billing@example.com>", To: "ann@example.com", Subject: "Invoice 7",
			Text: "Pay 7 & thanks", HTMLURL: "/campaigns/00000000-0000-4000-8000-000000000001/preview.html?version=2&ordinal=1"}},
		Targets: []view.DraftTarget{
			{Ordinal: 1, Line: 2, Target: "ann@example.com", Vars: `{"n": "7"}`},
			{Ordinal: 2, Line: 3, Target: "bob@example.com", Vars: `{"n": "<b>8</b>"}`},
		},
		Diffs: []view.VersionDiff{{
			CampaignID: "00000000-0000-4000-8000-000000000001", Against: "approved", Title: "Changes since approved version 1",
			Message: "Version 2 compared with version 1, the last approved version.", HasBase: true, PayloadKept: true,
			Payload: []view.DiffFieldView{
				{Field: "subject", Changed: true, Lines: []view.DiffLineView{{Op: "removed", Text: "Invoice"}, {Op: "added", Text: "Invoice {{.n}}"}}},
				{Field: "text"},
			},
			Settings: []view.DiffSettingView{{Setting: "provider", Before: "outbox", After: "outbox"}, {Setting: "scheduled_at", Fixed: true}},
			Added: view.DiffRows{Kind: "added", Count: 1, Rows: []view.DiffRowView{{Ordinal: 2, Target: "bob@example.com", Vars: `{"n":"<b>8</b>"}`}},
				All: "/campaigns/00000000-0000-4000-8000-000000000001/diff?against=approved&rows=added"},
			Removed:   view.DiffRows{Kind: "removed"},
			Changed:   view.DiffRows{Kind: "changed"},
			Unchanged: 1,
			Done:      view.DiffRows{Kind: "done"},
		}},
	}
	var buf bytes.Buffer
	ctx := templ.WithNonce(context.Background(), "test-nonce")
	require.NoError(t, view.Approval(p).Render(ctx, &buf))
	// One tag per line, so that a diff shows what changed.
	got := regexp.MustCompile(`>\s*<`).ReplaceAllString(buf.String(), ">\n<") + "\n"

	golden := filepath.Join("testdata", "approval.golden.html")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run with -update to create it")
	require.Equal(t, string(want), got)
	require.Contains(t, got, `name="plan_hash" value="`+hash+`"`)
}
