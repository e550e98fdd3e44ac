// Changing a draft: its payload (Edit) and its target list (ImportTargets);
// an approved campaign changed is a new version, back in draft.

package approval

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
)

// TargetsParams is an uploaded target list.
type TargetsParams struct {
	Format        plan.Format
	Body          io.Reader
	AddressColumn string
	// Encoding is the CSV's declared encoding ("": UTF-8).
	Encoding plan.Encoding
	Append   bool
}

// Edit replaces the draft's payload.
func (s *Service) Edit(ctx context.Context, a auth.Actor, id string, p plan.Payload) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionEdit, func(tx pgx.Tx, c *Campaign) error {
		if err := s.toDraft(ctx, tx, a, c, auth.ActionEdit); err != nil {
			return err
		}
		if err := updatePayload(ctx, tx, c.ID, c.Version, p, a.UserID); err != nil {
			return err
		}
		var err error
		if res, err = s.result(ctx, tx, *c); err != nil {
			return err
		}
		return s.move(ctx, tx, &a, c, auth.ActionEdit, res.PlanHash, "", nil)
	})
	return res, err
}

// ImportTargets replaces (or with Append extends) the draft's target list.
func (s *Service) ImportTargets(ctx context.Context, a auth.Actor, id string, t TargetsParams) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionImport, func(tx pgx.Tx, c *Campaign) error {
		if err := s.toDraft(ctx, tx, a, c, auth.ActionImport); err != nil {
			return err
		}
		report, err := s.importInto(ctx, tx, a, *c, t)
		if err != nil {
			return err
		}
		if res, err = s.result(ctx, tx, *c); err != nil {
			return err
		}
		res.Import = &report
		return nil
	})
	return res, err
}

// toDraft makes the locked campaign c's version one to change: the
// current one while drafting, or a new version (which needs a new
// approval) once the campaign was approved. Either way c is back in draft
// (action's edge); the caller records the edit or import, with what it
// changed.
func (s *Service) toDraft(ctx context.Context, tx pgx.Tx, a auth.Actor, c *Campaign, action auth.Action) error {
	switch c.State {
	case StateDraft:
		return nil
	case StatePendingApproval:
		// Approvals given so far were for the old hash: they no longer count.
	default:
		// Approved or started: the edit is a new version, which needs a
		// new approval.
		v, err := newVersion(ctx, tx, c.ID, c.Version, a.UserID)
		if err != nil {
			return err
		}
		c.Version = v
	}
	return s.shift(ctx, tx, c, action)
}

func (s *Service) importInto(ctx context.Context, tx pgx.Tx, a auth.Actor, c Campaign, t TargetsParams) (plan.ImportReport, error) {
	// The report lists blank merge variables of the ones the draft reads.
	d, err := GetDraft(ctx, tx, c.ID, c.Version)
	if err != nil {
		return plan.ImportReport{}, err
	}
	tpl, err := d.Payload.Compile()
	if err != nil {
		return plan.ImportReport{}, err
	}
	// Suppressed addresses are left out of the list, and reported.
	suppressed, err := suppression.ActiveSet(ctx, tx)
	if err != nil {
		return plan.ImportReport{}, err
	}
	// The draft's row is locked for the import: one list at a time.
	var current *int64
	if err := tx.QueryRow(ctx, `SELECT list_id FROM draft WHERE campaign_id = $1 AND version = $2 FOR UPDATE`,
		c.ID, c.Version).Scan(&current); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return plan.ImportReport{}, fmt.Errorf("%w: campaign %s has no draft version %d", onceplan.ErrNotFound, c.ID, c.Version)
		}
		return plan.ImportReport{}, err
	}
	report, err := plan.ImportTargets(ctx, tx, plan.ImportParams{
		CampaignID: c.ID, Current: current, Tool: c.Tool, Format: t.Format, Body: t.Body,
		AddressColumn: t.AddressColumn, Encoding: t.Encoding, Append: t.Append, MaxTargets: s.MaxTargets, MaxBytes: s.MaxBytes,
		ActorID: a.UserID, Blank: tpl.BlankFields(), Suppressed: suppressed.Lookup,
	})
	if err != nil {
		return report, err
	}
	if _, err := tx.Exec(ctx, `UPDATE draft SET list_id = $3, last_edited_by = $4, updated_at = now() WHERE campaign_id = $1 AND version = $2`,
		c.ID, c.Version, report.ListID, a.UserID); err != nil {
		return report, err
	}
	// The list it replaced goes, unless a plan froze it or a submission
	// named it.
	if current != nil {
		if err := plan.DropUnfrozenList(ctx, tx, *current); err != nil {
			return report, err
		}
	}
	// The trail keeps the counts and the first refused lines: the draft's
	// history (history.go).
	return report, s.move(ctx, tx, &a, &c, auth.ActionImport, "", "", importDetailOf(report, t.Append))
}

// importCopy imports list listID (another campaign's) into campaign c's
// draft through importInto, as the JSON list plan.WriteListJSON streams
// from a connection of its own: whatever applies to an upload — the
// suppression list, normalisation, the report, the trail — applies.
func (s *Service) importCopy(ctx context.Context, tx pgx.Tx, a auth.Actor, c Campaign, listID int64) (plan.ImportReport, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(plan.WriteListJSON(ctx, s.pool, listID, pw))
	}()
	report, err := s.importInto(ctx, tx, a, c, TargetsParams{Format: plan.FormatJSON, Body: pr})
	pr.Close() // an import that stopped early ends the writer too
	<-done
	return report, err
}
