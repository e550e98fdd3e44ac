package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Plan is an approved draft, frozen: its payload and its list never change.
type Plan struct {
	ID         int64  `json:"id"`
	CampaignID string `json:"campaign_id"`
	Version    int    `json:"version"`
	Provider   string `json:"provider"`
	Tool       string `json:"tool"`
	// ListUnsubscribe is the campaign's (PostgreSQL refuses another):
	// each message carries a one-click unsubscribe link.
	ListUnsubscribe bool      `json:"list_unsubscribe"`
	Payload         Payload   `json:"payload"`
	ListID          int64     `json:"-"`
	TargetCount     int       `json:"target_count"`
	Hash            string    `json:"plan_hash"`
	ProposedBy      int64     `json:"proposed_by"`
	CreatedAt       time.Time `json:"created_at"`
}

const planCols = `id, campaign_id, version, provider, tool, list_unsubscribe, from_addr, subject, text_body, html_body,
	list_id, target_count, plan_hash, proposed_by, created_at`

func scanPlan(row pgx.Row) (Plan, error) {
	var p Plan
	err := row.Scan(&p.ID, &p.CampaignID, &p.Version, &p.Provider, &p.Tool, &p.ListUnsubscribe, &p.Payload.From, &p.Payload.Subject,
		&p.Payload.Text, &p.Payload.HTML, &p.ListID, &p.TargetCount, &p.Hash, &p.ProposedBy, &p.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, onceplan.ErrNotFound
	}
	return p, err
}

// GetPlan reads a frozen plan.
func GetPlan(ctx context.Context, db onceplan.DB, id int64) (Plan, error) {
	return scanPlan(db.QueryRow(ctx, `SELECT `+planCols+` FROM plan WHERE id = $1`, id))
}

// PlanOf reads the plan frozen for a campaign's version under hash;
// onceplan.ErrNotFound when that version was not frozen under it.
func PlanOf(ctx context.Context, db onceplan.DB, campaignID string, version int, hash string) (Plan, error) {
	return scanPlan(db.QueryRow(ctx, `SELECT `+planCols+` FROM plan WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3`,
		campaignID, version, hash))
}

// TargetOfKey is the address of the target whose key is key in a plan
// frozen for campaign campaignID (the newest that has it; a key names one
// address, whatever the version); onceplan.ErrNotFound when none has it.
func TargetOfKey(ctx context.Context, db onceplan.DB, campaignID, key string) (string, error) {
	var target string
	err := db.QueryRow(ctx, `SELECT t.target FROM plan p JOIN target t ON t.list_id = p.list_id
		WHERE p.campaign_id = $1 AND t.key = $2 ORDER BY p.id DESC LIMIT 1`, campaignID, key).Scan(&target)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", onceplan.ErrNotFound
	}
	return target, err
}

// CampaignOfKey is the campaign of the newest frozen plan with a target
// whose key is key (keys carry the campaign as their event, so there is
// at most one); onceplan.ErrNotFound when no plan has it.
func CampaignOfKey(ctx context.Context, db onceplan.DB, key string) (string, error) {
	var id string
	err := db.QueryRow(ctx, `SELECT p.campaign_id FROM target t JOIN plan p ON p.list_id = t.list_id
		WHERE t.key = $1 ORDER BY p.id DESC LIMIT 1`, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", onceplan.ErrNotFound
	}
	return id, err
}

// FreezeParams is the approved version of a campaign that a plan freezes.
type FreezeParams struct {
	CampaignID      string
	Version         int
	Provider        string
	Tool            string
	ListUnsubscribe bool
	Payload         Payload
	ListID          int64
	TargetCount     int
	ProposedBy      int64
	Hash            string
}

// Freeze writes the plan for a campaign's approved version, inside tx (the
// caller's approval transaction, which also holds the campaign lock, writes
// the approval records and points the campaign at the plan). The version's
// list becomes the plan's targets: lists are written once at import, so
// freezing copies nothing and a million-target plan freezes as fast as a
// ten-target one.
func Freeze(ctx context.Context, tx pgx.Tx, f FreezeParams) (Plan, error) {
	if f.ListID == 0 || f.TargetCount == 0 {
		return Plan{}, fieldErr("targets", "the draft has no targets")
	}
	return scanPlan(tx.QueryRow(ctx, `
		INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
		                  list_id, target_count, plan_hash, proposed_by, list_unsubscribe)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		RETURNING `+planCols,
		f.CampaignID, f.Version, f.Provider, f.Tool, f.Payload.From, f.Payload.Subject, f.Payload.Text, f.Payload.HTML,
		f.ListID, f.TargetCount, f.Hash, f.ProposedBy, f.ListUnsubscribe))
}

// Content is what a version of a campaign will do: its payload over its
// target list.
type Content struct {
	Payload     Payload
	ListID      int64
	TargetCount int
}

// MissingVar is a target that lacks a variable the payload reads.
type MissingVar struct {
	Line    int      `json:"line"`
	Target  string   `json:"target"`
	Missing []string `json:"missing"`
}

// EmptyVar is a target that has a variable the payload reads, but blank
// (nothing, or nothing but spaces): its message reads "Dear ,". It is a
// warning the proposer may accept, not a refusal.
type EmptyVar struct {
	Line   int      `json:"line"`
	Target string   `json:"target"`
	Empty  []string `json:"empty"`
}

// EmptyWarning words the warning about empty merge variables: total
// targets have some, first is the first of them. "" when total is 0.
func EmptyWarning(first EmptyVar, total int) string {
	if total == 0 {
		return ""
	}
	have, their := "have", "their messages"
	if total == 1 {
		have, their = "has", "its message"
	}
	return fmt.Sprintf("%s %s empty merge variables the draft uses (first: line %d, %s, has an empty %s), so %s will have nothing there unless you correct the list",
		plural(total, "target"), have, first.Line, first.Target, strings.Join(first.Empty, ", "), their)
}

// CheckReport is what Check found in the draft's targets.
type CheckReport struct {
	// Missing lists targets that lack variables the templates read (the
	// first 100; MissingCount is how many in all): any blocks submission.
	Missing      []MissingVar
	MissingCount int
	// Empty lists targets whose variables are present but blank (the first
	// 100; EmptyCount in all): a warning, not a refusal.
	Empty      []EmptyVar
	EmptyCount int
}

// checkListMax is how many targets Check lists of each kind.
const checkListMax = 100

// Check validates a draft for submission: the payload compiles, it has at
// least one target, and no target's variable that the subject reads holds
// a line break (a subject is one header line: every send of it would fail;
// refused as a *ListError naming the first line). It reports the targets
// that lack variables the templates read and those whose variables are
// blank.
func Check(ctx context.Context, db onceplan.DB, d Content) (CheckReport, error) {
	var r CheckReport
	t, err := d.Payload.Compile()
	if err != nil {
		return r, err
	}
	if d.ListID == 0 || d.TargetCount == 0 {
		return r, fieldErr("targets", "the draft has no targets: import a list first")
	}
	fields := t.Fields()
	if len(fields) == 0 {
		return r, nil
	}
	broken, n, err := varProblems(ctx, db, d.ListID, t.SubjectFields(), varHasLineBreak, 0, 1)
	if err != nil || n > 0 {
		if err == nil {
			first := broken[0]
			err = &ListError{Line: first.Line, Reason: fmt.Sprintf(
				"the merge variable %s of %s contains a line break, and the subject uses it (a subject is one line; %s in all)",
				strings.Join(first.Vars, ", "), first.Target, plural(n, "target"))}
		}
		return r, err
	}
	missing, n, err := varProblems(ctx, db, d.ListID, fields, varMissing, 0, checkListMax)
	if err != nil {
		return r, err
	}
	r.MissingCount = n
	for _, m := range missing {
		r.Missing = append(r.Missing, MissingVar{Line: m.Line, Target: m.Target, Missing: m.Vars})
	}
	r.Empty, r.EmptyCount, err = EmptyVars(ctx, db, d.ListID, t.BlankFields(), 0, checkListMax)
	return r, err
}

// EmptyVars lists the targets of a list, past ordinal after, whose
// variables are blank where a message shows them (BlankFields: a printed
// variable empty or only spaces, a guarded one only spaces; the first
// limit of them, and how many in all): the import's report and Check both
// ask it.
func EmptyVars(ctx context.Context, db onceplan.DB, listID int64, blank BlankFields, after, limit int) ([]EmptyVar, int, error) {
	if blank.Empty() {
		return nil, 0, nil
	}
	found, n, err := varProblems(ctx, db, listID, blank.All(), varBlank, after, limit, blank.Printed, blank.Guarded)
	var out []EmptyVar
	for _, v := range found {
		out = append(out, EmptyVar{Line: v.Line, Target: v.Target, Empty: v.Vars})
	}
	return out, n, err
}

// varCond is a condition on a target t's variable f (each), for
// varProblems, and, where there is a cheaper way to say it, the same for
// some f of the fields $2 (filter).
type varCond struct{ each, filter string }

var (
	varMissing = varCond{each: `NOT t.vars ? f`, filter: `NOT (t.vars ?& $2::text[])`}
	// varBlank: $5 are the printed variables, $6 the guarded ones
	// (BlankFields).
	varBlank        = varCond{each: `(f = ANY ($5::text[]) AND t.vars->>f ~ '^[[:space:]]*$' OR f = ANY ($6::text[]) AND t.vars->>f ~ '^[[:space:]]+$')`}
	varHasLineBreak = varCond{each: `t.vars->>f ~ E'[\r\n]'`}
)

// varProblem is a target and those of its variables a condition holds for.
type varProblem struct {
	Line   int
	Target string
	Vars   []string
}

// varProblems lists, in list order, the targets of list listID past
// ordinal after with a variable among fields for which cond holds: the
// first limit of them with those variables, and how many targets in all.
func varProblems(ctx context.Context, db onceplan.DB, listID int64, fields []string, cond varCond, after, limit int, more ...any) ([]varProblem, int, error) {
	if len(fields) == 0 {
		return nil, 0, nil
	}
	filter := cond.filter
	if filter == "" {
		filter = `EXISTS (SELECT 1 FROM unnest($2::text[]) f WHERE ` + cond.each + `)`
	}
	rows, err := db.Query(ctx, `
		SELECT t.line, t.target, array(SELECT f FROM unnest($2::text[]) f WHERE `+cond.each+`), count(*) OVER ()
		FROM target t
		WHERE t.list_id = $1 AND t.ordinal > $3 AND `+filter+`
		ORDER BY t.ordinal LIMIT $4`, append([]any{listID, fields, after, limit}, more...)...)
	if err != nil {
		return nil, 0, err
	}
	var (
		out   []varProblem
		p     varProblem
		total int
	)
	_, err = pgx.ForEachRow(rows, []any{&p.Line, &p.Target, &p.Vars, &total}, func() error {
		out = append(out, p)
		return nil
	})
	return out, total, err
}

// SampleUnsubscribeURL is the unsubscribe link a test send shows: shaped
// like a real one, valid for nothing.
const SampleUnsubscribeURL = "https://onceplan.invalid/u/sample"

// PreviewWithLink renders the exact message one target of a draft would
// get: by ordinal (1-based) or by address, with the unsubscribe link
// unsubscribeURL ("" for none: a transactional campaign's message).
func PreviewWithLink(ctx context.Context, db onceplan.DB, d Content, address string, ordinal int, unsubscribeURL string) (Message, error) {
	t, err := d.Payload.Compile()
	if err != nil {
		return Message{}, err
	}
	var (
		to   string
		vars map[string]string
	)
	if address != "" {
		err = db.QueryRow(ctx, `SELECT target, vars FROM target WHERE list_id = $1 AND target = $2`, d.ListID, address).Scan(&to, &vars)
	} else {
		err = db.QueryRow(ctx, `SELECT target, vars FROM target WHERE list_id = $1 AND ordinal = $2`, d.ListID, ordinal).Scan(&to, &vars)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, fmt.Errorf("%w: the draft has no such target", onceplan.ErrNotFound)
	}
	if err != nil {
		return Message{}, err
	}
	return t.RenderWithLink(to, vars, unsubscribeURL)
}

// Providers maps each of the plans ids names to the provider it sends
// through; an unknown id is absent.
func Providers(ctx context.Context, db onceplan.DB, ids []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id, provider FROM plan WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	var id int64
	var provider string
	_, err = pgx.ForEachRow(rows, []any{&id, &provider}, func() error {
		out[id] = provider
		return nil
	})
	return out, err
}
