package plan

// What changed between two versions of a campaign: the payload
// line by line, the settings, and the target lists — diffed by key in
// PostgreSQL, never loaded into memory, so that two versions of a million
// targets compare in seconds and their rows page by page
// (docs/BENCHMARKS.md, "Diff").

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

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
// its current epoch (the ledger's effect_current_epoch, migration 0029):
// the ledger's unique index holds it, so no run of any version sends it
// again. A page asks it of the rows it walks, one key at a time.
const doneSQL = `EXISTS (SELECT 1 FROM effect e WHERE e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
	AND e.epoch = (SELECT cur.epoch FROM effect_current_epoch(t.key) cur))`

// currentEpochsJoin gives target t's key the latest epoch of its bumps as
// cur.epoch (NULL when it has none; its current epoch is then 0) with the
// epoch of every key at once: the ledger's effect_bumped_epoch (migration
// 0029) hashed once, where effect_current_epoch would probe effect_bump
// once per target.
const currentEpochsJoin = `LEFT JOIN effect_bumped_epoch() cur ON cur.key = t.key`

// doneCountSQL counts the targets of list $1 done at their current epoch,
// as doneSQL says, with the epoch of every key at once
// (currentEpochsJoin): a join of the list to the done effects. A key has
// at most one done effect at an epoch (the ledger's unique index of
// blocking attempts), so each target counts once.
const doneCountSQL = `SELECT count(*) FROM target t
JOIN effect e ON e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
` + currentEpochsJoin + `
WHERE t.list_id = $1 AND e.epoch = coalesce(cur.epoch, 0)`

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
		RowsDone: `
SELECT t.key, t.ordinal, t.target, t.vars, 0, '{}'::jsonb FROM target t
JOIN effect e ON e.key = t.key AND e.state = '` + string(ledger.StateDone) + `'
` + currentEpochsJoin + `
WHERE t.list_id = @current AND t.key > @after AND t.key <= @last AND e.epoch = coalesce(cur.epoch, 0)
ORDER BY t.key LIMIT @limit`,
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

// DefaultSampleWindow is how many of a list's first targets SendSample
// looks through: a sample is a few messages, and a version whose first
// targets were all sent before says so rather than walk a million rows.
const DefaultSampleWindow = 20_000

// SendSample is the first n ordinals of list listID (0: none) that a run
// of it would send now, among its first window targets: those whose key
// has no done effect at its current epoch (doneSQL: an earlier version
// sent them, and none sends them again) and whose address is not
// suppressed (the suppression list's rule, onceplan_suppressed, migration
// 0024). An approver's sample messages are theirs, never those of people
// who will not be mailed.
func SendSample(ctx context.Context, db onceplan.DB, listID int64, n, window int) ([]int, error) {
	if listID == 0 || n <= 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
		SELECT t.ordinal FROM target t
		WHERE t.list_id = $1 AND t.ordinal <= $3
		  AND NOT `+doneSQL+`
		  AND onceplan_suppressed(t.target) IS NULL
		ORDER BY t.ordinal LIMIT $2`, listID, n, window)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
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
