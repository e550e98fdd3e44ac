package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// Sizes of what a comparison shows: the first rows of each kind on the
// approval page and the comparison's page, a page of one kind, and the
// unchanged lines kept around each change of a payload field.
const (
	diffSampleRows  = 10
	diffPageRows    = 100
	diffContextRows = 2
)

// diffURL is the page of a comparison, or with kind of one kind of its
// rows (after: the key the page starts after).
func diffURL(campaignID string, against approval.Against, kind plan.RowChange, after string) string {
	q := url.Values{"against": {string(against)}}
	if kind != "" {
		q.Set("rows", string(kind))
	}
	if after != "" {
		q.Set("after", after)
	}
	return "/campaigns/" + campaignID + "/diff?" + q.Encode()
}

// versionDiff is comparison cmp as a page shows it: the counts, the
// payload line by line and the first rows of each kind; done is the
// current list's plan.DoneCount.
func (s *Server) versionDiff(ctx context.Context, cmp approval.Comparison, done int) (view.VersionDiff, error) {
	against := cmp.Against
	d, err := cmp.Diff(ctx, s.cfg.Pool, done)
	if err != nil {
		return view.VersionDiff{}, err
	}
	first, err := approval.FirstPages(ctx, s.cfg.Pool, d, diffSampleRows)
	if err != nil {
		return view.VersionDiff{}, err
	}
	v := view.VersionDiff{CampaignID: d.Campaign.ID, Against: string(against), Message: d.Message, HasBase: d.Base != nil,
		Unchanged: d.Targets.Unchanged}
	switch {
	case d.Base == nil && against == approval.AgainstApproved:
		v.Title = "Changes since the last approved version"
	case d.Base == nil:
		v.Title = "Changes since the previous submission"
	case against == approval.AgainstApproved:
		v.Title = fmt.Sprintf("Changes since approved version %d", d.Base.Version)
	default:
		v.Title = fmt.Sprintf("Changes since version %d as submitted", d.Base.Version)
	}
	rows := func(k plan.RowChange, count int) view.DiffRows {
		return view.DiffRows{Kind: string(k), Count: count, Rows: diffRowViews(first[k].Rows), All: diffURL(d.Campaign.ID, against, k, "")}
	}
	v.Added, v.Removed, v.Changed = rows(plan.RowsAdded, d.Targets.Added), rows(plan.RowsRemoved, d.Targets.Removed), rows(plan.RowsChanged, d.Targets.Changed)
	v.Done = rows(plan.RowsDone, d.Done)
	if d.Base != nil && d.Base.Payload != nil {
		v.PayloadKept = true
		for _, f := range d.Payload {
			v.Payload = append(v.Payload, view.DiffFieldView{Field: f.Field, Changed: f.Changed, Lines: collapseLines(f.Lines, diffContextRows)})
		}
	}
	for _, st := range d.Settings {
		v.Settings = append(v.Settings, view.DiffSettingView{Setting: st.Setting, Before: st.Before, After: st.After, Changed: st.Changed, Fixed: st.Fixed})
	}
	return v, nil
}

// approvalDiffs are the comparisons the approval page shows: against the
// last approved version, and against the previous submission when that
// is another version than the approved one.
func (s *Server) approvalDiffs(ctx context.Context, camp approval.Campaign) ([]view.VersionDiff, error) {
	approved, err := approval.Compare(ctx, s.cfg.Pool, camp.ID, approval.AgainstApproved)
	if err != nil {
		return nil, err
	}
	previous, err := approval.Compare(ctx, s.cfg.Pool, camp.ID, approval.AgainstPrevious)
	if err != nil {
		return nil, err
	}
	done, err := plan.DoneCount(ctx, s.cfg.Pool, approved.Current.ListID)
	if err != nil {
		return nil, err
	}
	var out []view.VersionDiff
	// The approved version itself tells an approver nothing new.
	if approved.Base == nil || approved.Base.Version != approved.Current.Version {
		v, err := s.versionDiff(ctx, approved, done)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	same := approved.Base != nil && previous.Base != nil &&
		approved.Base.Version == previous.Base.Version && approved.Base.PlanHash == previous.Base.PlanHash
	if previous.Base != nil && !same {
		v, err := s.versionDiff(ctx, previous, done)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// collapseLines keeps the changed lines of a field's diff and context
// unchanged lines around each; a longer run of unchanged lines becomes one
// "skip" line saying how many.
func collapseLines(lines []plan.DiffLine, context int) []view.DiffLineView {
	var out []view.DiffLineView
	for i := 0; i < len(lines); {
		if lines[i].Op != plan.LineEqual {
			out = append(out, view.DiffLineView{Op: string(lines[i].Op), Text: lines[i].Text})
			i++
			continue
		}
		j := i
		for j < len(lines) && lines[j].Op == plan.LineEqual {
			j++
		}
		// lines[i:j] are unchanged: keep context after a change (i > 0)
		// and before one (j < len).
		keepHead, keepTail := 0, 0
		if i > 0 {
			keepHead = context
		}
		if j < len(lines) {
			keepTail = context
		}
		if j-i <= keepHead+keepTail+1 {
			keepHead, keepTail = j-i, 0
		}
		for k := i; k < i+keepHead; k++ {
			out = append(out, view.DiffLineView{Op: string(plan.LineEqual), Text: lines[k].Text})
		}
		if skipped := j - i - keepHead - keepTail; skipped > 0 {
			out = append(out, view.DiffLineView{Op: "skip", Skipped: skipped})
		}
		for k := j - keepTail; k < j; k++ {
			out = append(out, view.DiffLineView{Op: string(plan.LineEqual), Text: lines[k].Text})
		}
		i = j
	}
	return out
}

func diffRowViews(rows []plan.DiffRow) []view.DiffRowView {
	out := make([]view.DiffRowView, 0, len(rows))
	for _, r := range rows {
		v := view.DiffRowView{Key: r.Key, Ordinal: r.Ordinal, Target: r.Target, Vars: varsText(r.Vars)}
		if r.Before != nil {
			v.BeforeOrdinal, v.BeforeVars = r.Before.Ordinal, varsText(r.Before.Vars)
		}
		out = append(out, v)
	}
	return out
}

// varsText shows a target's variables as JSON, names in order.
func varsText(vars map[string]string) string {
	b, _ := json.Marshal(vars) // a map of strings always encodes
	return string(b)
}

// handleDiff shows a comparison (GET /campaigns/:id/diff?against=), or
// with rows= one kind of its target rows a page at a time (after=: the
// previous page's last key). Anyone signed in may look, as at the
// campaign.
func (s *Server) handleDiff(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	against := approval.AgainstApproved
	if c.QueryParams().Has("against") {
		if against, err = approval.ParseAgainst(c.QueryParam("against")); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	cmp, err := approval.Compare(ctx, s.cfg.Pool, camp.ID, against)
	if err != nil {
		return err
	}
	if !c.QueryParams().Has("rows") {
		done, err := plan.DoneCount(ctx, s.cfg.Pool, cmp.Current.ListID)
		if err != nil {
			return err
		}
		d, err := s.versionDiff(ctx, cmp, done)
		if err != nil {
			return err
		}
		return s.render(c, http.StatusOK, view.Diff(view.DiffPage{Page: s.page(c, "What changed: "+camp.Name, "campaigns"),
			Campaign: campaignView(camp), Diff: d}))
	}
	kind, err := plan.ParseRowChange(c.QueryParam("rows"))
	if err != nil {
		return err
	}
	after := c.QueryParam("after")
	page, err := cmp.Rows(ctx, s.cfg.Pool, kind, after, diffPageRows)
	if err != nil {
		return err
	}
	p := view.DiffRowsPage{Page: s.page(c, "What changed: "+camp.Name, "campaigns"), Campaign: campaignView(camp),
		Against: string(against), Kind: string(kind), Message: cmp.Message, Rows: diffRowViews(page.Rows),
		Back: diffURL(camp.ID, against, "", "")}
	if after != "" {
		p.First = diffURL(camp.ID, against, kind, "")
	}
	if page.Next != "" {
		p.Next = diffURL(camp.ID, against, kind, page.Next)
	}
	return s.render(c, http.StatusOK, view.DiffRowsList(p))
}
