package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// draftHistoryLen is how many of a campaign's latest trail entries the
// draft page shows (the audit page shows every one).
const draftHistoryLen = 10

// rejection says, while campaign camp is back in draft because an
// approver rejected the version submitted, who did, when and why (the
// decision's own words, approval.Decision.Message); "" otherwise.
func (s *Server) rejection(ctx context.Context, camp approval.Campaign) (string, error) {
	if camp.State != approval.StateDraft {
		return "", nil
	}
	d, err := s.cfg.Approval.Decision(ctx, camp.ID)
	if err != nil || d.Decision != approval.DecisionRejected {
		return "", err
	}
	return d.Message(), nil
}

// draftOpts is what a draft page shows beyond the stored draft.
type draftOpts struct {
	payload     *payloadForm      // the form as submitted (when refused)
	fieldErrors map[string]string // why it was refused
	report      *plan.ImportReport
	flash       string
	errMsg      string
	// testSendErr says why a test send was refused, beside its form.
	testSendErr string
	// upload is the import form as sent, when its file was refused.
	upload view.UploadForm
}

func importView(r *plan.ImportReport) *view.ImportReport {
	v := &view.ImportReport{
		Rows: r.Rows, Accepted: r.Accepted, Duplicate: r.Duplicate, Rejected: r.RejectedCount,
		TargetCount: r.TargetCount, Truncated: r.Truncated,
	}
	for _, x := range r.Rejected {
		v.Rejections = append(v.Rejections, view.Rejection{Line: x.Line, Reason: x.Reason})
	}
	for _, x := range r.Duplicates {
		v.Duplicates = append(v.Duplicates, view.Duplicate{Line: x.Line, DuplicateOf: x.DuplicateOf})
	}
	v.SuppressedCount = r.SuppressedCount
	for _, x := range r.Suppressed {
		v.Suppressed = append(v.Suppressed, view.Rejection{Line: x.Line, Reason: strings.ReplaceAll(x.Reason, "_", " ")})
	}
	return v
}

// previewOf renders one target's message of a draft for the page: text
// as text, the HTML body behind a URL for the sandboxed frame.
func (s *Server) previewOf(c echo.Context, camp approval.Campaign, d approval.Draft, address string, ordinal int) view.Preview {
	pv := view.Preview{Ordinal: ordinal}
	m, err := plan.PreviewWithLink(c.Request().Context(), s.cfg.Pool, d.Content(), address, ordinal, s.sampleUnsubscribeURL(camp))
	if err != nil {
		_, _, msg := classify(err)
		pv.Error = msg
		return pv
	}
	pv.From, pv.To, pv.Subject, pv.Text = m.From, m.To, m.Subject, m.Text
	if m.HTML != "" {
		q := "ordinal=" + strconv.Itoa(ordinal)
		if address != "" {
			q = "address=" + urlQueryEscape(address)
		}
		pv.HTMLURL = "/campaigns/" + camp.ID + "/preview.html?version=" + strconv.Itoa(d.Version) + "&" + q
	}
	return pv
}

// renderDraft shows the draft page of camp's current version: the stored
// draft (or the form as refused), the preview of one target's message
// (the first unless the page asks for another), and what the submission
// check finds in the list against the message now: a variable the
// targets lack is shown beside the field that reads it, at save already.
func (s *Server) renderDraft(c echo.Context, camp approval.Campaign, status int, o draftOpts) error {
	ctx := c.Request().Context()
	d, err := approval.GetDraft(ctx, s.cfg.Pool, camp.ID, camp.Version)
	if err != nil {
		return err
	}
	a := mustActor(c)
	p := view.DraftView{DraftPage: view.DraftPage{
		Page: s.page(c, camp.Name, "campaigns"), Campaign: campaignView(camp),
		PlanHash: d.Hash(camp), TargetCount: d.TargetCount, FieldErrors: map[string]string{},
		CanEdit: a.Has(auth.RoleProposer) && camp.State != approval.StateCancelled && camp.ArchivedAt == nil,
		Payload: view.Payload{From: d.Payload.From, Subject: d.Payload.Subject, Text: d.Payload.Text, HTML: d.Payload.HTML},
	}}
	p.CanDiscard = camp.PlanID == 0 && approval.Allowed(a, camp, auth.ActionDiscard) == nil
	p.Upload = o.upload
	if o.payload != nil {
		p.Payload = o.payload.view()
	}
	if o.flash != "" {
		p.Flash = flashes[o.flash]
	}
	p.Error = o.errMsg
	if o.report == nil {
		if r, ok := s.shownFor(c); ok && r.campaign == camp.ID {
			o.report = r.report
		}
	}
	if o.report != nil {
		p.Import = importView(o.report)
	}
	if p.Targets, err = draftTargets(ctx, s.cfg.Pool, d.ListID, 0, 20); err != nil {
		return err
	}
	p.Payload.ListImported, p.Payload.Variables = d.TargetCount > 0, listVariables(p.Targets)
	if o.payload == nil && d.TargetCount > 0 {
		if err := s.checkDraft(ctx, d, &p); err != nil {
			return err
		}
	}
	for k, v := range o.fieldErrors {
		p.FieldErrors[k] = v
	}
	// A preview by address is the preview of that target's ordinal, so
	// that the page's "Target #" and the test send show that target too.
	address := strings.TrimSpace(c.QueryParam("address"))
	ordinal, _ := strconv.Atoi(c.QueryParam("preview"))
	if d.TargetCount > 0 {
		var pv view.Preview
		if address != "" {
			if ordinal, err = plan.OrdinalOf(ctx, s.cfg.Pool, d.ListID, address); err != nil {
				_, _, msg := classify(err)
				pv.Error = msg
			}
		}
		if pv.Error == "" {
			if ordinal <= 0 {
				ordinal = 1
			}
			pv = s.previewOf(c, camp, d, "", ordinal)
		}
		p.Preview = &pv
	}
	if p.TestSend, err = s.testSendForm(ctx, a, camp, d.TargetCount, "draft"); err != nil {
		return err
	}
	if p.TestSend != nil {
		p.TestSend.Error = o.testSendErr
	}
	if p.Rejected, err = s.rejection(ctx, camp); err != nil {
		return err
	}
	history, err := s.history(ctx, camp)
	if err != nil {
		return err
	}
	p.HistoryTotal = len(history)
	for i := len(history) - 1; i >= 0 && len(p.History) < draftHistoryLen; i-- {
		p.History = append(p.History, history[i])
	}
	if p.TestSend != nil && p.Preview != nil && p.Preview.Ordinal > 0 {
		p.TestSend.Ordinal = p.Preview.Ordinal
	}
	return s.render(c, status, view.Draft(p))
}

func missingView(ms []plan.MissingVar) []view.MissingVar {
	out := make([]view.MissingVar, len(ms))
	for i, m := range ms {
		out[i] = view.MissingVar{Line: m.Line, Target: m.Target, Missing: strings.Join(m.Missing, ", ")}
	}
	return out
}

// checkDraft runs the submission's check (plan.Check) on the stored draft
// for the page: targets that lack a variable the message reads, each
// variable's error beside the field that reads it; blank variables, a
// warning; a refused list line, the page's error.
func (s *Server) checkDraft(ctx context.Context, d approval.Draft, p *view.DraftView) error {
	r, err := plan.Check(ctx, s.cfg.Pool, d.Content())
	if err != nil {
		if errs, ok := fieldErrors(err); ok {
			for k, v := range errs {
				p.FieldErrors[k] = v
			}
			return nil
		}
		return err
	}
	p.MissingTotal, p.Missing = r.MissingCount, missingView(r.Missing)
	for field, msg := range missingFieldErrors(d.Payload, r, listVariables(p.Targets)) {
		p.FieldErrors[field] = msg
	}
	if len(p.Missing) > 0 && p.Flash == flashes["saved"] {
		p.Flash = flashes["saved-incomplete"]
	}
	p.EmptyWarnings = emptyWarnings(r)
	return nil
}

// emptyWarnings is the check's warning about blank merge variables, for
// the draft and the approval page.
func emptyWarnings(r plan.CheckReport) view.EmptyWarnings {
	var w view.EmptyWarnings
	if r.EmptyCount == 0 {
		return w
	}
	w.EmptyTotal, w.EmptyWarning = r.EmptyCount, plan.EmptyWarning(r.Empty[0], r.EmptyCount)
	for _, e := range r.Empty {
		w.Empty = append(w.Empty, view.EmptyVar{Line: e.Line, Target: e.Target, Empty: strings.Join(e.Empty, ", ")})
	}
	return w
}

// missingFieldErrors words, for each payload field, the variables it reads
// that targets lack: "{{.frist_name}}: 2 targets have no such variable
// (first: line 2, ann@example.com); the list's variables are first_name".
// A variable goes beside each field whose template names it (the text
// when none seems to). have are the list's variable names (of its first
// target).
func missingFieldErrors(pl plan.Payload, r plan.CheckReport, have []string) map[string]string {
	if r.MissingCount == 0 {
		return nil
	}
	lacking := map[string]int{}
	first := map[string]plan.MissingVar{}
	var names []string
	for _, m := range r.Missing {
		for _, v := range m.Missing {
			if lacking[v] == 0 {
				first[v] = m
				names = append(names, v)
			}
			lacking[v]++
		}
	}
	sort.Strings(names)
	fields := []struct{ name, text string }{{"subject", pl.Subject}, {"text", pl.Text}, {"html", pl.HTML}, {"from", pl.From}}
	out := map[string]string{}
	for _, v := range names {
		n := strconv.Itoa(lacking[v]) + " targets have"
		if lacking[v] == 1 {
			n = "1 target has"
		}
		if len(r.Missing) < r.MissingCount {
			n = "at least " + strconv.Itoa(lacking[v]) + " targets have"
		}
		msg := "{{." + v + "}}: " + n + " no such variable (first: line " + strconv.Itoa(first[v].Line) + ", " + first[v].Target + ")"
		if len(have) > 0 {
			msg += "; the list's variables are " + strings.Join(have, ", ")
		}
		placed := false
		reads := regexp.MustCompile(`\.` + regexp.QuoteMeta(v) + `\b`)
		for _, f := range fields {
			if reads.MatchString(f.text) {
				out[f.name] = joinMsg(out[f.name], msg)
				placed = true
			}
		}
		if !placed {
			out["text"] = joinMsg(out["text"], msg)
		}
	}
	return out
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + ". " + b
}

// listVariables names the variables of a list's first target (a list's
// rows share its columns).
func listVariables(ts []view.DraftTarget) []string {
	if len(ts) == 0 {
		return nil
	}
	var vars map[string]any
	if json.Unmarshal([]byte(ts[0].Vars), &vars) != nil {
		return nil
	}
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func (s *Server) handleDraft(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	return s.renderDraft(c, camp, http.StatusOK, draftOpts{})
}

// handlePayloadSave replaces the draft's message (a new version once the
// campaign was approved: approval.Service.Edit decides).
func (s *Server) handlePayloadSave(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	f := readPayloadForm(c)
	err = f.Validate()
	if err == nil {
		_, err = s.cfg.Approval.Edit(c.Request().Context(), mustActor(c), camp.ID, f.payload())
	}
	if err != nil {
		if errs, ok := fieldErrors(err); ok {
			return s.renderDraft(c, camp, http.StatusUnprocessableEntity, draftOpts{payload: &f, fieldErrors: errs})
		}
		return err
	}
	return redirect(c, "/campaigns/"+camp.ID+"/draft", "saved")
}

// handleImport reads an uploaded CSV into the draft, then redirects to the
// draft, which shows its report.
func (s *Server) handleImport(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	file, ok, err := uploadedFile(c, "targets")
	if err != nil {
		return err
	}
	if !ok {
		return s.renderDraft(c, camp, http.StatusUnprocessableEntity, draftOpts{fieldErrors: map[string]string{"targets": "choose a CSV file to upload"}})
	}
	defer file.Close()
	encoding, err := plan.ParseEncoding(c.FormValue("encoding"))
	if err == nil {
		var res approval.Result
		res, err = s.cfg.Approval.ImportTargets(c.Request().Context(), mustActor(c), camp.ID, approval.TargetsParams{
			Format: plan.FormatCSV, Body: file, Encoding: encoding,
			AddressColumn: strings.TrimSpace(c.FormValue("address_column")),
			Append:        c.FormValue("append") != "",
		})
		if err == nil {
			return s.redirectShowing(c, "/campaigns/"+camp.ID+"/draft", "imported", shownResult{campaign: camp.ID, report: res.Import})
		}
	}
	if errs, ok := fieldErrors(err); ok {
		upload := view.UploadForm{Name: uploadName(c, "targets"), Encoding: c.FormValue("encoding"),
			AddressColumn: strings.TrimSpace(c.FormValue("address_column")), Append: c.FormValue("append") != ""}
		o := draftOpts{fieldErrors: errs, upload: upload}
		if msg, ok := errs["targets"]; ok {
			o.errMsg = refusedUpload(upload.Name, msg)
		}
		return s.renderDraft(c, camp, http.StatusUnprocessableEntity, o)
	}
	return err
}

// handleDiscard discards a campaign never approved (its proposer's, or an
// operator's, decision: approval.Service.Discard) and shows its draft
// page, which then offers nothing to do but read it and clone it.
func (s *Server) handleDiscard(c echo.Context) error {
	res, err := s.cfg.Approval.Discard(c.Request().Context(), mustActor(c), c.Param("id"), strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	return redirect(c, "/campaigns/"+res.Campaign.ID+"/draft", "discarded")
}

// handleSubmit asks for approval of the draft the proposer was shown.
func (s *Server) handleSubmit(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if shown := c.FormValue("plan_hash"); shown != "" {
		d, err := approval.GetDraft(ctx, s.cfg.Pool, camp.ID, camp.Version)
		if err != nil {
			return err
		}
		if d.Hash(camp) != shown {
			return echo.NewHTTPError(http.StatusConflict, "the draft changed since this page was loaded: review it again before submitting")
		}
	}
	res, err := s.cfg.Approval.Submit(ctx, mustActor(c), camp.ID)
	var mv *approval.MissingVarsError
	switch {
	case errors.As(err, &mv):
		// The page runs the same check and lists the targets.
		return s.renderDraft(c, camp, http.StatusUnprocessableEntity, draftOpts{errMsg: "Not submitted: " + mv.Error()})
	case err != nil:
		if errs, ok := fieldErrors(err); ok {
			msg := ""
			for k, v := range errs {
				msg = k + ": " + v
			}
			return s.renderDraft(c, camp, http.StatusUnprocessableEntity, draftOpts{errMsg: "Not submitted: " + msg})
		}
		return err
	}
	if res.Check != nil && res.Check.EmptyCount > 0 {
		return redirect(c, "/campaigns/"+camp.ID+"/approval", "submitted-empty")
	}
	return redirect(c, "/campaigns/"+camp.ID+"/approval", "submitted")
}

// handlePreviewHTML serves one target's rendered HTML body for the
// preview frame. The body is the draft author's HTML with the target's
// variables escaped into it; it is shown in a frame with the sandbox
// attribute and served with a sandboxing CSP that runs no script and loads
// nothing, so neither a script in the draft nor a tracking image acts.
func (s *Server) handlePreviewHTML(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	version := camp.Version
	if v, err := strconv.Atoi(c.QueryParam("version")); err == nil && v >= 1 && v <= camp.Version {
		version = v
	}
	ctx := c.Request().Context()
	d, err := approval.GetDraft(ctx, s.cfg.Pool, camp.ID, version)
	if err != nil {
		return err
	}
	ordinal, _ := strconv.Atoi(c.QueryParam("ordinal"))
	address := strings.TrimSpace(c.QueryParam("address"))
	if address == "" && ordinal < 1 {
		ordinal = 1
	}
	m, err := plan.PreviewWithLink(ctx, s.cfg.Pool, d.Content(), address, ordinal, s.sampleUnsubscribeURL(camp))
	if err != nil {
		return err
	}
	if m.HTML == "" {
		return echo.NewHTTPError(http.StatusNotFound, "this message has no HTML body")
	}
	h := c.Response().Header()
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("Cache-Control", "no-store")
	return c.HTMLBlob(http.StatusOK, []byte(m.HTML))
}
