package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// metric returns the plan's exactly-once metric (package audit's: the
// frozen rows read again and checked against the approved hash, then
// every target counted, in one snapshot) and where it comes from.
func (s *Server) metric(ctx context.Context, pl plan.Plan) (view.Metric, string, error) {
	m, err := audit.ForPlan(ctx, s.cfg.Pool, pl.ID)
	if err != nil {
		return view.Metric{}, "", err
	}
	return view.Metric{
		Approved: m.Approved, ExactlyOnce: m.ExactlyOnce, Missing: m.Missing, InDoubt: m.InDoubt,
		Failed: m.Failed, Stranded: m.Stranded, Revoked: m.Revoked, Duplicates: m.Duplicates, Outside: m.Outside, Suppressed: m.Suppressed,
		PlanIntact: m.PlanIntact, Holds: m.Holds, Reasons: m.Reasons,
		Rows: m.Integrity.Rows, PlanHash: m.Integrity.PlanHash, ApprovedHash: m.Integrity.ApprovedHash,
	}, "From the ledger and the frozen plan, read again in one snapshot; duplicates are measured against the provider's own evidence by `onceplan audit --maildir/--provider-log/--probe`.", nil
}

// handleAudit shows a campaign's exactly-once metric and its trail; a
// campaign never approved has no plan to audit, and shows its history.
func (s *Server) handleAudit(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	p := view.AuditPage{Page: s.page(c, "Audit "+camp.Name, "campaigns"), Campaign: campaignView(camp)}
	if camp.PlanID == 0 {
		p.Title = "History of " + camp.Name
	} else {
		pl, err := s.planOf(ctx, camp)
		if err != nil {
			return err
		}
		if p.Metric, p.Source, err = s.metric(ctx, pl); err != nil {
			return err
		}
		counts, err := s.planCounts(ctx, pl)
		if err != nil {
			return err
		}
		p.Campaign.Outcome = approval.OutcomeOf(camp, counts)
	}
	if p.Events, err = s.history(ctx, camp); err != nil {
		return err
	}
	return s.render(c, http.StatusOK, view.Audit(p))
}

// history is a campaign's trail for a person, oldest first: who, and what
// each entry records in a sentence (approval.Event.Summary), with the
// lines an import refused.
func (s *Server) history(ctx context.Context, camp approval.Campaign) ([]view.Event, error) {
	events, err := approval.Events(ctx, s.cfg.Pool, camp.ID)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range events {
		if e.ActorID != 0 {
			ids = append(ids, e.ActorID)
		}
	}
	names, err := auth.Emails(ctx, s.cfg.Pool, ids)
	if err != nil {
		return nil, err
	}
	out := make([]view.Event, 0, len(events))
	for _, e := range events {
		actor := "system"
		if e.ActorID != 0 {
			actor = names[e.ActorID]
			if e.ViaAgent {
				actor = "agent:" + actor
			}
		}
		v := view.Event{
			At: e.CreatedAt, Version: e.Version, Action: e.Action, Actor: actor, Reason: e.Reason, PlanHash: e.PlanHash,
			Detail: string(e.Detail), Summary: e.Summary(),
		}
		if e.Action == string(auth.ActionTestSend) {
			v.Reason = "" // its reason is the summary's "to whom", said there
		}
		for _, l := range e.RejectedLines() {
			v.Lines = append(v.Lines, view.Rejection{Line: l.Line, Reason: l.Reason})
		}
		out = append(out, v)
	}
	return out, nil
}

// exportHeaders names the download; exportFailed takes the name back when
// the export fails before anything is sent.
func (s *Server) exportHeaders(c echo.Context, camp approval.Campaign, ext, contentType string) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, contentType)
	h.Set("Content-Disposition", `attachment; filename="onceplan-`+camp.ID+`-audit.`+ext+`"`)
	h.Set("Cache-Control", "no-store")
}

// exportOf reads the campaign an export is asked of and its plan.
func (s *Server) exportOf(c echo.Context) (approval.Campaign, plan.Plan, error) {
	camp, err := s.campaignOf(c)
	if err != nil {
		return camp, plan.Plan{}, err
	}
	pl, err := s.planOf(c.Request().Context(), camp)
	return camp, pl, err
}

// exportFailed ends an export that failed: with the error page while
// nothing is sent yet, else (the download is cut short) in the log.
func (s *Server) exportFailed(c echo.Context, camp approval.Campaign, err error) error {
	if err == nil {
		return nil
	}
	if !c.Response().Committed {
		c.Response().Header().Del("Content-Disposition")
		return err
	}
	s.cfg.Logger.Error("audit export failed", "err", err, "campaign", camp.ID)
	return nil
}

// handleAuditCSV downloads the plan's per-target export as CSV: exactly
// audit.Export's, as `onceplan audit --export csv` writes it (the columns
// of audit.TargetRow, formulas defused).
func (s *Server) handleAuditCSV(c echo.Context) error {
	camp, pl, err := s.exportOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	s.exportHeaders(c, camp, "csv", "text/csv; charset=utf-8")
	return s.exportFailed(c, camp, audit.Export(ctx, s.cfg.Pool, pl.ID, audit.ExportCSV, c.Response()))
}

// handleAuditJSON downloads the metric and the plan's per-target export as
// one JSON object, streamed:
//
//	{"campaign_id": "…", "plan_hash": "…", "metric": {…the audit page's metric…},
//	 "targets": […exactly audit.Export's JSON array of audit.TargetRow…]}
func (s *Server) handleAuditJSON(c echo.Context) error {
	camp, pl, err := s.exportOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	m, _, err := s.metric(ctx, pl)
	if err != nil {
		return err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	s.exportHeaders(c, camp, "json", "application/json; charset=UTF-8")
	w := c.Response()
	if _, err := io.WriteString(w, `{"campaign_id":`+strconv.Quote(camp.ID)+`,"plan_hash":`+strconv.Quote(pl.Hash)+`,"metric":`+string(mb)+`,"targets":`); err != nil {
		return s.exportFailed(c, camp, err)
	}
	if err := audit.Export(ctx, s.cfg.Pool, pl.ID, audit.ExportJSON, w); err != nil {
		return s.exportFailed(c, camp, err)
	}
	_, err = io.WriteString(w, "}\n")
	return s.exportFailed(c, camp, err)
}
