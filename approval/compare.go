package approval

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Against names what a campaign's current version is compared with.
type Against string

// What a version can be compared with.
const (
	// AgainstApproved: the last approved version, the campaign's latest
	// frozen plan.
	AgainstApproved Against = "approved"
	// AgainstPrevious: the previously submitted version, the submission
	// before the one of the current version as it stands (or, when the
	// current version as it stands was never submitted, the latest).
	AgainstPrevious Against = "previous"
)

// ParseAgainst reads the against parameter, naming it when it is neither
// value.
func ParseAgainst(s string) (Against, error) {
	switch a := Against(s); a {
	case AgainstApproved, AgainstPrevious:
		return a, nil
	}
	return "", onceplan.FieldErrorf("against", `must be "approved" (the last approved version) or "previous" (the previously submitted one), not %q`, s)
}

// DiffSide is one version of a comparison.
type DiffSide struct {
	// Kind is SidePlan or SideSubmission for a base; the current version
	// has the campaign's state instead (State).
	Kind        string
	Version     int
	State       State // the current version only
	PlanHash    string
	TargetCount int
	ListID      int64 // 0: no targets yet
	// PlanID is the plan a base was frozen as (0: not approved);
	// SubmissionID the submission it is (0 for a plan found as the
	// campaign's latest).
	PlanID       int64
	SubmissionID int64
	// At is when the base was submitted or frozen.
	At time.Time
	// Payload is nil when it is not kept: a submission made before
	// migration 0022 whose draft was edited afterwards (after a rejection,
	// or an edit while pending) has only its hash, its list and its
	// authors.
	Payload *plan.Payload
	// The per-version settings: a plan row records them; otherwise they
	// are the campaign's (Fixed).
	Provider        string
	Tool            string
	ListUnsubscribe bool
	Fixed           bool
}

// SettingDiff is one setting compared.
type SettingDiff struct {
	Setting string `json:"setting"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Changed bool   `json:"changed"`
	// Fixed: the setting is the campaign's, set when it was created and
	// never changed since (PostgreSQL refuses it), so no two of its
	// versions can differ in it.
	Fixed bool `json:"fixed"`
}

// Comparison is what a diff compares: a campaign's current version and
// the base its against names.
type Comparison struct {
	Campaign Campaign
	Against  Against
	Current  DiffSide
	// Base is nil when there is nothing to compare with (Message says why).
	Base *DiffSide
	// Message is one sentence on what is compared with what.
	Message string
}

// Diff is a campaign's current version compared with another.
type Diff struct {
	Comparison
	// Payload is nil when Base is nil or its payload is not kept.
	Payload []plan.FieldDiff
	// Settings is nil when Base is nil.
	Settings []SettingDiff
	// Targets is zero when Base is nil.
	Targets plan.DiffCounts
	// Done counts the current version's targets already done at their
	// key's current epoch: its run will not send them again.
	Done int
}

// Changes is the number of payload fields and settings that differ and of
// target rows added, removed or changed.
func (d Diff) Changes() int {
	n := d.Targets.Added + d.Targets.Removed + d.Targets.Changed
	for _, f := range d.Payload {
		if f.Changed {
			n++
		}
	}
	for _, s := range d.Settings {
		if s.Changed {
			n++
		}
	}
	return n
}

// Compare finds the two sides of a comparison without comparing them: the
// campaign's current version, and the base against names (nil, with the
// sentence that says why, when there is none). onceplan.ErrNotFound when there is
// no such campaign.
func Compare(ctx context.Context, db onceplan.DB, campaignID string, against Against) (Comparison, error) {
	if _, err := ParseAgainst(string(against)); err != nil {
		return Comparison{}, err
	}
	c, err := GetCampaign(ctx, db, campaignID)
	if errors.Is(err, onceplan.ErrNotFound) {
		return Comparison{}, fmt.Errorf("%w: there is no campaign %s", onceplan.ErrNotFound, campaignID)
	}
	if err != nil {
		return Comparison{}, err
	}
	d, err := GetDraft(ctx, db, c.ID, c.Version)
	if err != nil {
		return Comparison{}, err
	}
	payload := d.Payload
	cmp := Comparison{Campaign: c, Against: against, Current: DiffSide{
		Version: d.Version, State: c.State, PlanHash: d.Hash(c), TargetCount: d.TargetCount, ListID: d.ListID,
		Payload: &payload, Provider: c.Provider, Tool: c.Tool, ListUnsubscribe: c.ListUnsubscribe, Fixed: true,
	}}
	var approved *plan.Plan // the campaign's latest frozen plan, nil: none
	if c.PlanID != 0 {
		p, err := plan.GetPlan(ctx, db, c.PlanID)
		if err != nil {
			return cmp, err
		}
		approved = &p
		if p.Version == c.Version {
			cmp.Current.PlanID = p.ID
			cmp.Current.Provider, cmp.Current.Tool, cmp.Current.ListUnsubscribe, cmp.Current.Fixed = p.Provider, p.Tool, p.ListUnsubscribe, false
		}
	}
	if against == AgainstApproved {
		cmp.Base, cmp.Message = approvedBase(approved, cmp.Current)
	} else {
		cmp.Base, cmp.Message, err = previousBase(ctx, db, c, cmp.Current)
	}
	return cmp, err
}

// approvedBase is the campaign's latest frozen plan p (nil: never
// approved), which Compare has already read.
func approvedBase(p *plan.Plan, cur DiffSide) (*DiffSide, string) {
	if p == nil {
		return nil, fmt.Sprintf("Version %d has never been approved: there is no approved version to compare it with.", cur.Version)
	}
	base := planSide(*p)
	if p.Version == cur.Version {
		return &base, fmt.Sprintf("Version %d is the approved version itself: nothing differs.", cur.Version)
	}
	return &base, fmt.Sprintf("Version %d compared with version %d, the last approved version (approved %s).",
		cur.Version, p.Version, p.CreatedAt.UTC().Format(time.DateTime+" MST"))
}

// previousBase is the submission before the current version's: the latest
// submission when it is of something other than the current version as it
// stands, else the one before it.
func previousBase(ctx context.Context, db onceplan.DB, c Campaign, cur DiffSide) (*DiffSide, string, error) {
	latest, err := latestSubmission(ctx, db, c.ID)
	if errors.Is(err, onceplan.ErrNotFound) {
		return nil, fmt.Sprintf("Version %d is a draft of a campaign never submitted for approval: there is no earlier submission to compare it with.", cur.Version), nil
	}
	if err != nil {
		return nil, "", err
	}
	s := latest
	if latest.Version == cur.Version && latest.PlanHash == cur.PlanHash {
		// The current version as it stands is the latest submission: the
		// previous one is the one before it.
		s, err = scanSubmission(db.QueryRow(ctx, `SELECT `+submissionCols+` FROM submission
			WHERE campaign_id = $1 AND id < $2 ORDER BY id DESC LIMIT 1`, c.ID, latest.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Sprintf("Version %d is the first submission of the campaign: there is no earlier submission to compare it with.", cur.Version), nil
		}
		if err != nil {
			return nil, "", err
		}
	}
	base, err := submissionSide(ctx, db, c, s)
	if err != nil {
		return nil, "", err
	}
	msg := fmt.Sprintf("Version %d compared with version %d as submitted for approval %s.",
		cur.Version, s.Version, s.CreatedAt.UTC().Format(time.DateTime+" MST"))
	if base.Payload == nil {
		msg += " That submission was made before submissions kept their text, and its draft was edited after it (rejected, or changed while pending): its targets are compared, its text cannot be."
	}
	return &base, msg, nil
}

func planSide(p plan.Plan) DiffSide {
	payload := p.Payload
	return DiffSide{Kind: plan.SidePlan, Version: p.Version, PlanHash: p.Hash, TargetCount: p.TargetCount, ListID: p.ListID,
		PlanID: p.ID, At: p.CreatedAt, Payload: &payload, Provider: p.Provider, Tool: p.Tool, ListUnsubscribe: p.ListUnsubscribe}
}

// submissionSide is a submission with what is known of it. Its payload is
// the plan's when it was frozen, else the text the submission kept
// (migration 0022), else — for a submission older than that — its draft's
// when that still hashes to what was submitted (the draft cannot change
// once its campaign moved on: migration 0014), else not kept.
func submissionSide(ctx context.Context, db onceplan.DB, c Campaign, s Submission) (DiffSide, error) {
	side := DiffSide{Kind: plan.SideSubmission, Version: s.Version, PlanHash: s.PlanHash, TargetCount: s.TargetCount, ListID: s.ListID,
		SubmissionID: s.ID, At: s.CreatedAt, Provider: c.Provider, Tool: c.Tool, ListUnsubscribe: c.ListUnsubscribe, Fixed: true}
	p, err := plan.PlanOf(ctx, db, c.ID, s.Version, s.PlanHash)
	switch {
	case err == nil:
		payload := p.Payload
		side.PlanID, side.Payload = p.ID, &payload
		side.Provider, side.Tool, side.ListUnsubscribe, side.Fixed = p.Provider, p.Tool, p.ListUnsubscribe, false
		return side, nil
	case !errors.Is(err, onceplan.ErrNotFound):
		return side, err
	}
	if s.Payload != nil {
		payload := *s.Payload
		side.Payload = &payload
		return side, nil
	}
	d, err := GetDraft(ctx, db, c.ID, s.Version)
	if err != nil {
		return side, err
	}
	if d.Hash(c) == s.PlanHash {
		payload := d.Payload
		side.Payload = &payload
	}
	return side, nil
}

// CompareVersions compares a campaign's current version with the base
// against names: the payload line by line, the settings, and the target
// lists (counts only: DiffTargets pages through the rows). onceplan.ErrNotFound
// when there is no such campaign.
func CompareVersions(ctx context.Context, db onceplan.DB, campaignID string, against Against) (Diff, error) {
	cmp, err := Compare(ctx, db, campaignID, against)
	if err != nil {
		return Diff{}, err
	}
	done, err := plan.DoneCount(ctx, db, cmp.Current.ListID)
	if err != nil {
		return Diff{Comparison: cmp}, err
	}
	return cmp.Diff(ctx, db, done)
}

// Diff compares cmp's two sides, as CompareVersions does, given done: the
// current list's DoneCount (which is the same whatever the base, so two
// comparisons of one version count it once).
func (cmp Comparison) Diff(ctx context.Context, db onceplan.DB, done int) (Diff, error) {
	d := Diff{Comparison: cmp, Done: done}
	if cmp.Base == nil {
		return d, nil
	}
	if cmp.Base.Payload != nil {
		d.Payload = plan.PayloadDiff(*cmp.Base.Payload, *cmp.Current.Payload)
	}
	d.Settings = settingsDiff(cmp.Campaign, *cmp.Base, cmp.Current)
	if cmp.Base.ListID == cmp.Current.ListID {
		// The same list: all unchanged, and Compare already read its size
		// (the count ListDiffCounts would read again).
		d.Targets = plan.DiffCounts{Unchanged: cmp.Current.TargetCount}
		return d, nil
	}
	var err error
	d.Targets, err = plan.ListDiffCounts(ctx, db, cmp.Base.ListID, cmp.Current.ListID)
	return d, err
}

// settingsDiff compares the settings of two versions of campaign c: those
// a plan row records per version (provider, tool, unsubscribe link), and
// the campaign's own, which are the same for every version (required
// approvals, schedule, start on approval). PostgreSQL refuses a change of
// any of them after the create (migration 0014), so only a plan row read
// against another side can show a difference; a setting both sides take
// from the campaign is Fixed.
func settingsDiff(c Campaign, base, cur DiffSide) []SettingDiff {
	s := func(name, b, a string, fixed bool) SettingDiff {
		return SettingDiff{Setting: name, Before: b, After: a, Changed: b != a, Fixed: fixed}
	}
	fromCampaign := base.Fixed && cur.Fixed
	scheduled := ""
	if c.ScheduledAt != nil {
		scheduled = c.ScheduledAt.UTC().Format(time.RFC3339)
	}
	approvals, onApproval := strconv.Itoa(c.RequiredApprovals), strconv.FormatBool(c.StartOnApproval)
	return []SettingDiff{
		s("provider", base.Provider, cur.Provider, fromCampaign),
		s("tool", base.Tool, cur.Tool, fromCampaign),
		s("list_unsubscribe", strconv.FormatBool(base.ListUnsubscribe), strconv.FormatBool(cur.ListUnsubscribe), fromCampaign),
		s("required_approvals", approvals, approvals, true),
		s("scheduled_at", scheduled, scheduled, true),
		s("start_on_approval", onApproval, onApproval, true),
	}
}

// Rows returns one page (after, limit: as DiffRowsQuery has them) of the
// rows of kind between cmp's two lists: DiffTargets of its base and
// current lists. With no base there are no added, removed or changed rows
// (an empty page, not read); done rows are the current list's whatever
// the base. The query is validated first, with or without a base.
func (cmp Comparison) Rows(ctx context.Context, db onceplan.DB, kind plan.RowChange, after string, limit int) (plan.DiffPage, error) {
	q := plan.DiffRowsQuery{Current: cmp.Current.ListID, Kind: kind, After: after, Limit: limit}
	if err := q.Validate(); err != nil {
		return plan.DiffPage{}, err
	}
	if cmp.Base == nil {
		if kind != plan.RowsDone {
			return plan.DiffPage{Rows: []plan.DiffRow{}}, nil // nothing to compare with: no such rows
		}
	} else {
		q.Base = cmp.Base.ListID
	}
	return plan.DiffTargets(ctx, db, q)
}

// FirstPages returns the first page (limit rows) of every kind of row of
// d that has any, keyed by kind; a kind with none has an empty page, and
// is not read.
func FirstPages(ctx context.Context, db onceplan.DB, d Diff, limit int) (map[plan.RowChange]plan.DiffPage, error) {
	out := map[plan.RowChange]plan.DiffPage{}
	for _, k := range plan.RowChanges {
		n := d.Targets.Count(k)
		if k == plan.RowsDone {
			n = d.Done
		}
		if n == 0 {
			out[k] = plan.DiffPage{Rows: []plan.DiffRow{}}
			continue
		}
		p, err := d.Rows(ctx, db, k, "", limit)
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}
