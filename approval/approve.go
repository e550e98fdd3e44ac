// The review of a draft: submitting it, approving it (the quorum's last
// approval freezes the plan) and rejecting it.

package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// MissingVarsError blocks a submission: targets lack variables the
// templates read.
type MissingVarsError struct {
	Missing []plan.MissingVar
	Total   int
}

func (e *MissingVarsError) Error() string {
	first := e.Missing[0]
	lack := fmt.Sprintf("%d targets lack", e.Total)
	if e.Total == 1 {
		lack = "1 target lacks"
	}
	return fmt.Sprintf("%s merge variables the draft uses; first: line %d (%s) has no %s",
		lack, first.Line, first.Target, strings.Join(first.Missing, ", "))
}

// Is makes the error a validation error.
func (e *MissingVarsError) Is(target error) bool { return target == onceplan.ErrInvalid }

// ErrorCode makes missing variables invalid input.
func (e *MissingVarsError) ErrorCode() onceplan.Code { return onceplan.CodeInvalid }

// Submit asks for approval of the current draft, once it validates: its
// provider is one this deployment sends through, and plan.Check passes
// (res.Check carries its warnings).
func (s *Service) Submit(ctx context.Context, a auth.Actor, id string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionSubmit, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		if err := s.knownProvider(c.Provider); err != nil {
			return err
		}
		var err error
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		check, err := plan.Check(ctx, tx, res.Draft.Content())
		if err != nil {
			return err
		}
		if check.MissingCount > 0 {
			return &MissingVarsError{Missing: check.Missing, Total: check.MissingCount}
		}
		var detail any // the trail says the proposer submitted despite the warning
		if check.EmptyCount > 0 {
			detail = map[string]any{"empty": check.EmptyCount}
		}
		if err := s.move(ctx, tx, &a, &c, auth.ActionSubmit, res.PlanHash, "", detail); err != nil {
			return err
		}
		res.Campaign, res.Check = c, &check
		_, err = insertSubmission(ctx, tx, c.ID, c.Version, res.PlanHash, a.UserID)
		return err
	})
	return res, err
}

// Approve records a's approval of the plan hash they were shown. The N-th
// distinct approval of the current hash freezes the plan (and starts it
// when the campaign says so).
func (s *Service) Approve(ctx context.Context, a auth.Actor, id, shownHash string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionApprove); err != nil {
		return Result{}, err
	}
	if err := plan.ValidHash(shownHash); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.act(ctx, a, id, auth.ActionApprove, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		var err error
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		// ApproveAllowed's rule: the role and the table again, authorship
		// as submitted, an approval already given.
		if err := approveAllowed(ctx, tx, a, c, res.PlanHash); err != nil {
			return err
		}
		if shownHash != res.PlanHash {
			return fmt.Errorf("%w: the draft changed since it was shown to you (you approved %.12s…, it is now %.12s…); review it again", onceplan.ErrConflict, shownHash, res.PlanHash)
		}
		_, err = tx.Exec(ctx, `INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ($1, $2, $3, $4)`,
			c.ID, c.Version, shownHash, a.UserID)
		if err := approvalErr(err); err != nil {
			return err
		}
		if err := s.move(ctx, tx, &a, &c, auth.ActionApprove, shownHash, "", nil); err != nil {
			return err
		}
		count, err := approvals(ctx, tx, c, shownHash)
		if err != nil {
			return err
		}
		if count < c.RequiredApprovals {
			res.Campaign = c
			return s.answer(ctx, tx, &res, nil)
		}
		p, err := freeze(ctx, tx, c, res.Draft, shownHash)
		if err != nil {
			return err
		}
		c.PlanID = p.ID
		if err := s.move(ctx, tx, nil, &c, auth.ActionFreeze, shownHash, "", map[string]any{"plan_id": p.ID, "target_count": p.TargetCount, "approvals": count}); err != nil {
			return err
		}
		if c.StartOnApproval && (c.ScheduledAt == nil || !c.ScheduledAt.After(s.Now())) {
			if c, err = s.start(ctx, tx, nil, c, p); err != nil {
				return err
			}
		}
		res.Campaign = c
		return s.answer(ctx, tx, &res, nil)
	})
	return res, err
}

// freeze writes the plan of campaign c's draft d, approved under hash,
// and points the campaign at it.
func freeze(ctx context.Context, tx pgx.Tx, c Campaign, d Draft, hash string) (plan.Plan, error) {
	p, err := plan.Freeze(ctx, tx, plan.FreezeParams{
		CampaignID: c.ID, Version: d.Version, Provider: c.Provider, Tool: c.Tool, ListUnsubscribe: c.ListUnsubscribe,
		Payload: d.Payload, ListID: d.ListID, TargetCount: d.TargetCount, ProposedBy: d.ProposedBy, Hash: hash,
	})
	if err != nil {
		return p, err
	}
	_, err = tx.Exec(ctx, `UPDATE campaign SET plan_id = $2 WHERE id = $1`, c.ID, p.ID)
	return p, err
}

// ApproveAllowed says whether a may approve campaign c's current version
// now: nil, or an error whose message says why not (the role, the state,
// authorship as submitted, an approval already given). Approve checks the
// same.
func (s *Service) ApproveAllowed(ctx context.Context, a auth.Actor, c Campaign) error {
	r, err := s.result(ctx, s.pool, c)
	if err != nil {
		return err
	}
	return approveAllowed(ctx, s.pool, a, c, r.PlanHash)
}

func approveAllowed(ctx context.Context, db onceplan.DB, a auth.Actor, c Campaign, hash string) error {
	if err := Allowed(a, c, auth.ActionApprove); err != nil {
		return err
	}
	// Authorship as submitted decides, as it does for PostgreSQL.
	sub, err := latestSubmission(ctx, db, c.ID)
	if err != nil {
		return err
	}
	if sub.IsAuthor(a.UserID) {
		return fmt.Errorf("%w: you proposed or last edited this draft; someone else must approve it", onceplan.ErrForbidden)
	}
	var already bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approval WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3 AND approver_id = $4)`,
		c.ID, c.Version, hash, a.UserID).Scan(&already); err != nil {
		return err
	}
	if already {
		return fmt.Errorf("%w: you have already approved this version", onceplan.ErrConflict)
	}
	return nil
}

func approvalErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("%w: you have already approved this version", onceplan.ErrConflict)
		case "OP006":
			return fmt.Errorf("%w: you proposed or last edited this draft; someone else must approve it", onceplan.ErrForbidden)
		}
	}
	return err
}

// approvals counts the distinct approvals of campaign c's current version
// under hash.
func approvals(ctx context.Context, db onceplan.DB, c Campaign, hash string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM approval WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3`,
		c.ID, c.Version, hash).Scan(&n)
	return n, err
}

// Reject sends a pending draft back to its proposer, with a reason.
func (s *Service) Reject(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionReject); err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(reason) == "" {
		return Result{}, &onceplan.FieldError{Field: "reason", Reason: "is required: say what must change"}
	}
	return s.transition(ctx, a, id, auth.ActionReject, reason)
}

// transition takes a simple action (reject, pause, cancel) on a locked
// campaign, as the lifecycle table says, and audits it.
func (s *Service) transition(ctx context.Context, a auth.Actor, id string, action auth.Action, reason string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, action, func(tx pgx.Tx, c *Campaign) error {
		h, err := s.result(ctx, tx, *c)
		if err != nil {
			return err
		}
		if err := s.move(ctx, tx, &a, c, action, h.PlanHash, reason, nil); err != nil {
			return err
		}
		res, err = s.result(ctx, tx, *c)
		return err
	})
	return res, err
}
