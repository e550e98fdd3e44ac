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

// archivedPlan reports whether the campaign of plan was archived.
func archivedPlan(ctx context.Context, db onceplan.DB, plan int64) (bool, error) {
	return exists(ctx, db, archivedPlanSQL, plan)
}

// archivedList reports whether the campaign whose plans list is was
// archived.
func archivedList(ctx context.Context, db onceplan.DB, list int64) (bool, error) {
	return exists(ctx, db, archivedListSQL, list)
}

func exists(ctx context.Context, db onceplan.DB, sql string, id int64) (bool, error) {
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
