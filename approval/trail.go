package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// Reads that tell, after the fact, what a trail entry was about: the
// submission a decision answered, the run a completion ended, who
// approved a version. Package notify announces decisions from a job that
// runs after their transaction, when the campaign may have moved on; these
// reads find what stood when the entry was written (every row's
// created_at is its transaction's start, the same for rows written
// together).

// SubmissionOf is the submission trail entry e answers: the latest
// submission of e's version and hash recorded no later than e (for a
// submit entry, the submission of the same transaction).
func SubmissionOf(ctx context.Context, db onceplan.DB, e Event) (Submission, error) {
	s, err := scanSubmission(db.QueryRow(ctx, `SELECT `+submissionCols+` FROM submission
		WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3 AND created_at <= $4
		ORDER BY id DESC LIMIT 1`, e.CampaignID, e.Version, e.PlanHash, e.CreatedAt))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("%w: no submission of version %d of campaign %s before trail entry %d", onceplan.ErrNotFound, e.Version, e.CampaignID, e.ID)
	}
	return s, err
}

// Run is the start of a plan's execution.
type Run struct {
	ID         int64
	CampaignID string
	PlanID     int64
	// StartedBy is the operator who started it; 0: the system (at the
	// scheduled time, or on approval).
	StartedBy int64
	JobCount  int
	CreatedAt time.Time
}

// RunBefore is the campaign's latest run started no later than at: the
// run a completion recorded at at ended.
func RunBefore(ctx context.Context, db onceplan.DB, campaignID string, at time.Time) (Run, error) {
	var r Run
	err := db.QueryRow(ctx, `SELECT id, campaign_id, plan_id, coalesce(started_by, 0), job_count, created_at FROM run
		WHERE campaign_id = $1 AND created_at <= $2 ORDER BY id DESC LIMIT 1`, campaignID, at).
		Scan(&r.ID, &r.CampaignID, &r.PlanID, &r.StartedBy, &r.JobCount, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: campaign %s has no run before %s", onceplan.ErrNotFound, campaignID, at.Format(time.RFC3339))
	}
	return r, err
}

// approvalsOf is the approvals of a campaign's version with a hash
// ($1, $2, $3), as a FROM and WHERE clause over approval a.
const approvalsOf = `FROM approval a WHERE a.campaign_id = $1 AND a.version = $2 AND a.plan_hash = $3`

// Approvers lists who approved a campaign's version with hash, in the
// order they did.
func Approvers(ctx context.Context, db onceplan.DB, campaignID string, version int, hash string) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT a.approver_id `+approvalsOf+` ORDER BY a.id`, campaignID, version, hash)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// ApproverEmails is Approvers by email.
func ApproverEmails(ctx context.Context, db onceplan.DB, campaignID string, version int, hash string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT (SELECT u.email FROM user_identity() u WHERE u.id = a.approver_id) `+approvalsOf+` ORDER BY a.id`,
		campaignID, version, hash)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
