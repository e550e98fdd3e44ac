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
// effect_attempt(), and the archive's epochs wherever it reads the hot
// table's (migration 0035: a campaign's bumps move with its attempts), once
// the plan's campaign was archived. A live campaign's audit never walks the
// archive.

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

// attemptsIn is sql reading the archive's attempts and epochs in place of
// the hot table's when archived.
func attemptsIn(sql string, archived bool) string {
	if !archived {
		return sql
	}
	return archivedReads.Replace(sql)
}

// archivedReads names, for each of the ledger's reads of the hot tables,
// the archive's of the same shape.
var archivedReads = strings.NewReplacer(
	"effect_attempt()", "effect_archived()",
	"effect_current_epoch(", "effect_archived_current_epoch(",
	"effect_bumped_epoch()", "effect_archived_bumped_epoch()",
)
