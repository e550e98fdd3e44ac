package plan

// What changed between two versions of a campaign: the payload
// line by line, the settings, and the target lists — diffed by key in
// PostgreSQL, never loaded into memory, so that two versions of a million
// targets compare in seconds and their rows page by page
// (docs/BENCHMARKS.md, "Diff").

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
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
	return "", fieldErr("against", `must be "approved" (the last approved version) or "previous" (the previously submitted one), not %q`, s)
}

// RowChange is one kind of target row a diff lists.
type RowChange string

// The kinds of rows a diff pages through.
const (
	RowsAdded   RowChange = "added"   // in the current version's list, not in the base's
	RowsRemoved RowChange = "removed" // in the base's list, not in the current version's
	RowsChanged RowChange = "changed" // in both, with other variables
	// RowsDone: in the current version's list with an effect already done
	// at the key's current epoch, so not sent again (docs/ARCHITECTURE.md,
	// "Versions and epochs").
	RowsDone RowChange = "done"
)

// RowChanges lists the kinds in the order they are shown.
var RowChanges = []RowChange{RowsAdded, RowsRemoved, RowsChanged, RowsDone}

// ParseRowChange reads the rows parameter, naming it when it is not a kind.
func ParseRowChange(s string) (RowChange, error) {
	for _, k := range RowChanges {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fieldErr("rows", `must be "added", "removed", "changed" or "done", not %q`, s)
}

// Side kinds: what a diff's base is.
const (
	SidePlan       = "plan"       // a frozen plan (an approved version)
	SideSubmission = "submission" // a submission (not necessarily approved)
)

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
	Payload *Payload
	// The per-version settings: a plan row records them; otherwise they
	// are the campaign's (Fixed).
	Provider        string
	Tool            string
	ListUnsubscribe bool
	Fixed           bool
}

// DiffLine is one line of a field's line diff.
type DiffLine struct {
	Op   LineOp `json:"op"`
	Text string `json:"text"`
}

// LineOp says what happened to a line.
type LineOp string

// Line operations.
const (
	LineEqual   LineOp = "equal"
	LineAdded   LineOp = "added"
	LineRemoved LineOp = "removed"
)

// FieldDiff is one payload field compared line by line.
type FieldDiff struct {
	Field   string     `json:"field"` // from, subject, text, html
	Changed bool       `json:"changed"`
	Lines   []DiffLine `json:"lines"` // every line, the unchanged ones too; empty when unchanged
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

// DiffCounts counts the target changes between two lists.
type DiffCounts struct {
	Added     int `json:"added"`
	Removed   int `json:"removed"`
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
}

// Count is the number of rows of kind k (Done is not a list change: ask
// DoneCount).
func (c DiffCounts) Count(k RowChange) int {
	switch k {
	case RowsAdded:
		return c.Added
	case RowsRemoved:
		return c.Removed
	case RowsChanged:
		return c.Changed
	}
	return 0
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
	Payload []FieldDiff
	// Settings is nil when Base is nil.
	Settings []SettingDiff
	// Targets is zero when Base is nil.
	Targets DiffCounts
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
	var approved *Plan // the campaign's latest frozen plan, nil: none
	if c.PlanID != 0 {
		p, err := GetPlan(ctx, db, c.PlanID)
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
func approvedBase(p *Plan, cur DiffSide) (*DiffSide, string) {
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
	latest, err := LatestSubmission(ctx, db, c.ID)
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

func planSide(p Plan) DiffSide {
	payload := p.Payload
	return DiffSide{Kind: SidePlan, Version: p.Version, PlanHash: p.Hash, TargetCount: p.TargetCount, ListID: p.ListID,
		PlanID: p.ID, At: p.CreatedAt, Payload: &payload, Provider: p.Provider, Tool: p.Tool, ListUnsubscribe: p.ListUnsubscribe}
}

// submissionSide is a submission with what is known of it. Its payload is
// the plan's when it was frozen, else the text the submission kept
// (migration 0022), else — for a submission older than that — its draft's
// when that still hashes to what was submitted (the draft cannot change
// once its campaign moved on: migration 0014), else not kept.
func submissionSide(ctx context.Context, db onceplan.DB, c Campaign, s Submission) (DiffSide, error) {
	side := DiffSide{Kind: SideSubmission, Version: s.Version, PlanHash: s.PlanHash, TargetCount: s.TargetCount, ListID: s.ListID,
		SubmissionID: s.ID, At: s.CreatedAt, Provider: c.Provider, Tool: c.Tool, ListUnsubscribe: c.ListUnsubscribe, Fixed: true}
	p, err := scanPlan(db.QueryRow(ctx, `SELECT `+planCols+` FROM plan WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3`,
		c.ID, s.Version, s.PlanHash))
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
	done, err := DoneCount(ctx, db, cmp.Current.ListID)
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
		d.Payload = PayloadDiff(*cmp.Base.Payload, *cmp.Current.Payload)
	}
	d.Settings = settingsDiff(cmp.Campaign, *cmp.Base, cmp.Current)
	if cmp.Base.ListID == cmp.Current.ListID {
		// The same list: all unchanged, and Compare already read its size
		// (the count ListDiffCounts would read again).
		d.Targets = DiffCounts{Unchanged: cmp.Current.TargetCount}
		return d, nil
	}
	var err error
	d.Targets, err = ListDiffCounts(ctx, db, cmp.Base.ListID, cmp.Current.ListID)
	return d, err
}

// PayloadDiff compares two payloads field by field, line by line.
func PayloadDiff(before, after Payload) []FieldDiff {
	field := func(name, b, a string) FieldDiff {
		f := FieldDiff{Field: name, Changed: b != a, Lines: []DiffLine{}}
		if f.Changed {
			f.Lines = LineDiff(b, a)
		}
		return f
	}
	return []FieldDiff{
		field("from", before.From, after.From),
		field("subject", before.Subject, after.Subject),
		field("text", before.Text, after.Text),
		field("html", before.HTML, after.HTML),
	}
}

// LineDiff compares two texts line by line (go-diff's line mode): every
// line of both, in order, each equal, removed (only in before) or added
// (only in after). A text that does not end in a line break is read as if
// it did, so that the last line is not shown as changed for that alone.
func LineDiff(before, after string) []DiffLine {
	dmp := diffmatchpatch.New()
	a, b := finalNewline(before), finalNewline(after)
	ca, cb, lines := dmp.DiffLinesToChars(a, b)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(ca, cb, false), lines)
	out := []DiffLine{}
	for _, d := range diffs {
		op := LineEqual
		switch d.Type {
		case diffmatchpatch.DiffInsert:
			op = LineAdded
		case diffmatchpatch.DiffDelete:
			op = LineRemoved
		}
		for _, line := range strings.SplitAfter(d.Text, "\n") {
			if line != "" {
				out = append(out, DiffLine{Op: op, Text: strings.TrimSuffix(line, "\n")})
			}
		}
	}
	return out
}

func finalNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
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

// The list diff's SQL. Both lists are read by their (list_id, key) index
// or scanned once; no statement loads a list into the Go process.
//
// listDiffCountsSQL joins the base list ($1) to the current one ($2) by
// key, once: a hash join (parallel where the server allows) of a million
// rows to a million takes about a second, where a merge join over the key
// index would fetch every row's variables from the heap in key order
// (random reads) or sort both lists. Only the base side is joined: the
// current list's size (its target_list row, written with the list) minus
// the keys found in both is what was added, which spares an anti-join of
// the current list against the base.
const listDiffCountsSQL = `
SELECT count(*) FILTER (WHERE n.key IS NULL) AS removed,
       count(*) FILTER (WHERE n.vars <> o.vars) AS changed,
       count(n.key) AS kept,
       coalesce((SELECT l.target_count FROM target_list l WHERE l.id = $2), 0) AS current_count
FROM target o LEFT JOIN target n ON n.list_id = $2 AND n.key = o.key
WHERE o.list_id = $1`

// doneSQL is the SQL condition that target t's key has an effect done at
// its current epoch (the ledger's own expression of the epoch): the
// ledger's unique index holds it, so no run of any version sends it again.
// A page asks it of the rows it walks, one key at a time.
var doneSQL = `EXISTS (SELECT 1 FROM effect e WHERE e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
	AND e.epoch = ` + ledger.CurrentEpochOf("t.key") + `)`

// doneCountSQL counts the targets of list $1 done at their current epoch,
// as doneSQL says, with the epoch of every key at once
// (ledger.CurrentEpochsJoin): a join of the list to the done effects. A
// key has at most one done effect at an epoch (the ledger's unique index
// of blocking attempts), so each target counts once.
var doneCountSQL = func() string {
	join, epoch := ledger.CurrentEpochsJoin("t.key", "cur")
	return `SELECT count(*) FROM target t
JOIN effect e ON e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
` + join + `
WHERE t.list_id = $1 AND e.epoch = ` + epoch
}()

// A page of one kind of row is found in key order after the key @after,
// up to the key @last, in one of two ways (DiffTargets picks):
//
//   - walking: the list is read along its (list_id, key) index, and each
//     row looked up in the other list (or the ledger) by key, until the
//     page is full. At 1% of rows changed, a page of 100 reads about
//     10,000 index entries (quick at 1,000,000 targets), wherever in
//     the list they are — in ordinal order, a page of targets appended at
//     the end of a million would probe the whole list first. But a kind
//     with few rows would be walked from end to end, a probe per target
//     (seconds for one target added to a million);
//   - joining: both lists hashed whole and what is left sorted, a
//     constant cost at 1,000,000 targets whatever the number of rows.
//
// So a page walks a window of targets (DefaultDiffWindow), and joins only
// for what is past it when the window did not fill the page: at most a
// walk plus a join a page, and only the walk when the kind is not rare
// (docs/BENCHMARKS.md, "Diff").
//
// The NOT EXISTS of the walks of added and removed carry OFFSET 0, which
// keeps PostgreSQL from turning them into an anti-join: it estimates that
// almost every row has its match, and then prefers the join to a walk
// that stops after the page. The joins are forced by the settings
// joinSettings gives their transaction. Each statement selects the row's
// key, ordinal, address and variables, and for a changed row its ordinal
// and variables in the base list.
var (
	diffWalkSQL = map[RowChange]string{
		RowsAdded: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last
  AND NOT EXISTS (SELECT 1 FROM target o WHERE o.list_id = @base AND o.key = t.key OFFSET 0)
ORDER BY t.key LIMIT @limit`,
		RowsRemoved: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
WHERE t.list_id = @base AND t.key > @after AND t.key <= @last
  AND NOT EXISTS (SELECT 1 FROM target n WHERE n.list_id = @current AND n.key = t.key OFFSET 0)
ORDER BY t.key LIMIT @limit`,
		RowsChanged: diffChangedSQL,
		RowsDone: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last AND ` + doneSQL + `
ORDER BY t.key LIMIT @limit`,
	}
	diffJoinSQL = map[RowChange]string{
		RowsAdded: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last
  AND NOT EXISTS (SELECT 1 FROM target o WHERE o.list_id = @base AND o.key = t.key)
ORDER BY t.key LIMIT @limit`,
		RowsRemoved: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
WHERE t.list_id = @base AND t.key > @after AND t.key <= @last
  AND NOT EXISTS (SELECT 1 FROM target n WHERE n.list_id = @current AND n.key = t.key)
ORDER BY t.key LIMIT @limit`,
		RowsChanged: diffChangedSQL,
		RowsDone: func() string {
			join, epoch := ledger.CurrentEpochsJoin("t.key", "cur")
			return `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
JOIN effect e ON e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
` + join + `
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last AND e.epoch = ` + epoch + `
ORDER BY t.key LIMIT @limit`
		}(),
	}
	// diffWindowSQL finds the last key of the window a walk reads: the
	// @window-th key after @after of list @list (none: the list ends
	// within the window). An index-only scan.
	diffWindowSQL = `SELECT t.key FROM target t WHERE t.list_id = @list AND t.key > @after ORDER BY t.key OFFSET @window - 1 LIMIT 1`
)

// diffChangedSQL is a changed row's page, walked or joined alike: the
// planner walks both lists side by side (a merge join) within a window,
// and hashes them when joinSettings forbids the rest.
const diffChangedSQL = `
SELECT t.key, t.ordinal, t.target, t.vars, o.ordinal, o.vars FROM target t
JOIN target o ON o.list_id = @base AND o.key = t.key
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last AND o.vars <> t.vars
ORDER BY t.key LIMIT @limit`

// DefaultDiffWindow is DiffRowsQuery.Window's default: how many targets a
// page walks before it joins instead (a fraction of a join's cost).
const DefaultDiffWindow = 20_000

// diffPastLastKey is greater than every key (they all start "v1:"): the
// last key of a range that goes to the end of the list.
const diffPastLastKey = "v2"

// joinSettings make the planner hash the two lists of a join: a nested
// loop or a merge join of a million rows to a million is what the walk
// already gave up on.
var joinSettings = []string{`SET LOCAL enable_nestloop = off`, `SET LOCAL enable_mergejoin = off`}

// noJIT is set for the counts' transaction: the planner's cost of a
// million-row join buys an LLVM compilation that takes longer than the
// join itself.
const noJIT = `SET LOCAL jit = off`

// ListDiffCounts counts the targets added to, removed from and changed
// (same key, other variables) between the lists base and current (0: no
// list, which has no targets). Two lists are diffed by key in PostgreSQL;
// the same list twice is not read at all.
func ListDiffCounts(ctx context.Context, db onceplan.DB, base, current int64) (DiffCounts, error) {
	var c DiffCounts
	if base == current {
		var n int
		err := db.QueryRow(ctx, `SELECT coalesce((SELECT target_count FROM target_list WHERE id = $1), 0)`, base).Scan(&n)
		c.Unchanged = n
		return c, err
	}
	var kept, currentCount int
	err := withoutJIT(ctx, db, func(q onceplan.DB) error {
		return q.QueryRow(ctx, listDiffCountsSQL, base, current).Scan(&c.Removed, &c.Changed, &kept, &currentCount)
	})
	c.Added, c.Unchanged = currentCount-kept, kept-c.Changed
	return c, err
}

// DoneCount counts the targets of list listID (0: none) already done at
// their key's current epoch: a run of the list sends them nothing.
func DoneCount(ctx context.Context, db onceplan.DB, listID int64) (int, error) {
	if listID == 0 {
		return 0, nil
	}
	var n int
	err := withoutJIT(ctx, db, func(q onceplan.DB) error { return q.QueryRow(ctx, doneCountSQL, listID).Scan(&n) })
	return n, err
}

// withoutJIT runs f in a transaction with JIT off (and settings, each a
// SET LOCAL statement), when db can begin one (a pool, or a transaction:
// a savepoint); else on db as it is.
func withoutJIT(ctx context.Context, db onceplan.DB, f func(onceplan.DB) error, settings ...string) error {
	b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return f(db)
	}
	return pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		for _, set := range append([]string{noJIT}, settings...) {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		return f(tx)
	})
}

// DiffRow is one target row of a diff.
type DiffRow struct {
	Key string `json:"key"`
	// Ordinal is the row's place in the current version's list (for a
	// removed row, in the base's).
	Ordinal int               `json:"ordinal"`
	Target  string            `json:"target"`
	Vars    map[string]string `json:"vars"`
	// Before is the row in the base list, for a changed row.
	Before *DiffRowBefore `json:"before,omitempty"`
}

// DiffRowBefore is a changed row as the base list has it.
type DiffRowBefore struct {
	Ordinal int               `json:"ordinal"`
	Vars    map[string]string `json:"vars"`
}

// DiffRowsQuery asks for one page of one kind of row.
type DiffRowsQuery struct {
	Base, Current int64 // the lists (0: none)
	Kind          RowChange
	// After is the key the page starts after ("" from the start): the
	// previous page's Next.
	After string
	Limit int
	// Window is how many targets the page walks before it joins the lists
	// instead (see diffWalkSQL); 0: DefaultDiffWindow.
	Window int
}

// Validate checks the query's kind, cursor and limit.
func (q DiffRowsQuery) Validate() error {
	if _, ok := diffWalkSQL[q.Kind]; !ok {
		_, err := ParseRowChange(string(q.Kind))
		return err
	}
	if q.After != "" {
		if _, err := ledger.ParseKey(q.After); err != nil {
			return fieldErr("after", "is not a target key (use the previous page's \"next\")")
		}
	}
	if q.Limit < 1 || q.Limit > MaxDiffRows {
		return fieldErr("limit", "must be between 1 and %d, not %d", MaxDiffRows, q.Limit)
	}
	return nil
}

// MaxDiffRows bounds one page of DiffTargets.
const MaxDiffRows = 1000

// DiffPage is one page of rows; Next is the key to continue after, "" on
// the last page.
type DiffPage struct {
	Rows []DiffRow
	Next string
}

// DiffTargets returns one page of the rows of kind q.Kind, in key order
// (see diffWalkSQL for how it is found). Done rows are the current list's
// (Base is not read).
func DiffTargets(ctx context.Context, db onceplan.DB, q DiffRowsQuery) (DiffPage, error) {
	if err := q.Validate(); err != nil {
		return DiffPage{}, err
	}
	page := DiffPage{Rows: []DiffRow{}}
	if q.Base == q.Current && q.Kind != RowsDone {
		return page, nil // a list does not differ from itself
	}
	list := q.Current
	if q.Kind == RowsRemoved {
		list = q.Base
	}
	args := pgx.NamedArgs{"base": q.Base, "current": q.Current, "after": q.After, "last": diffPastLastKey, "limit": q.Limit + 1}
	var last string
	window := q.Window
	if window <= 0 {
		window = DefaultDiffWindow
	}
	err := db.QueryRow(ctx, diffWindowSQL, pgx.NamedArgs{"list": list, "after": q.After, "window": window}).Scan(&last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		last = "" // the list ends within the window: the walk reads to its end
	case err != nil:
		return page, err
	default:
		args["last"] = last
	}
	if page.Rows, err = diffRows(ctx, db, diffWalkSQL[q.Kind], args, q.Kind, page.Rows); err != nil {
		return page, err
	}
	if len(page.Rows) <= q.Limit && last != "" {
		// The window ended before the page did: the rest by a join.
		args["after"], args["last"], args["limit"] = last, diffPastLastKey, q.Limit+1-len(page.Rows)
		err := withoutJIT(ctx, db, func(tx onceplan.DB) error {
			var err error
			page.Rows, err = diffRows(ctx, tx, diffJoinSQL[q.Kind], args, q.Kind, page.Rows)
			return err
		}, joinSettings...)
		if err != nil {
			return page, err
		}
	}
	if len(page.Rows) > q.Limit {
		page.Rows = page.Rows[:q.Limit]
		page.Next = page.Rows[q.Limit-1].Key
	}
	return page, nil
}

// Rows returns one page (after, limit: as DiffRowsQuery has them) of the
// rows of kind between cmp's two lists: DiffTargets of its base and
// current lists. With no base there are no added, removed or changed rows
// (an empty page, not read); done rows are the current list's whatever
// the base. The query is validated first, with or without a base.
func (cmp Comparison) Rows(ctx context.Context, db onceplan.DB, kind RowChange, after string, limit int) (DiffPage, error) {
	q := DiffRowsQuery{Current: cmp.Current.ListID, Kind: kind, After: after, Limit: limit}
	if err := q.Validate(); err != nil {
		return DiffPage{}, err
	}
	if cmp.Base == nil {
		if kind != RowsDone {
			return DiffPage{Rows: []DiffRow{}}, nil // nothing to compare with: no such rows
		}
	} else {
		q.Base = cmp.Base.ListID
	}
	return DiffTargets(ctx, db, q)
}

// diffRows appends the rows sql selects to out.
func diffRows(ctx context.Context, db onceplan.DB, sql string, args pgx.NamedArgs, kind RowChange, out []DiffRow) ([]DiffRow, error) {
	rows, err := db.Query(ctx, sql, args)
	if err != nil {
		return out, err
	}
	var (
		r             DiffRow
		beforeOrdinal int
		beforeVars    map[string]string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Key, &r.Ordinal, &r.Target, &r.Vars, &beforeOrdinal, &beforeVars}, func() error {
		row := r
		if kind == RowsChanged {
			row.Before = &DiffRowBefore{Ordinal: beforeOrdinal, Vars: beforeVars}
		}
		out = append(out, row)
		r.Vars, beforeVars = nil, nil
		return nil
	})
	return out, err
}

// FirstPages returns the first page (limit rows) of every kind of row of
// d that has any, keyed by kind; a kind with none has an empty page, and
// is not read.
func FirstPages(ctx context.Context, db onceplan.DB, d Diff, limit int) (map[RowChange]DiffPage, error) {
	out := map[RowChange]DiffPage{}
	for _, k := range RowChanges {
		n := d.Targets.Count(k)
		if k == RowsDone {
			n = d.Done
		}
		if n == 0 {
			out[k] = DiffPage{Rows: []DiffRow{}}
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
