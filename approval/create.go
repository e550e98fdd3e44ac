// Creating a campaign: its first draft, its list, and an idempotency key
// that makes a retried create safe.

package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// CreateParams is a new campaign with its first draft.
type CreateParams struct {
	Name              string
	Provider          string
	ScheduledAt       *time.Time
	StartOnApproval   bool
	RequiredApprovals int
	// Transactional: the messages carry no one-click unsubscribe link
	// (the campaign's ListUnsubscribe is false); covered by the plan hash.
	Transactional bool
	Payload       plan.Payload
	Targets       *TargetsParams // optional
	// CopyListOf, when set and Targets is not, names a campaign whose
	// current version's target list the new draft starts from (a clone):
	// imported as an upload is, the suppression list applied.
	CopyListOf string
	// IdempotencyKey, when set, makes Create safe to retry: the same actor
	// with the same key gets the campaign the first call made (Result.Replayed),
	// provided RequestHash matches; a different RequestHash is refused with
	// ErrIdempotencyMismatch. RequestHash identifies the request's content.
	IdempotencyKey string
	RequestHash    string
}

// ErrIdempotencyMismatch: an idempotency key was reused for a different
// request.
var ErrIdempotencyMismatch = onceplan.New(onceplan.CodeIdempotencyMismatch, "idempotency key reused with a different request")

// Create makes a campaign and its first draft, and imports its targets
// when given. A failed import creates nothing.
func (s *Service) Create(ctx context.Context, a auth.Actor, p CreateParams) (Result, error) {
	if err := auth.Authorize(a, auth.ActionCreate); err != nil {
		return Result{}, err
	}
	if err := s.knownProvider(p.Provider); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if p.IdempotencyKey != "" {
			// A concurrent request with the same key waits here on the
			// primary key until this transaction ends, then finds its row.
			var existing, hash string
			err := tx.QueryRow(ctx, `SELECT campaign_id, request_hash FROM api_idempotency WHERE user_id = $1 AND key = $2`,
				a.UserID, p.IdempotencyKey).Scan(&existing, &hash)
			switch {
			case err == nil && hash != p.RequestHash:
				return fmt.Errorf("%w: the Idempotency-Key %q was first used for a different request", ErrIdempotencyMismatch, p.IdempotencyKey)
			case err == nil:
				c, err := GetCampaign(ctx, tx, existing)
				if err != nil {
					return err
				}
				res, err = s.result(ctx, tx, c)
				res.Replayed = true
				return err
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		c, err := createCampaign(ctx, tx, newCampaign{
			Name: p.Name, Provider: p.Provider, ScheduledAt: p.ScheduledAt, StartOnApproval: p.StartOnApproval,
			RequiredApprovals: p.RequiredApprovals, Payload: p.Payload, CreatedBy: a.UserID, ViaAgent: a.Agent,
			Transactional: p.Transactional,
		})
		if err != nil {
			return err
		}
		var (
			from   Draft
			detail any
		)
		if p.Targets == nil && p.CopyListOf != "" {
			src, err := GetCampaign(ctx, tx, p.CopyListOf)
			if err != nil {
				return fmt.Errorf("%w: there is no campaign %s to copy the list of", onceplan.ErrNotFound, p.CopyListOf)
			}
			if from, err = GetDraft(ctx, tx, src.ID, src.Version); err != nil {
				return err
			}
			detail = copyDetail{Of: src.ID, Name: src.Name, Version: src.Version}
		}
		if err := s.born(ctx, tx, &a, c, detail); err != nil {
			return err
		}
		if p.IdempotencyKey != "" {
			tag, err := tx.Exec(ctx, `INSERT INTO api_idempotency (user_id, key, request_hash, campaign_id) VALUES ($1, $2, $3, $4)
				ON CONFLICT DO NOTHING`, a.UserID, p.IdempotencyKey, p.RequestHash, c.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				// Another request with this key committed first: retry
				// once, and the lookup above answers with its campaign.
				return errIdempotencyRace
			}
		}
		var report *plan.ImportReport
		switch {
		case p.Targets != nil:
			r, err := s.importInto(ctx, tx, a, c, *p.Targets)
			if err != nil {
				return err
			}
			report = &r
		case from.ListID != 0:
			r, err := s.importCopy(ctx, tx, a, c, from.ListID)
			if err != nil {
				return err
			}
			report = &r
		}
		res, err = s.result(ctx, tx, c)
		res.Import = report
		return err
	})
	if errors.Is(err, errIdempotencyRace) {
		return s.Create(ctx, a, p)
	}
	return res, err
}

var errIdempotencyRace = errors.New("idempotency key taken concurrently")

// copyDetail is the create entry's detail of a campaign made from another:
// the campaign, and the version whose list it copied.
type copyDetail struct {
	Of      string `json:"copy_of"`
	Name    string `json:"copy_of_name"`
	Version int    `json:"copy_of_version"`
}
