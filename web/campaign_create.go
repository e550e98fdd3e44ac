package web

import (
	"errors"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

func (s *Server) providerNames() []string {
	if s.cfg.Providers == nil {
		return nil
	}
	return s.cfg.Providers.Names()
}

func (s *Server) newCampaignPage(c echo.Context, f newCampaignForm, errs map[string]string) (view.NewCampaignPage, error) {
	p := view.NewCampaignPage{
		Page: s.page(c, "New campaign", "campaigns"), Name: f.Name, Provider: f.Provider,
		Providers: s.providerNames(), RequiredApprovals: f.RequiredApprovals, Payload: f.Payload.view(), FieldErrors: errs,
		Transactional: f.Transactional, Start: f.Start, ScheduledAt: f.ScheduledAt, Encoding: f.Encoding,
	}
	if msg, ok := errs["targets"]; ok {
		// A refused list: said at the top of the page, where the eye
		// lands, and beside the file field, which the browser emptied.
		p.UploadName = uploadName(c, "targets")
		p.Error = refusedUpload(p.UploadName, msg)
	}
	if p.RequiredApprovals < 1 {
		p.RequiredApprovals = 1
	}
	if p.Start == "" {
		p.Start = startManual
	}
	if f.CopyListOf != "" {
		ctx := c.Request().Context()
		src, err := approval.GetCampaign(ctx, s.cfg.Pool, f.CopyListOf)
		if err != nil {
			return p, err
		}
		d, err := approval.GetDraft(ctx, s.cfg.Pool, src.ID, src.Version)
		if err != nil {
			return p, err
		}
		p.Copy = &view.CopySource{ID: src.ID, Name: src.Name, Version: src.Version, TargetCount: d.TargetCount}
		p.Title = "New campaign from " + src.Name
	}
	return p, nil
}

func (s *Server) renderNewCampaign(c echo.Context, status int, f newCampaignForm, errs map[string]string) error {
	p, err := s.newCampaignPage(c, f, errs)
	if err != nil {
		return err
	}
	return s.render(c, status, view.NewCampaign(p))
}

// handleCampaignNew shows the form that makes a campaign; with ?from=ID
// (a clone), filled from that campaign's current version: its name, its
// settings and message, and its list, which the new draft imports again.
func (s *Server) handleCampaignNew(c echo.Context) error {
	f := newCampaignForm{RequiredApprovals: 1}
	if from := c.QueryParam("from"); from != "" {
		ctx := c.Request().Context()
		src, err := approval.GetCampaign(ctx, s.cfg.Pool, from)
		if err != nil {
			return err
		}
		d, err := approval.GetDraft(ctx, s.cfg.Pool, src.ID, src.Version)
		if err != nil {
			return err
		}
		f = newCampaignForm{
			Name: copyName(src.Name), Provider: src.Provider, RequiredApprovals: src.RequiredApprovals,
			Payload:       payloadForm{From: d.Payload.From, Subject: d.Payload.Subject, Text: d.Payload.Text, HTML: d.Payload.HTML},
			Transactional: !src.ListUnsubscribe, CopyListOf: src.ID,
		}
	}
	return s.renderNewCampaign(c, http.StatusOK, f, nil)
}

// copyName names a clone after its source, within a name's 200 bytes.
func copyName(name string) string {
	const suffix = " (copy)"
	if len(name)+len(suffix) > 200 {
		name = strings.ToValidUTF8(name[:200-len(suffix)], "")
	}
	return name + suffix
}

// uploadName is the name of the file a request's multipart field carries
// ("" when none).
func uploadName(c echo.Context, field string) string {
	fh, err := c.FormFile(field)
	if err != nil {
		return ""
	}
	return fh.Filename
}

// refusedUpload is the page's one-line refusal of an uploaded list: what
// was refused and why, that nothing was imported, and what to do.
func refusedUpload(file, why string) string {
	what := "The target list"
	if file != "" {
		what = "The target list " + file
	}
	why = strings.TrimPrefix(why, "the list was refused: ")
	return what + " was not imported, and nothing was changed: " + strings.TrimSuffix(why, ".") + ". Choose the file again to upload it."
}

// uploadedFile opens the multipart file field name; ok is false when the
// form has none (or an empty one).
func uploadedFile(c echo.Context, name string) (multipart.File, bool, error) {
	fh, err := c.FormFile(name)
	if errors.Is(err, http.ErrMissingFile) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, echo.NewHTTPError(http.StatusBadRequest, "the upload could not be read: "+err.Error())
	}
	if fh.Size == 0 {
		return nil, false, nil
	}
	f, err := fh.Open()
	if err != nil {
		return nil, false, err
	}
	return f, true, nil
}

// handleCampaignCreate makes a campaign and its first draft, importing the
// target list when one was uploaded; a refused list creates nothing. It
// answers with a redirect to the draft (which shows the import report):
// the form's one-time token is the workflow's idempotency key, so that the
// form sent again — a reload, a double click, even after a restart —
// finds the campaign the first one made.
func (s *Server) handleCampaignCreate(c echo.Context) error {
	f := readNewCampaignForm(c)
	if err := f.Validate(s.providerNames()); err != nil {
		if errs, ok := fieldErrors(err); ok {
			return s.renderNewCampaign(c, http.StatusUnprocessableEntity, f, errs)
		}
		return err
	}
	params := approval.CreateParams{
		Name: f.Name, Provider: f.Provider, RequiredApprovals: f.RequiredApprovals, Payload: f.Payload.payload(),
		Transactional: f.Transactional, ScheduledAt: f.scheduledAt, StartOnApproval: f.Start == startOnApproval,
		CopyListOf: f.CopyListOf,
	}
	file, ok, err := uploadedFile(c, "targets")
	if err != nil {
		return err
	}
	var listSize int64 = -1
	if ok {
		defer file.Close()
		encoding, _ := plan.ParseEncoding(f.Encoding) // Validate checked it
		params.Targets = &approval.TargetsParams{Format: plan.FormatCSV, Body: file, Encoding: encoding}
		if fh, err := c.FormFile("targets"); err == nil {
			listSize = fh.Size
		}
	}
	if token := formTokenOf(c); token != "" {
		params.IdempotencyKey, params.RequestHash = "form:"+token, f.hash(listSize)
	}
	res, err := s.cfg.Approval.Create(c.Request().Context(), mustActor(c), params)
	if err != nil {
		if errs, ok := fieldErrors(err); ok {
			return s.renderNewCampaign(c, http.StatusUnprocessableEntity, f, errs)
		}
		return err
	}
	draft := "/campaigns/" + res.Campaign.ID + "/draft"
	if res.Import == nil {
		return redirect(c, draft, "created")
	}
	return s.redirectShowing(c, draft, "created", shownResult{campaign: res.Campaign.ID, report: res.Import})
}
