package api

import (
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// Page sizes of GET /campaigns/{id}/diff: the summary's first rows of
// each kind, and a page of one kind (?rows=).
const (
	diffFirstRows   = 10
	diffDefaultPage = 100
)

// diffHead is what every answer of the diff route carries: what is
// compared with what.
type diffHead struct {
	CampaignID string           `json:"campaign_id"`
	Against    approval.Against `json:"against"`
	Message    string           `json:"message"`
	Current    diffCurrent      `json:"current"`
	Base       *diffBaseView    `json:"base"` // null: nothing to compare with
	// URL is the page that shows the same to a person.
	URL string `json:"url"`
}

type diffCurrent struct {
	Version     int            `json:"version"`
	State       approval.State `json:"state"`
	PlanHash    string         `json:"plan_hash"`
	TargetCount int            `json:"target_count"`
}

type diffBaseView struct {
	Kind         string    `json:"kind"`
	Version      int       `json:"version"`
	PlanHash     string    `json:"plan_hash"`
	TargetCount  int       `json:"target_count"`
	PlanID       int64     `json:"plan_id,omitempty"`
	SubmissionID int64     `json:"submission_id,omitempty"`
	At           time.Time `json:"at"`
	// PayloadKept: false for a submission made before submissions kept
	// their text (migration 0022) whose draft was edited after it: payload
	// is null.
	PayloadKept bool `json:"payload_kept"`
}

// diffRowsView is a count with a page of its rows.
type diffRowsView struct {
	Count int            `json:"count"`
	Items []plan.DiffRow `json:"items"`
	Next  *string        `json:"next"`
}

type diffTargets struct {
	Added     diffRowsView `json:"added"`
	Removed   diffRowsView `json:"removed"`
	Changed   diffRowsView `json:"changed"`
	Unchanged int          `json:"unchanged"`
}

// diffSummary is the answer without ?rows=: everything, with the first
// rows of each kind.
type diffSummary struct {
	diffHead
	Payload  []plan.FieldDiff       `json:"payload"`  // null: no base, or its text is not kept
	Settings []approval.SettingDiff `json:"settings"` // null: no base
	Targets  *diffTargets           `json:"targets"`  // null: no base
	Done     diffRowsView           `json:"done"`
}

// diffRowsPage is the answer with ?rows=KIND: one page of that kind.
type diffRowsPage struct {
	diffHead
	Rows  plan.RowChange `json:"rows"`
	Items []plan.DiffRow `json:"items"`
	Next  *string        `json:"next"`
}

func rowsView(count int, p plan.DiffPage) diffRowsView {
	v := diffRowsView{Count: count, Items: p.Rows}
	if p.Next != "" {
		v.Next = &p.Next
	}
	return v
}

// diffParams reads the route's query: against (default approved), rows,
// after, limit.
func diffParams(c echo.Context) (against approval.Against, rows plan.RowChange, after string, limit int, err error) {
	against = approval.AgainstApproved
	if c.QueryParams().Has("against") {
		if against, err = approval.ParseAgainst(c.QueryParam("against")); err != nil {
			return
		}
	}
	if c.QueryParams().Has("rows") {
		if rows, err = plan.ParseRowChange(c.QueryParam("rows")); err != nil {
			return
		}
	}
	if limit, err = intParam(c, "limit"); err != nil {
		return
	}
	if !c.QueryParams().Has("limit") {
		limit = diffFirstRows
		if rows != "" {
			limit = diffDefaultPage
		}
	}
	q := plan.DiffRowsQuery{Kind: rows, After: c.QueryParam("after"), Limit: limit}
	if rows == "" {
		q.Kind = plan.RowsAdded // only the cursor and the limit are checked
	}
	return against, rows, q.After, limit, q.Validate()
}

// diff answers GET /campaigns/{id}/diff: the campaign's current version
// compared with the last approved one or the previous submission; with
// ?rows=, one page of the target rows of one kind. Anyone who may read
// the campaign may ask, agents included.
func (a *API) diff(c echo.Context, _ auth.Actor) error {
	against, rows, after, limit, err := diffParams(c)
	if err != nil {
		return a.fail(c, err)
	}
	ctx, cancel := ctxOf(c)
	defer cancel()
	id := c.Param("id")
	head := func(cmp approval.Comparison) diffHead {
		h := diffHead{CampaignID: cmp.Campaign.ID, Against: against, Message: cmp.Message,
			Current: diffCurrent{Version: cmp.Current.Version, State: cmp.Current.State, PlanHash: cmp.Current.PlanHash, TargetCount: cmp.Current.TargetCount},
			URL:     a.baseURL(c) + "/campaigns/" + cmp.Campaign.ID + "/diff?" + url.Values{"against": {string(against)}}.Encode(),
		}
		if b := cmp.Base; b != nil {
			h.Base = &diffBaseView{Kind: b.Kind, Version: b.Version, PlanHash: b.PlanHash, TargetCount: b.TargetCount,
				PlanID: b.PlanID, SubmissionID: b.SubmissionID, At: b.At, PayloadKept: b.Payload != nil}
		}
		return h
	}
	if rows != "" {
		cmp, err := approval.Compare(ctx, a.cfg.Pool, id, against)
		if err != nil {
			return a.fail(c, err)
		}
		p, err := cmp.Rows(ctx, a.cfg.Pool, rows, after, limit)
		if err != nil {
			return a.fail(c, err)
		}
		v := rowsView(0, p)
		return c.JSON(http.StatusOK, diffRowsPage{diffHead: head(cmp), Rows: rows, Items: v.Items, Next: v.Next})
	}
	d, err := approval.CompareVersions(ctx, a.cfg.Pool, id, against)
	if err != nil {
		return a.fail(c, err)
	}
	first, err := approval.FirstPages(ctx, a.cfg.Pool, d, limit)
	if err != nil {
		return a.fail(c, err)
	}
	out := diffSummary{diffHead: head(d.Comparison), Payload: d.Payload, Settings: d.Settings, Done: rowsView(d.Done, first[plan.RowsDone])}
	if d.Base != nil {
		out.Targets = &diffTargets{
			Added:     rowsView(d.Targets.Added, first[plan.RowsAdded]),
			Removed:   rowsView(d.Targets.Removed, first[plan.RowsRemoved]),
			Changed:   rowsView(d.Targets.Changed, first[plan.RowsChanged]),
			Unchanged: d.Targets.Unchanged,
		}
	}
	return c.JSON(http.StatusOK, out)
}
