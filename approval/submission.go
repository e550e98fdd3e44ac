package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Submission is what was asked to be approved: a draft version, its plan
// hash and its list, with the draft's authorship as it stood at the
// submit. PostgreSQL copies the authorship and the list from the draft
// (migration 0014) and never lets the row change; the approval rule
// (nobody approves what they proposed or last edited) and the freeze read
// this row, never the draft, so what the authors were at the submit is
// what decides.
type Submission struct {
	ID           int64     `json:"id"`
	CampaignID   string    `json:"campaign_id"`
	Version      int       `json:"version"`
	PlanHash     string    `json:"plan_hash"`
	ListID       int64     `json:"-"`
	TargetCount  int       `json:"target_count"`
	ProposedBy   int64     `json:"proposed_by"`
	LastEditedBy int64     `json:"last_edited_by"`
	SubmittedBy  int64     `json:"submitted_by,omitempty"` // 0: recorded by the migration for a draft already pending
	CreatedAt    time.Time `json:"created_at"`
	// Payload is the text submitted, copied from the draft by PostgreSQL
	// (migration 0022); nil for a submission made before it kept the text.
	Payload *plan.Payload `json:"-"`
}

// IsAuthor reports whether user proposed or last edited the submitted draft.
func (s Submission) IsAuthor(user int64) bool {
	return user == s.ProposedBy || user == s.LastEditedBy
}

const submissionCols = `id, campaign_id, version, plan_hash, list_id, target_count, proposed_by, last_edited_by,
	coalesce(submitted_by, 0), created_at, from_addr, subject, text_body, html_body`

func scanSubmission(row pgx.Row) (Submission, error) {
	var s Submission
	var from, subject, text, html *string
	err := row.Scan(&s.ID, &s.CampaignID, &s.Version, &s.PlanHash, &s.ListID, &s.TargetCount, &s.ProposedBy,
		&s.LastEditedBy, &s.SubmittedBy, &s.CreatedAt, &from, &subject, &text, &html)
	if err == nil && from != nil && subject != nil && text != nil && html != nil {
		s.Payload = &plan.Payload{From: *from, Subject: *subject, Text: *text, HTML: *html}
	}
	return s, err
}

// insertSubmission records the submission of a campaign's current draft version
// with its plan hash, inside tx (the caller's, which holds the campaign
// lock and has just moved it to pending approval).
func insertSubmission(ctx context.Context, tx pgx.Tx, campaignID string, version int, hash string, submittedBy int64) (Submission, error) {
	return scanSubmission(tx.QueryRow(ctx, `
		INSERT INTO submission (campaign_id, version, plan_hash, submitted_by) VALUES ($1, $2, $3, $4)
		RETURNING `+submissionCols, campaignID, version, hash, submittedBy))
}

// latestSubmission reads a campaign's latest submission: the one an
// approval now answers. onceplan.ErrNotFound when the campaign was never submitted.
func latestSubmission(ctx context.Context, db onceplan.DB, campaignID string) (Submission, error) {
	s, err := scanSubmission(db.QueryRow(ctx, `SELECT `+submissionCols+` FROM submission
		WHERE campaign_id = $1 ORDER BY id DESC LIMIT 1`, campaignID))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("%w: campaign %s was never submitted for approval", onceplan.ErrNotFound, campaignID)
	}
	return s, err
}
