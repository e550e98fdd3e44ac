package audit

import (
	"context"
	"strings"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// The archive (docs/ARCHITECTURE.md, "The archive"): a campaign's attempts
// are all in the ledger's hot table or all in its archive (its keys are its
// own, and archive_campaign moves every plan of it), so the audit of a plan
// reads one of the two: effect_archived() wherever it reads
// effect_attempt(), once the plan's campaign was archived. A live
// campaign's audit never walks the archive.

const (
	archivedPlanSQL = `SELECT EXISTS (SELECT 1 FROM frozen_plan() p JOIN campaign_archive a ON a.campaign_id = p.campaign_id WHERE p.id = $1)`
	archivedListSQL = `SELECT EXISTS (SELECT 1 FROM frozen_plan() p JOIN campaign_archive a ON a.campaign_id = p.campaign_id WHERE p.list_id = $1)`
)

// archived reports whether the campaign of plan (byList false) or of the
// plans of list (byList true) was archived.
func archived(ctx context.Context, db onceplan.DB, id int64, byList bool) (bool, error) {
	sql := archivedPlanSQL
	if byList {
		sql = archivedListSQL
	}
	var yes bool
	err := db.QueryRow(ctx, sql, id).Scan(&yes)
	return yes, err
}

// attemptsIn is sql reading the archive's attempts in place of the hot
// table's when archived.
func attemptsIn(sql string, archived bool) string {
	if !archived {
		return sql
	}
	return strings.ReplaceAll(sql, "effect_attempt()", "effect_archived()")
}
