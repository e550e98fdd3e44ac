package audit

// The per-target read model: one target of a plan's list with its state
// now, as every reader asks for it — the UI's run and target pages, the
// API's target list, the exports (the UI's downloads and `onceplan audit
// --export`), the reconciliation, and, counted, the campaign's status. The
// SQL is targetRowSQL and listCountsSQL (sql.go), built from the same named
// predicates; every page shape is index-backed so that a page costs the
// same at a million targets as at ten.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// StateNotStarted is the state of a target with no attempt at its key's
// current epoch (the metric counts it as missing).
const StateNotStarted = "not_started"

// StateOutside is the state of a target whose key is held, at its current
// epoch, by an attempt that is not the campaign's own: made outside any
// plan, or for another campaign's (migration 0014; docs/ARCHITECTURE.md,
// "The guarantee against the server's own role"). Such an attempt never
// counts as the target's effect (the metric counts the target missing and
// outside), and while it holds the key the target cannot get one.
const StateOutside = "outside"

// StateSuppressed is the state of a target whose address was suppressed
// (it unsubscribed, bounced hard, complained, or an admin said so) when
// its effect was about to be claimed: it was not sent, and never will be
// for that plan. Its own outcome, not a ledger state: the target has no
// attempt (or only failed or revoked ones), and a record in
// target_suppressed says who, why and when. The metric counts it apart:
// consent overrides the plan.
const StateSuppressed = "suppressed"

// ValidStates are the states a target can be in, as a filter accepts them.
var ValidStates = []string{StateNotStarted, "pending", "done", "unknown", "failed", "stranded", "revoked", StateOutside, StateSuppressed}

// TargetRow is one target of a plan's list as the ledger has it now: the
// attempt that decides its state at its key's current epoch (the blocking
// one, else the newest of the campaign's own), and how many attempts there
// count for it and when they began and last changed. An attempt that is
// not the campaign's own counts only while it holds the key, and then the
// state is StateOutside. The JSON names are the export's columns.
type TargetRow struct {
	Ordinal int    `json:"ordinal"`
	Target  string `json:"target"`
	Key     string `json:"key"`
	Epoch   int    `json:"epoch"`
	// State is the deciding attempt's ledger state, StateOutside, or
	// StateNotStarted.
	State string `json:"state"`
	// Attempts counts the attempts at the current epoch that count.
	Attempts int    `json:"attempts"`
	Receipt  string `json:"receipt"`
	// FirstAt is when the first of them started, LastAt when any of them
	// last changed (UTC); nil when not started.
	FirstAt *time.Time `json:"first_at"`
	LastAt  *time.Time `json:"last_at"`
	// ResolvedBy and ResolutionReason say who settled an unknown and why.
	ResolvedBy       string `json:"resolved_by"`
	ResolutionReason string `json:"resolution_reason"`
	// Reason is why the deciding attempt failed, is unknown or stranded.
	Reason string `json:"reason"`
	// RevokedBy and RevokeReason say who withdrew a done effect and why.
	RevokedBy    string `json:"revoked_by"`
	RevokeReason string `json:"revoke_reason"`
	// Vars are the target's merge variables as JSON (the target page shows
	// them; no export carries them).
	Vars string `json:"-"`
	// Failure is, for a failed target, its deciding attempt's failure (a
	// ledger.Failure: whether it is final, and whether it reached the
	// provider); "" otherwise, or for a failure recorded before finality
	// was. The run page groups failed targets by it.
	Failure string `json:"failure"`
}

// TargetQuery selects a page of a list's targets.
type TargetQuery struct {
	ListID int64
	// Count is the list's size (the end of an ordinal scan).
	Count int
	// State filters by current state ("" for all).
	State string
	// Prefix searches by address prefix (normalised addresses are lower
	// case); results are then in address order.
	Prefix string
	// After is the cursor: an ordinal, or with Prefix an address.
	After string
	Limit int
	// Budget bounds the time a filtered scan may take for one page; the
	// page then ends early with a cursor to continue from.
	Budget time.Duration
	// StateCount, when known (>= 0), is how many targets are in State: it
	// chooses the plan for a state filter — a rare state is found from the
	// ledger's side, a common one by scanning. -1 (or 0 with no counts at
	// hand: use -1) means unknown.
	StateCount int
}

// TargetPage is one page of targets and the cursor of the next.
type TargetPage struct {
	Rows []TargetRow
	// Next is the cursor of the next page, "" at the end.
	Next string
	// ScannedTo is set when a filtered scan stopped early: the ordinal up
	// to which the list was searched.
	ScannedTo int
}

// shape is one page shape of targetRowSQL: its FROM item (a target row
// aliased t), WHERE condition, ORDER BY and LIMIT.
type shape struct{ from, where, order, limit string }

// stateCond filters by the state in $4 (an empty one: all), in the shapes that
// take one.
const stateCond = "($4::text = '' OR " + targetState + " = $4::text)"

var (
	// byOrdinal: the list's primary key (list_id, ordinal) from a cursor.
	byOrdinal = shape{"list_target() t", "t.list_id = $1 AND t.ordinal > $2", "t.ordinal", "$3"}
	// oneOrdinal: one target by the primary key.
	oneOrdinal = shape{"list_target() t", "t.list_id = $1 AND t.ordinal = $2", "t.ordinal", "1"}
	// byPrefix: the (list_id, target) index from a cursor. C.UTF-8
	// collation: code point order, so the prefix range is
	// [prefix, prefix || U+10FFFF).
	byPrefix = shape{"list_target() t",
		"t.list_id = $1 AND t.target >= $2 AND t.target < $2 || chr(1114111) AND t.target > $3 AND " + stateCond,
		"t.target", "$5"}
	// fromLedger: the ledger's rows in state $2, joined to the list by
	// (list_id, key).
	fromLedger = shape{`(
		SELECT DISTINCT t0.* FROM effect_attempt() d JOIN list_target() t0 ON t0.list_id = $1 AND t0.key = d.key
		WHERE d.state = $2::text::effect_state AND t0.ordinal > $3
	) t`, targetState + " = $2::text", "t.ordinal", "$4"}
	// fromSuppressed: the targets recorded as suppressed, joined to the
	// list by (list_id, key) ($2 is the state, as in fromLedger).
	fromSuppressed = shape{`(
		SELECT DISTINCT t0.* FROM target_suppressed_record() s0 JOIN list_target() t0 ON t0.list_id = $1 AND t0.key = s0.key
		WHERE t0.ordinal > $3
	) t`, targetState + " = $2::text", "t.ordinal", "$4"}
	// inWindow: the primary key between two ordinals, filtered.
	inWindow = shape{"list_target() t", "t.list_id = $1 AND t.ordinal > $2 AND t.ordinal <= $3 AND " + stateCond, "t.ordinal", "$5"}
)

// queryRows reads the targets of one shape.
// arch says whether the list's campaign was archived (archivedList).
func queryRows(ctx context.Context, db onceplan.DB, arch bool, s shape, args ...any) ([]TargetRow, error) {
	rows, err := db.Query(ctx, attemptsIn(fmt.Sprintf(targetRowSQL, s.from, s.where, s.order, s.limit), arch), args...)
	if err != nil {
		return nil, err
	}
	var (
		out         []TargetRow
		r           TargetRow
		first, last *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Ordinal, &r.Target, &r.Key, &r.Epoch, &r.State, &r.Attempts, &r.Receipt,
		&first, &last, &r.ResolvedBy, &r.ResolutionReason, &r.Reason, &r.RevokedBy, &r.RevokeReason, &r.Vars, &r.Failure}, func() error {
		r.FirstAt, r.LastAt = utc(first), utc(last)
		out = append(out, r)
		return nil
	})
	return out, err
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// TargetByOrdinal reads one target of a list with its current state.
func TargetByOrdinal(ctx context.Context, db onceplan.DB, listID int64, ordinal int) (TargetRow, error) {
	arch, err := archivedList(ctx, db, listID)
	if err != nil {
		return TargetRow{}, err
	}
	rs, err := queryRows(ctx, db, arch, oneOrdinal, listID, ordinal)
	if err != nil {
		return TargetRow{}, err
	}
	if len(rs) == 0 {
		return TargetRow{}, fmt.Errorf("%w: the plan has no target #%d", onceplan.ErrNotFound, ordinal)
	}
	return rs[0], nil
}

// scanWindow is how many ordinals one filtered-scan query covers.
const scanWindow = 5000

// QueryTargets returns one page of a list's targets with their current
// state. Every shape is index-backed so a page costs the same at a million
// targets as at ten:
//   - no filter: the list's primary key (list_id, ordinal) from the cursor;
//   - pending or unknown: the ledger's partial indexes on those states
//     (in doubt is rare), joined to the list by (list_id, key);
//   - another state that is rare in this plan (under 5% by its counts):
//     the ledger's rows in that state, joined the same way;
//   - a common state: ordinal windows of the primary key, filtered, until
//     the page is full or the time budget is spent (matches are dense);
//   - an address prefix: the (list_id, target) index from the cursor.
func QueryTargets(ctx context.Context, db onceplan.DB, q TargetQuery) (TargetPage, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Budget <= 0 {
		q.Budget = 300 * time.Millisecond
	}
	after, _ := strconv.Atoi(q.After)
	arch, err := archivedList(ctx, db, q.ListID)
	if err != nil {
		return TargetPage{}, err
	}
	switch {
	case q.Prefix != "":
		from := q.After
		if from < q.Prefix {
			from = ""
		}
		return onePage(ctx, db, arch, q.Limit, byPrefix, func(r TargetRow) string { return r.Target },
			q.ListID, q.Prefix, from, q.State, q.Limit+1)
	case q.State == StateSuppressed:
		return onePage(ctx, db, arch, q.Limit, fromSuppressed, ordinalCursor, q.ListID, q.State, after, q.Limit+1)
	case q.State == "pending" || q.State == "unknown" ||
		(q.State != "" && q.State != StateNotStarted && q.State != StateOutside && q.StateCount >= 0 && q.StateCount*20 < q.Count):
		return onePage(ctx, db, arch, q.Limit, fromLedger, ordinalCursor, q.ListID, q.State, after, q.Limit+1)
	case q.State == "":
		return onePage(ctx, db, arch, q.Limit, byOrdinal, ordinalCursor, q.ListID, after, q.Limit+1)
	}
	return scanWindows(ctx, db, arch, q, after)
}

func ordinalCursor(r TargetRow) string { return strconv.Itoa(r.Ordinal) }

// onePage reads a page of one shape, asking for one row more than limit to
// tell whether a next page exists, and names that page's cursor by the
// last row shown.
func onePage(ctx context.Context, db onceplan.DB, arch bool, limit int, s shape, cursor func(TargetRow) string, args ...any) (TargetPage, error) {
	var page TargetPage
	var err error
	if page.Rows, err = queryRows(ctx, db, arch, s, args...); err != nil {
		return page, err
	}
	if len(page.Rows) > limit {
		page.Rows = page.Rows[:limit]
		page.Next = cursor(page.Rows[limit-1])
	}
	return page, nil
}

// scanWindows serves a state without an index of its own: ordinal windows
// from after, until the page is full, the list ends or the budget is spent.
func scanWindows(ctx context.Context, db onceplan.DB, arch bool, q TargetQuery, after int) (TargetPage, error) {
	var page TargetPage
	deadline := time.Now().Add(q.Budget)
	for after < q.Count {
		started := time.Now()
		end := min(after+scanWindow, q.Count)
		got, err := queryRows(ctx, db, arch, inWindow, q.ListID, after, end, q.State, q.Limit+1-len(page.Rows))
		if err != nil {
			return page, err
		}
		page.Rows = append(page.Rows, got...)
		if len(page.Rows) > q.Limit {
			page.Rows = page.Rows[:q.Limit]
			page.Next = ordinalCursor(page.Rows[q.Limit-1])
			return page, nil
		}
		after = end
		window := time.Since(started)
		// Stop before a window that would likely end past the budget, not
		// only once past it: the budget bounds the whole page (checking
		// only after each window overshot it by up to a window; see
		// docs/BENCHMARKS.md).
		if after < q.Count && time.Now().Add(window).After(deadline) {
			page.Next = strconv.Itoa(after)
			page.ScannedTo = after
			return page, nil
		}
	}
	return page, nil
}

// Counts are a list's targets by their state as TargetRow gives it.
// Planned = NotStarted + the rest.
type Counts struct {
	Planned    int `json:"planned"`
	NotStarted int `json:"not_started"`
	Pending    int `json:"pending"`
	Done       int `json:"done"`
	Unknown    int `json:"unknown"`
	Failed     int `json:"failed"`
	Stranded   int `json:"stranded"`
	Revoked    int `json:"revoked"`
	// Outside: held by an attempt that is not the campaign's own
	// (StateOutside).
	Outside int `json:"outside"`
	// Suppressed: not sent because the address was suppressed
	// (StateSuppressed).
	Suppressed int `json:"suppressed"`

	// Refused, GivenUp and Unreached are the failed targets whose deciding
	// attempt's failure is their ending (ledger.Failure.Final): refused by
	// the provider for good (rejected), given up after their tries
	// (exhausted), and never reached the provider in any try (unreached).
	// The rest of Failed are to be sent again (FailedToRetry). Not in the
	// counts' JSON, whose names are the states (the API's contract): a
	// campaign's outcome says them (approval.OutcomeOf).
	Refused   int `json:"-"`
	GivenUp   int `json:"-"`
	Unreached int `json:"-"`
}

// FailedToRetry is how many failed targets are to be sent again: those
// whose failure is not their ending (a temporary failure with tries left,
// an "over quota" answer, a failure recorded before finality was).
func (c Counts) FailedToRetry() int { return c.Failed - c.Refused - c.GivenUp - c.Unreached }

// addFailed counts n failed targets by their deciding attempt's failure.
func (c *Counts) addFailed(failure string, n int) {
	switch ledger.Failure(failure) {
	case ledger.FailureRejected:
		c.Refused += n
	case ledger.FailureExhausted:
		c.GivenUp += n
	case ledger.FailureUnreached:
		c.Unreached += n
	}
}

// Add counts n more targets in state (one of ValidStates; another is not
// counted).
func (c *Counts) Add(state string, n int) {
	if p := c.of(state); p != nil {
		*p += n
	}
}

// Get returns the count of one state by name (0 for a name that is not a
// state).
func (c Counts) Get(state string) int {
	if p := c.of(state); p != nil {
		return *p
	}
	return 0
}

func (c *Counts) of(state string) *int {
	switch state {
	case StateNotStarted:
		return &c.NotStarted
	case "pending":
		return &c.Pending
	case "done":
		return &c.Done
	case "unknown":
		return &c.Unknown
	case "failed":
		return &c.Failed
	case "stranded":
		return &c.Stranded
	case "revoked":
		return &c.Revoked
	case StateOutside:
		return &c.Outside
	case StateSuppressed:
		return &c.Suppressed
	}
	return nil
}

// ListCounts counts a list's planned targets by state, in one aggregate
// statement that decides each target as TargetRow does (listCountsSQL).
// Keys, not plan ids, join the ledger, so a target done under an earlier
// version of the campaign counts as done.
func ListCounts(ctx context.Context, db onceplan.DB, listID int64, planned int) (Counts, error) {
	arch, err := archivedList(ctx, db, listID)
	if err != nil {
		return Counts{}, err
	}
	rows, err := db.Query(ctx, attemptsIn(listCountsSQL, arch), listID)
	if err != nil {
		return Counts{}, err
	}
	c := Counts{Planned: planned}
	var state, failure string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&state, &failure, &n}, func() error {
		c.Add(state, n)
		if state == "failed" {
			c.addFailed(failure, n)
		}
		return nil
	})
	c.NotStarted = planned - c.Pending - c.Done - c.Unknown - c.Failed - c.Stranded - c.Revoked - c.Outside - c.Suppressed
	return c, err
}

// pageSize is how many targets one page of eachTarget reads.
const pageSize = 5000

// eachTarget calls fn for every target of the plan in ordinal order, a page
// at a time: memory does not grow with the plan, and no query stays open
// for the length of an export or a reconciliation (each page is read whole
// before fn runs, so a slow consumer — a probe, a pipe — holds none).
func eachTarget(ctx context.Context, db onceplan.DB, planID int64, fn func(TargetRow) error) error {
	q := TargetQuery{Limit: pageSize}
	if err := db.QueryRow(ctx, planList, planID).Scan(&q.ListID, &q.Count); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: there is no plan %d", onceplan.ErrNotFound, planID)
		}
		return err
	}
	for {
		page, err := QueryTargets(ctx, db, q)
		if err != nil {
			return err
		}
		for _, r := range page.Rows {
			if err := fn(r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		q.After = page.Next
	}
}
