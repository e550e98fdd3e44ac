package web

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/audit"
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
		Failed: m.Failed, Stranded: m.Stranded, Revoked: m.Revoked, Duplicates: m.Duplicates, Outside: m.Outside,
		PlanIntact: m.PlanIntact, Holds: m.Holds, Reasons: m.Reasons,
		Rows: m.Integrity.Rows, PlanHash: m.Integrity.PlanHash, ApprovedHash: m.Integrity.ApprovedHash,
	}, "From the ledger and the frozen plan, read again in one snapshot; duplicates are measured against the provider's own evidence by `onceplan audit --maildir/--provider-log/--probe`.", nil
}

func (s *Server) handleAudit(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return err
	}
	m, source, err := s.metric(ctx, pl)
	if err != nil {
		return err
	}
	events, err := plan.Events(ctx, s.cfg.Pool, camp.ID)
	if err != nil {
		return err
	}
	var ids []int64
	for _, e := range events {
		if e.ActorID != 0 {
			ids = append(ids, e.ActorID)
		}
	}
	names, err := userEmails(ctx, s.cfg.Pool, ids)
	if err != nil {
		return err
	}
	p := view.AuditPage{Page: s.page(c, "Audit "+camp.Name, "campaigns"), Campaign: campaignView(camp), Metric: m, Source: source}
	for _, e := range events {
		actor := "system"
		if e.ActorID != 0 {
			actor = names[e.ActorID]
			if e.ViaAgent {
				actor = "agent:" + actor
			}
		}
		p.Events = append(p.Events, view.Event{
			At: e.CreatedAt, Action: e.Action, Actor: actor, Reason: e.Reason, PlanHash: e.PlanHash, Detail: string(e.Detail),
		})
	}
	return s.render(c, http.StatusOK, view.Audit(p))
}

// exportRow is one target in the per-target export.
type exportRow struct {
	Ordinal  int        `json:"ordinal"`
	Target   string     `json:"target"`
	Key      string     `json:"key"`
	Epoch    int        `json:"epoch"`
	State    string     `json:"state"`
	Attempts int        `json:"attempts"`
	Receipt  string     `json:"receipt"`
	Changed  *time.Time `json:"last_change"`
}

// eachTarget streams every target of the plan in ordinal order, a page at
// a time, so that an export of a million targets holds one page in memory.
func (s *Server) eachTarget(ctx context.Context, pl plan.Plan, fn func(exportRow) error) error {
	after := ""
	for {
		page, err := queryTargets(ctx, s.cfg.Pool, TargetQuery{ListID: pl.ListID, Count: pl.TargetCount, After: after, Limit: 2000})
		if err != nil {
			return err
		}
		for _, r := range page.Rows {
			row := exportRow{Ordinal: r.Ordinal, Target: r.Target, Key: r.Key, Epoch: r.Epoch, State: r.State, Attempts: r.Attempts, Receipt: r.Receipt}
			if !r.Changed.IsZero() {
				t := r.Changed.UTC()
				row.Changed = &t
			}
			if err := fn(row); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

func (s *Server) exportHeaders(c echo.Context, camp plan.Campaign, ext, contentType string) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, contentType)
	h.Set("Content-Disposition", `attachment; filename="onceplan-`+camp.ID+`-audit.`+ext+`"`)
	h.Set("Cache-Control", "no-store")
}

// handleAuditCSV exports every target's state as CSV. Cells that a
// spreadsheet would run as a formula are prefixed with a quote.
func (s *Server) handleAuditCSV(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return err
	}
	s.exportHeaders(c, camp, "csv", "text/csv; charset=utf-8")
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	w.Write([]string{"ordinal", "target", "key", "epoch", "state", "attempts", "receipt", "last_change"})
	err = s.eachTarget(ctx, pl, func(r exportRow) error {
		changed := ""
		if r.Changed != nil {
			changed = r.Changed.Format(time.RFC3339Nano)
		}
		return w.Write([]string{strconv.Itoa(r.Ordinal), csvSafe(r.Target), r.Key, strconv.Itoa(r.Epoch), r.State,
			strconv.Itoa(r.Attempts), csvSafe(r.Receipt), changed})
	})
	w.Flush()
	if err == nil {
		err = w.Error()
	}
	if err != nil {
		s.cfg.Logger.Error("audit export failed", "err", err, "campaign", camp.ID)
	}
	return nil
}

// csvSafe defuses spreadsheet formulas (=, +, -, @ at the start).
func csvSafe(s string) string {
	if s != "" && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@' || s[0] == '\t' || s[0] == '\r') {
		return "'" + s
	}
	return s
}

// handleAuditJSON exports the metric and every target's state as JSON,
// streamed.
func (s *Server) handleAuditJSON(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return err
	}
	m, _, err := s.metric(ctx, pl)
	if err != nil {
		return err
	}
	s.exportHeaders(c, camp, "json", echo.MIMEApplicationJSONCharsetUTF8)
	c.Response().WriteHeader(http.StatusOK)
	w := c.Response()
	mb, _ := json.Marshal(m)
	w.Write([]byte(`{"campaign_id":` + strconv.Quote(camp.ID) + `,"plan_hash":` + strconv.Quote(pl.Hash) + `,"metric":`))
	w.Write(mb)
	w.Write([]byte(`,"targets":[`))
	first := true
	err = s.eachTarget(ctx, pl, func(r exportRow) error {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if !first {
			w.Write([]byte(","))
		}
		first = false
		_, err = w.Write(b)
		return err
	})
	w.Write([]byte("]}\n"))
	if err != nil {
		s.cfg.Logger.Error("audit export failed", "err", err, "campaign", camp.ID)
	}
	return nil
}
