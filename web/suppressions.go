package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/web/view"
)

// suppressionPageSize is how many entries one page of the list shows.
const suppressionPageSize = 100

// suppressionForm adds an address to the list.
type suppressionForm struct {
	Address, Reason, Note string
}

func readSuppressionForm(c echo.Context) suppressionForm {
	return suppressionForm{
		Address: strings.TrimSpace(c.FormValue("address")),
		Reason:  strings.TrimSpace(c.FormValue("reason")),
		Note:    strings.TrimSpace(c.FormValue("note")),
	}
}

// Validate checks what the list's own validation would refuse less
// clearly: the required fields.
func (f suppressionForm) Validate() error {
	switch {
	case f.Address == "":
		return &onceplan.FieldError{Field: "address", Reason: "is required"}
	case f.Reason == "":
		return &onceplan.FieldError{Field: "reason", Reason: "is required"}
	}
	return nil
}

// renderSuppressions shows the list page, with the add and remove forms
// the user may use; fieldErrors are a refused form's.
func (s *Server) renderSuppressions(c echo.Context, status int, fieldErrors map[string]string) error {
	ctx := c.Request().Context()
	a := mustActor(c)
	includeRemoved := c.QueryParam("include_removed") == "true"
	after, _ := strconv.ParseInt(c.QueryParam("after"), 10, 64)
	after = max(after, 0)
	p := view.SuppressionsPage{
		Page: s.page(c, "Suppression list", "suppressions"), Query: strings.TrimSpace(c.QueryParam("address")),
		IncludeRemoved: includeRemoved, After: after, FieldErrors: fieldErrors,
		CanAdd:    auth.Authorize(a, auth.ActionSuppress) == nil,
		CanRemove: auth.Authorize(a, auth.ActionUnsuppress) == nil,
	}
	if p.FieldErrors == nil {
		p.FieldErrors = map[string]string{}
	}
	for _, r := range suppression.Reasons {
		p.Reasons = append(p.Reasons, string(r))
	}
	entries, next, err := suppression.List(ctx, s.cfg.Pool, suppression.ListParams{
		Address: p.Query, IncludeRemoved: includeRemoved, After: after, Limit: suppressionPageSize})
	if err != nil {
		return err
	}
	p.Next = next
	if p.Active, err = suppression.Count(ctx, s.cfg.Pool); err != nil {
		return err
	}
	if p.Rows, err = suppressionRows(ctx, s.cfg.Pool, entries); err != nil {
		return err
	}
	return s.render(c, status, view.Suppressions(p))
}

// suppressionRows shows entries as the pages do: the person who added
// each, and the campaign whose link was used or whose message bounced, by
// name (approval owns the names).
func suppressionRows(ctx context.Context, db onceplan.DB, entries []suppression.Entry) ([]view.SuppressionRow, error) {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.CampaignID != "" {
			ids = append(ids, e.CampaignID)
		}
	}
	names, err := approval.Names(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	rows := make([]view.SuppressionRow, 0, len(entries))
	for _, e := range entries {
		row := view.SuppressionRow{Address: e.Address, Reason: string(e.Reason), Source: string(e.Source),
			By: e.Actor, CampaignID: e.CampaignID, CampaignName: names[e.CampaignID], Note: e.Note, CreatedAt: e.CreatedAt}
		if e.Removed != nil {
			row.Removed, row.RemovedBy, row.RemovedReason, row.RemovedAt = true, e.Removed.Actor, e.Removed.Reason, e.Removed.CreatedAt
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (s *Server) handleSuppressions(c echo.Context) error {
	return s.renderSuppressions(c, http.StatusOK, nil)
}

// handleSuppressionAdd suppresses an address, the signed-in user its actor.
func (s *Server) handleSuppressionAdd(c echo.Context) error {
	f := readSuppressionForm(c)
	err := f.Validate()
	added := false
	if err == nil {
		_, added, err = suppression.Add(c.Request().Context(), s.cfg.Pool, suppression.AddParams{
			Address: f.Address, Reason: suppression.Reason(f.Reason), Source: suppression.FromActor,
			Actor: mustActor(c).Email, Note: f.Note,
		})
	}
	if errs, ok := fieldErrors(err); ok {
		return s.renderSuppressions(c, http.StatusUnprocessableEntity, errs)
	}
	if err != nil {
		return err
	}
	if !added {
		return redirect(c, "/suppressions", "suppressed-before")
	}
	return redirect(c, "/suppressions", "suppressed")
}

// handleSuppressionRemove takes an address off the list, with a reason.
func (s *Server) handleSuppressionRemove(c echo.Context) error {
	address := strings.TrimSpace(c.FormValue("address"))
	f := readReasonForm(c)
	err := f.Validate()
	if err == nil {
		_, err = suppression.Remove(c.Request().Context(), s.cfg.Pool, address, mustActor(c).Email, f.Reason)
	}
	if errs, ok := fieldErrors(err); ok {
		for field, why := range errs {
			return s.renderSuppressions(c, http.StatusUnprocessableEntity, map[string]string{"remove": field + ": " + why})
		}
	}
	if errors.Is(err, suppression.ErrNotSuppressed) {
		return s.renderSuppressions(c, http.StatusNotFound, map[string]string{"remove": address + " is not suppressed"})
	}
	if err != nil {
		return err
	}
	return redirect(c, "/suppressions", "unsuppressed")
}
