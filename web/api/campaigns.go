package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// campaignView is GET /campaigns/{id}'s answer, and every state action's.
type campaignView struct {
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	State             approval.State  `json:"state"`
	Provider          string          `json:"provider"`
	PlanHash          string          `json:"plan_hash"`
	PlanVersion       int             `json:"plan_version"`
	RequiredApprovals int             `json:"required_approvals"`
	Approvals         int             `json:"approvals"`
	ScheduledAt       *time.Time      `json:"scheduled_at,omitempty"`
	Payload           plan.Payload    `json:"payload"`
	Counts            approval.Counts `json:"counts"`
	// Outcome says how a campaign that ended ended for its targets
	// (approval.OutcomeOf): null while it has not.
	Outcome     *approval.Outcome  `json:"outcome"`
	ApprovalURL string             `json:"approval_url"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	ArchivedAt  *time.Time         `json:"archived_at,omitempty"`
	Import      *plan.ImportReport `json:"import,omitempty"`
	// ListUnsubscribe: each message carries a one-click unsubscribe link;
	// false for a transactional campaign.
	ListUnsubscribe bool `json:"list_unsubscribe"`
	// ProviderWorkers is how many live worker processes serve the
	// campaign's provider.
	ProviderWorkers int `json:"provider_workers"`
	// Warnings are what the caller may want to act on that stopped
	// nothing: no live worker for an approved or started campaign's
	// provider; blank merge variables in the answer of a submit.
	Warnings []warning `json:"warnings"`
	// NextSteps says what a person must do next (approval.NextSteps):
	// who, what, and the page where it is done.
	NextSteps []stepView `json:"next_steps"`
}

// warning is one entry of a campaign's warnings.
type warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Targets lists the first targets concerned, Count how many in all.
	Targets []plan.EmptyVar `json:"targets,omitempty"`
	Count   int             `json:"count,omitempty"`
}

// Warning codes.
const (
	warnNoLiveWorker = "no_live_worker"
	warnEmptyVars    = "empty_vars"
)

// viewImport is an import report as the API gives it: plan.ImportReport's
// own JSON, with its lists never null.
func viewImport(r *plan.ImportReport) *plan.ImportReport {
	if r == nil {
		return nil
	}
	v := *r
	v.Rejected = nonNil(v.Rejected)
	v.Duplicates = nonNil(v.Duplicates)
	v.Suppressed = nonNil(v.Suppressed)
	v.Empty = nonNil(v.Empty)
	return &v
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// warnings are the campaign's warnings after res (see campaignView), and
// whether a live worker serves its provider.
func warnings(res approval.Result) []warning {
	out := []warning{}
	if w := res.Answer.Serving.Warning; w != "" {
		out = append(out, warning{Code: warnNoLiveWorker, Message: w})
	}
	if k := res.Check; k != nil && k.EmptyCount > 0 {
		out = append(out, warning{Code: warnEmptyVars, Message: plan.EmptyWarning(k.Empty[0], k.EmptyCount), Targets: k.Empty, Count: k.EmptyCount})
	}
	return out
}

// view is a campaign's answer: the campaign and what goes with it (counts,
// approvals, decision, workers), all read in one snapshot — the action's
// own transaction when it read them (Approve), else one read-only
// transaction after it.
func (a *API) view(c echo.Context, res approval.Result) (campaignView, error) {
	ctx := c.Request().Context()
	if c.Request().Method != http.MethodGet {
		// An action may have changed the counts: do not answer from the cache.
		if listID, _, err := approval.ListOf(ctx, a.cfg.Pool, res.Campaign); err == nil {
			a.cfg.Counts.Forget(listID)
		}
	}
	res, err := a.cfg.Approval.Answer(ctx, res, a.cfg.Counts)
	if err != nil {
		return campaignView{}, err
	}
	ans, cm := res.Answer, res.Campaign
	return campaignView{
		ProviderWorkers: ans.Serving.Live, Warnings: warnings(res), ListUnsubscribe: cm.ListUnsubscribe,
		NextSteps: a.steps(c, cm.ID, approval.NextSteps(cm, ans.Decision, ans.Counts, ans.Serving, a.cfg.Approval.Now())), Approvals: ans.Approvals,
		ID: cm.ID, Name: cm.Name, State: cm.State, Provider: cm.Provider,
		PlanHash: res.PlanHash, PlanVersion: cm.Version, RequiredApprovals: cm.RequiredApprovals,
		ScheduledAt: cm.ScheduledAt, Payload: res.Draft.Payload, Counts: ans.Counts, Outcome: approval.OutcomeOf(cm, ans.Counts),
		ApprovalURL: a.baseURL(c) + "/campaigns/" + cm.ID + "/approval",
		CreatedAt:   cm.CreatedAt, UpdatedAt: cm.UpdatedAt, ArchivedAt: cm.ArchivedAt, Import: viewImport(res.Import),
	}, nil
}

func (a *API) answer(c echo.Context, status int, res approval.Result, err error) error {
	if err != nil {
		return a.fail(c, err)
	}
	v, err := a.view(c, res)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(status, v)
}

// current reads a campaign as the service reports it.
func (a *API) current(c echo.Context) (approval.Result, error) {
	return a.cfg.Approval.Get(c.Request().Context(), c.Param("id"))
}

type createRequest struct {
	Name              string          `json:"name"`
	Provider          string          `json:"provider"`
	From              string          `json:"from"`
	Subject           string          `json:"subject"`
	Text              string          `json:"text"`
	HTML              string          `json:"html"`
	RequiredApprovals int             `json:"required_approvals"`
	ScheduledAt       *time.Time      `json:"scheduled_at"`
	StartOnApproval   bool            `json:"start_on_approval"`
	Targets           json.RawMessage `json:"targets"`
	// ListUnsubscribe: each message carries a one-click unsubscribe link
	// (default true); false makes the campaign transactional.
	ListUnsubscribe *bool `json:"list_unsubscribe"`
}

func (a *API) createCampaign(c echo.Context, actor auth.Actor) error {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, a.cfg.MaxJSONBytes))
	if err != nil {
		return a.fail(c, jsonError(err))
	}
	c.Request().Body = io.NopCloser(bytes.NewReader(raw))
	var req createRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	p := approval.CreateParams{
		Name: req.Name, Provider: req.Provider, ScheduledAt: req.ScheduledAt, StartOnApproval: req.StartOnApproval,
		RequiredApprovals: req.RequiredApprovals,
		Payload:           plan.Payload{From: req.From, Subject: req.Subject, Text: req.Text, HTML: req.HTML},
		Transactional:     req.ListUnsubscribe != nil && !*req.ListUnsubscribe,
	}
	if t := bytes.TrimSpace(req.Targets); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		p.Targets = &approval.TargetsParams{Format: plan.FormatJSON, Body: bytes.NewReader(t)}
	}
	if key := c.Request().Header.Get("Idempotency-Key"); key != "" {
		if len(key) > 255 {
			return writeError(c, http.StatusBadRequest, "invalid", "the Idempotency-Key header is longer than 255 characters")
		}
		sum := sha256.Sum256(raw)
		p.IdempotencyKey, p.RequestHash = key, hex.EncodeToString(sum[:])
	}
	res, err := a.cfg.Approval.Create(c.Request().Context(), actor, p)
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if err == nil {
		c.Response().Header().Set("Location", Prefix+"/campaigns/"+res.Campaign.ID)
	}
	return a.answer(c, status, res, err)
}

func (a *API) getCampaign(c echo.Context, _ auth.Actor) error {
	res, err := a.current(c)
	return a.answer(c, http.StatusOK, res, err)
}

type editRequest struct {
	From    *string `json:"from"`
	Subject *string `json:"subject"`
	Text    *string `json:"text"`
	HTML    *string `json:"html"`
}

// editCampaign changes the draft's payload; the fields given replace the
// current ones. On an approved or running campaign it starts a new version
// that needs a new approval.
func (a *API) editCampaign(c echo.Context, actor auth.Actor) error {
	var req editRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	p := cur.Draft.Payload
	for _, f := range []struct {
		dst *string
		src *string
	}{{&p.From, req.From}, {&p.Subject, req.Subject}, {&p.Text, req.Text}, {&p.HTML, req.HTML}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	res, err := a.cfg.Approval.Edit(c.Request().Context(), actor, cur.Campaign.ID, p)
	return a.answer(c, http.StatusOK, res, err)
}

// importTargets takes text/csv or the JSON list; ?append=true adds to the
// draft's list, ?address_column= names the CSV's address column, and the
// Content-Type's charset its encoding (text/csv; charset=iso-8859-1 or
// windows-1252; default UTF-8).
func (a *API) importTargets(c echo.Context, actor auth.Actor) error {
	ct := c.Request().Header.Get("Content-Type")
	media, params, _ := mime.ParseMediaType(ct)
	var format plan.Format
	switch media {
	case "text/csv":
		format = plan.FormatCSV
	case "application/json":
		format = plan.FormatJSON
	default:
		return writeError(c, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("send the target list as text/csv or application/json, not %q", ct))
	}
	encoding, err := plan.ParseEncoding(params["charset"])
	if err != nil {
		return writeError(c, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("the charset of %q is not one a list may be in: send utf-8, iso-8859-1 or windows-1252", ct))
	}
	appendList, err := boolParam(c, "append")
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.ImportTargets(c.Request().Context(), actor, c.Param("id"), approval.TargetsParams{
		Format: format, Body: c.Request().Body, AddressColumn: c.QueryParam("address_column"), Encoding: encoding, Append: appendList,
	})
	return a.answer(c, http.StatusOK, res, err)
}

func boolParam(c echo.Context, name string) (bool, error) {
	v := c.QueryParam(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &onceplan.FieldError{Field: name, Reason: fmt.Sprintf("must be true or false, not %q", v)}
	}
	return b, nil
}

type targetsPage struct {
	Items []targetItem `json:"items"`
	Next  *string      `json:"next"`
	// ScannedTo is set when a filtered page stopped early to keep the
	// request short: the list was searched up to this ordinal; "next"
	// continues from there.
	ScannedTo int `json:"scanned_to,omitempty"`
}

// targetItem is one target of the list: audit.TargetRow (its JSON names
// are the export's columns), and updated_at, the name this API gave
// last_at before the row carried the export's columns, kept for clients.
type targetItem struct {
	audit.TargetRow
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// The target cursor is opaque to clients: base64 of the position the
// previous page ended at (an ordinal, or an address when searching).
func encodeCursor(after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a:" + after))
}

func decodeCursor(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(b), "a:"); ok {
			return rest, nil
		}
	}
	return "", &onceplan.FieldError{Field: "after", Reason: "is not a cursor this API gave out (use the previous page's \"next\")"}
}

func intParam(c echo.Context, name string) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &onceplan.FieldError{Field: name, Reason: fmt.Sprintf("must be an integer, not %q", v)}
	}
	return n, nil
}

// pageBudget bounds the time a filtered target page may scan; the page
// then ends early with a cursor (see audit.QueryTargets).
const pageBudget = 40 * time.Millisecond

func (a *API) listTargets(c echo.Context, _ auth.Actor) error {
	after, err := decodeCursor(c.QueryParam("after"))
	if err != nil {
		return a.fail(c, err)
	}
	limit, err := intParam(c, "limit")
	if err != nil {
		return a.fail(c, err)
	}
	if c.QueryParams().Has("limit") && (limit < 1 || limit > 1000) {
		return a.fail(c, &onceplan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 1000, not %d", limit)})
	}
	if limit == 0 {
		limit = 100
	}
	state := c.QueryParam("state")
	if state != "" && !slices.Contains(audit.ValidStates, state) {
		return a.fail(c, &onceplan.FieldError{Field: "state", Reason: fmt.Sprintf("%q is not one of %v", state, audit.ValidStates)})
	}
	prefix := strings.ToLower(strings.TrimSpace(c.QueryParam("q")))
	if prefix == "" {
		if _, err := strconv.Atoi(after); after != "" && err != nil {
			return a.fail(c, &onceplan.FieldError{Field: "after", Reason: "is not a cursor this API gave out (use the previous page's \"next\")"})
		}
	}
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	ctx := c.Request().Context()
	listID, count, err := approval.ListOf(ctx, a.cfg.Pool, cur.Campaign)
	if err != nil {
		return a.fail(c, err)
	}
	page := targetsPage{Items: []targetItem{}}
	if listID != 0 {
		p, err := audit.QueryTargets(ctx, a.cfg.Pool, audit.TargetQuery{
			ListID: listID, Count: count, State: state, Prefix: prefix, After: after, Limit: limit,
			Budget: pageBudget, StateCount: -1,
		})
		if err != nil {
			return a.fail(c, err)
		}
		for _, r := range p.Rows {
			page.Items = append(page.Items, targetItem{TargetRow: r, UpdatedAt: r.LastAt})
		}
		page.ScannedTo = p.ScannedTo
		if p.Next != "" {
			next := encodeCursor(p.Next)
			page.Next = &next
		}
	}
	return c.JSON(http.StatusOK, page)
}

type campaignsPage struct {
	Items []campaignSummary `json:"items"`
	Next  *string           `json:"next"`
}

type campaignSummary struct {
	ID       string         `json:"id"`
	Name     string         `json:"name"`
	State    approval.State `json:"state"`
	Provider string         `json:"provider"`
	// Outcome is GET /campaigns/{id}'s, from the same counts.
	Outcome   *approval.Outcome `json:"outcome"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// listCampaigns pages campaigns newest first, keyed by (created_at, id).
func (a *API) listCampaigns(c echo.Context, _ auth.Actor) error {
	limit, err := intParam(c, "limit")
	if err != nil {
		return a.fail(c, err)
	}
	if c.QueryParams().Has("limit") && (limit < 1 || limit > 200) {
		return a.fail(c, &onceplan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 200, not %d", limit)})
	}
	if limit == 0 {
		limit = 50
	}
	var after *approval.CampaignCursor
	if s := c.QueryParam("after"); s != "" {
		cur, err := approval.ParseCampaignCursor(s)
		if err != nil {
			return a.fail(c, err)
		}
		after = &cur
	}
	list, next, err := approval.PageCampaigns(c.Request().Context(), a.cfg.Pool, after, limit)
	if err != nil {
		return a.fail(c, err)
	}
	page := campaignsPage{Items: []campaignSummary{}}
	for _, cm := range list {
		sum := campaignSummary{ID: cm.ID, Name: cm.Name, State: cm.State, Provider: cm.Provider, CreatedAt: cm.CreatedAt, UpdatedAt: cm.UpdatedAt}
		if cm.PlanID != 0 && (cm.State == approval.StateCompleted || cm.State == approval.StateCancelled) {
			k, err := a.cfg.Counts.CampaignCounts(c.Request().Context(), a.cfg.Pool, cm)
			if err != nil {
				return a.fail(c, err)
			}
			sum.Outcome = approval.OutcomeOf(cm, k)
		}
		page.Items = append(page.Items, sum)
	}
	if next != nil {
		s := next.String()
		page.Next = &s
	}
	return c.JSON(http.StatusOK, page)
}

func (a *API) submit(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Submit(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

type approveRequest struct {
	PlanHash string `json:"plan_hash"`
}

func (a *API) approve(c echo.Context, actor auth.Actor) error {
	var req approveRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	if req.PlanHash == "" {
		return a.fail(c, &onceplan.FieldError{Field: "plan_hash", Reason: "is required: send the plan hash you reviewed"})
	}
	res, err := a.cfg.Approval.Approve(c.Request().Context(), actor, c.Param("id"), req.PlanHash)
	return a.answer(c, http.StatusOK, res, err)
}

type reasonRequest struct {
	Reason string `json:"reason"`
}

func (a *API) reason(c echo.Context, required bool) (string, error) {
	var req reasonRequest
	if c.Request().ContentLength == 0 && !required {
		return "", nil
	}
	if err := a.decode(c, &req); err != nil {
		return "", err
	}
	if required && strings.TrimSpace(req.Reason) == "" {
		return "", &onceplan.FieldError{Field: "reason", Reason: "is required"}
	}
	return req.Reason, nil
}

func (a *API) reject(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, true)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Reject(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

// noBody accepts an empty body or an empty JSON object.
func (a *API) noBody(c echo.Context) error {
	if c.Request().ContentLength == 0 {
		return nil
	}
	var empty struct{}
	return a.decode(c, &empty)
}

func (a *API) start(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Start(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) pause(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Pause(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) resume(c echo.Context, actor auth.Actor) error {
	if err := a.noBody(c); err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Resume(c.Request().Context(), actor, c.Param("id"))
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) cancel(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Cancel(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

// discard ends a campaign never approved at its proposer's request
// (approval.Service.Discard).
func (a *API) discard(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, false)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.Discard(c.Request().Context(), actor, c.Param("id"), why)
	return a.answer(c, http.StatusOK, res, err)
}

func (a *API) audit(c echo.Context, _ auth.Actor) error {
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	m, err := audit.ForCampaign(c.Request().Context(), a.cfg.Pool, cur.Campaign.ID)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, m)
}

// effectCampaign finds the campaign a key belongs to, for the effect routes.
func (a *API) effectCampaign(c echo.Context) (string, string, error) {
	key := keyParam(c)
	id, err := a.cfg.Approval.CampaignOfKey(c.Request().Context(), key)
	return id, key, err
}

type effectView struct {
	Key      string       `json:"key"`
	Epoch    int          `json:"epoch"`
	State    ledger.State `json:"state,omitempty"`
	Campaign string       `json:"campaign_id"`
}

type resolveRequest struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	// Receipt and Raw are a tool call's (package toolcall): the person's
	// evidence, replayed to the agent.
	Receipt string  `json:"receipt"`
	Raw     *string `json:"raw"`
}

func (a *API) resolve(c echo.Context, actor auth.Actor) error {
	var req resolveRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	var outcome ledger.Outcome
	switch req.Outcome {
	case "delivered":
		outcome = ledger.Delivered
	case "not_delivered":
		outcome = ledger.NotDelivered
	default:
		return a.fail(c, &onceplan.FieldError{Field: "outcome", Reason: fmt.Sprintf("must be \"delivered\" or \"not_delivered\", not %q", req.Outcome)})
	}
	if strings.TrimSpace(req.Reason) == "" {
		return a.fail(c, &onceplan.FieldError{Field: "reason", Reason: "is required: say how you know"})
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err != nil {
			return a.fail(c, err)
		}
		return a.resolveTool(c, actor, outcome, req)
	}
	if req.Receipt != "" || req.Raw != nil {
		field := "receipt"
		if req.Raw != nil {
			field = "raw"
		}
		return a.fail(c, &onceplan.FieldError{Field: field, Reason: "is a tool call's evidence: a campaign target's is uploaded with onceplan resolve --evidence"})
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	eff, err := a.cfg.Approval.ResolveEffect(c.Request().Context(), actor, id, key, outcome, req.Reason)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: eff.Epoch, State: eff.State, Campaign: id})
}

type supersedeRequest struct {
	Target string `json:"target"`
	Reason string `json:"reason"`
}

func (a *API) supersede(c echo.Context, actor auth.Actor) error {
	var req supersedeRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err == nil {
			if err = auth.Authorize(actor, auth.ActionSupersede); err == nil {
				err = errSupersedeTool
			}
		}
		return a.fail(c, err)
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	epoch, err := a.cfg.Approval.SupersedeEffect(c.Request().Context(), actor, id, key, req.Target, req.Reason)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: epoch, State: "", Campaign: id})
}

func (a *API) revoke(c echo.Context, actor auth.Actor) error {
	why, err := a.reason(c, true)
	if err != nil {
		return a.fail(c, err)
	}
	if tool, err := a.toolKey(c); err != nil || tool {
		if err != nil {
			return a.fail(c, err)
		}
		return a.revokeTool(c, actor, why)
	}
	id, key, err := a.effectCampaign(c)
	if err != nil {
		return a.fail(c, err)
	}
	eff, err := a.cfg.Approval.RevokeEffect(c.Request().Context(), actor, id, key, why)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, effectView{Key: key, Epoch: eff.Epoch, State: eff.State, Campaign: id})
}

// baseURL is the base of every absolute URL an answer carries (an
// approval_url, a next step's page, a diff's page): the configured public
// URL (Config.BaseURL, serve's --public-url) and nothing of the request.
// Its Host and X-Forwarded-Proto are whatever the client sent, and a link
// an agent hands its human must lead to this server, not to one the
// request named. The request is not read; the parameter keeps the call
// sites' shape.
func (a *API) baseURL(echo.Context) string {
	return strings.TrimSuffix(a.cfg.BaseURL, "/")
}
