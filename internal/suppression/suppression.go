// Package suppression is the list of addresses Onceplan must not mail: they
// unsubscribed, bounced hard, complained, or an admin said so.
//
// The history is write-once (PostgreSQL refuses UPDATE and DELETE to every
// role but the owner): adding an address already suppressed changes
// nothing, and taking one off is a removal of its own, with who and why.
// An address is suppressed while it has an entry without a removal
// (notRemoved, this package's statement of that rule; the claim and
// PostgreSQL's own check of an attempt ask the database's statement of it,
// onceplan_suppressed and target_suppression, migrations 0024 and 0027).
//
// Addresses are normalised exactly like a target's (ledger.NormalizeEmail),
// so "Ann@Example.com" and "ann@example.com" are one entry.
package suppression

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// Reason is why an address is suppressed.
type Reason string

// Reasons.
const (
	Unsubscribed Reason = "unsubscribed"
	HardBounce   Reason = "hard_bounce"
	Complaint    Reason = "complaint"
	Manual       Reason = "manual"
)

// Reasons lists every reason, in the order the UI offers them.
var Reasons = []Reason{Unsubscribed, HardBounce, Complaint, Manual}

// Source is where a suppression came from.
type Source string

// Sources.
const (
	FromUnsubscribe   Source = "unsubscribe"    // a message's unsubscribe link (CampaignID says which)
	FromProviderEvent Source = "provider_event" // a bounce or complaint a provider reported (EventID)
	FromActor         Source = "actor"          // a person or a script (Actor)
	FromImport        Source = "import"         // a suppression file imported by Actor
)

// ErrNotSuppressed: Remove found no active suppression of the address.
var ErrNotSuppressed = onceplan.New(onceplan.CodeNotSuppressed, "the address is not suppressed")

// Entry is one suppression, with its removal when it was taken off.
type Entry struct {
	ID         int64     `json:"id"`
	Address    string    `json:"address"`
	Reason     Reason    `json:"reason"`
	Source     Source    `json:"source"`
	CampaignID string    `json:"campaign_id,omitempty"`
	EventID    int64     `json:"event_id,omitempty"`
	Actor      string    `json:"actor,omitempty"`
	Note       string    `json:"note,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	Removed    *Removal  `json:"removed,omitempty"`
}

// Why says, in words a person reads, why the entry suppresses its address
// and since when: "it unsubscribed on 2025-03-01".
func (e Entry) Why() string {
	var what string
	switch e.Reason {
	case Unsubscribed:
		what = "it unsubscribed"
	case HardBounce:
		what = "it bounced hard"
	case Complaint:
		what = "it complained of a message"
	default:
		what = "it was put on the list by hand"
		if e.Actor != "" {
			what = "it was put on the list by " + e.Actor
		}
	}
	return what + " on " + e.CreatedAt.UTC().Format("2006-01-02")
}

// Removal is an entry's taking off.
type Removal struct {
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

// notRemoved is the SQL condition "entry s has no removal": it is active.
//
// "OFFSET 0" keeps it a lookup of s's removal by suppression_removal's
// key, row by row. Without it PostgreSQL may turn it into an anti-join
// that reads every removal for each entry, and the claims' generic plans
// (executor's write sessions), made while the tables were empty and
// analyzed, did: with every index as cheap as any other, the lookup of an
// address's entries became a walk of all entries in id order filtered by
// address, against all removals (TestWritePlansUseIndexesOnly).
const notRemoved = `NOT EXISTS (SELECT 1 FROM suppression_removal sr WHERE sr.suppression_id = s.id OFFSET 0)`

// Normalize normalises an address as a target's is; the error names it.
func Normalize(address string) (string, error) {
	a, err := ledger.NormalizeEmail(address)
	if err != nil {
		return "", &onceplan.FieldError{Field: "address", Reason: strings.TrimPrefix(err.Error(), ledger.ErrInvalidTarget.Error()+": ")}
	}
	return a, nil
}

// AddParams is a suppression to add.
type AddParams struct {
	Address    string
	Reason     Reason
	Source     Source
	CampaignID string // the campaign whose link was used, or whose message bounced
	EventID    int64  // the provider event that reported it
	Actor      string // who added it (a person's email, a token's name)
	Note       string
}

func (p *AddParams) validate() error {
	a, err := Normalize(p.Address)
	if err != nil {
		return err
	}
	p.Address = a
	if !slices.Contains(Reasons, p.Reason) {
		return &onceplan.FieldError{Field: "reason", Reason: fmt.Sprintf("must be one of %s, not %q", ReasonNames(), p.Reason)}
	}
	switch p.Source {
	case FromUnsubscribe, FromProviderEvent:
	case FromActor, FromImport:
		if strings.TrimSpace(p.Actor) == "" {
			return &onceplan.FieldError{Field: "actor", Reason: "is required for a suppression a person adds"}
		}
	default:
		return &onceplan.FieldError{Field: "source", Reason: fmt.Sprintf("unknown source %q", p.Source)}
	}
	if len(p.Note) > 1000 {
		return &onceplan.FieldError{Field: "note", Reason: "must be at most 1000 characters"}
	}
	return nil
}

// ReasonNames is Reasons as one comma-separated list, for messages and
// help texts.
func ReasonNames() string {
	s := make([]string, len(Reasons))
	for i, r := range Reasons {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// Add suppresses an address. An address already suppressed keeps its
// entry: Add returns that entry and added false (a re-delivered bounce, a
// second press of an unsubscribe link). Two concurrent Adds of one address
// make one entry: the address is locked for the transaction first.
func Add(ctx context.Context, db onceplan.DB, p AddParams) (e Entry, added bool, err error) {
	if err := p.validate(); err != nil {
		return Entry{}, false, err
	}
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan-suppression:' || $1, 0))`, p.Address); err != nil {
			return err
		}
		cur, found, err := active(ctx, tx, p.Address)
		if err != nil || found {
			e = cur
			return err
		}
		var id int64
		if err := tx.QueryRow(ctx, `
			INSERT INTO suppression (address, reason, source, campaign_id, event_id, actor, note)
			VALUES ($1, $2, $3, nullif($4, '')::uuid, nullif($5, 0), $6, $7)
			RETURNING id`, p.Address, p.Reason, p.Source, p.CampaignID, p.EventID, p.Actor, p.Note).Scan(&id); err != nil {
			return err
		}
		e, err = get(ctx, tx, id)
		added = err == nil
		return err
	})
	return e, added, err
}

// Remove takes an address off the list: its active entry gets a removal
// by actor, for reason (both required). The entry itself stays, as history.
func Remove(ctx context.Context, db onceplan.DB, address, actor, reason string) (Entry, error) {
	a, err := Normalize(address)
	if err != nil {
		return Entry{}, err
	}
	if strings.TrimSpace(reason) == "" {
		return Entry{}, &onceplan.FieldError{Field: "reason", Reason: "is required: say why the address may be mailed again"}
	}
	if strings.TrimSpace(actor) == "" {
		return Entry{}, &onceplan.FieldError{Field: "actor", Reason: "is required"}
	}
	var e Entry
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan-suppression:' || $1, 0))`, a); err != nil {
			return err
		}
		cur, found, err := active(ctx, tx, a)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrNotSuppressed, a)
		}
		// Every active entry of the address is taken off (there is one,
		// unless the owner wrote more by hand).
		if _, err := tx.Exec(ctx, `
			INSERT INTO suppression_removal (suppression_id, actor, reason)
			SELECT s.id, $2, $3 FROM suppression s
			WHERE s.address = $1 AND `+notRemoved,
			a, actor, reason); err != nil {
			return err
		}
		e, err = get(ctx, tx, cur.ID)
		return err
	})
	return e, err
}

// Lookup returns the active entry of an address, if any.
func Lookup(ctx context.Context, db onceplan.DB, address string) (Entry, bool, error) {
	a, err := Normalize(address)
	if err != nil {
		return Entry{}, false, err
	}
	return active(ctx, db, a)
}

// LookupMany returns the active entry of each of addresses (normalised)
// that has one, by address: Lookup for a few addresses at once.
func LookupMany(ctx context.Context, db onceplan.DB, addresses []string) (map[string]Entry, error) {
	out := map[string]Entry{}
	if len(addresses) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (s.address) `+entryCols+` FROM suppression s
		LEFT JOIN suppression_removal r ON r.suppression_id = s.id
		WHERE s.address = ANY($1) AND `+notRemoved+`
		ORDER BY s.address, s.id`, addresses)
	if err != nil {
		return nil, err
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	for _, e := range entries {
		out[e.Address] = e
	}
	return out, err
}

// ListParams select a page of entries, newest first.
type ListParams struct {
	Address        string // an address, or a prefix of one ("" for all)
	IncludeRemoved bool   // also entries that were taken off
	After          int64  // the previous page's Next
	Limit          int    // default 100, at most 1000
}

// List returns a page of entries, newest first, and the After of the next
// page (0 when this is the last).
func List(ctx context.Context, db onceplan.DB, p ListParams) ([]Entry, int64, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	if p.Limit > 1000 {
		return nil, 0, &onceplan.FieldError{Field: "limit", Reason: "must be at most 1000"}
	}
	if p.After < 0 {
		return nil, 0, &onceplan.FieldError{Field: "after", Reason: "must not be negative"}
	}
	prefix := strings.ToLower(strings.TrimSpace(p.Address))
	rows, err := db.Query(ctx, `
		SELECT `+entryCols+` FROM suppression s
		LEFT JOIN suppression_removal r ON r.suppression_id = s.id
		WHERE ($1 = 0 OR s.id < $1)
		  AND ($2 = '' OR starts_with(s.address, $2))
		  AND ($3 OR r.suppression_id IS NULL)
		ORDER BY s.id DESC LIMIT $4`, p.After, prefix, p.IncludeRemoved, p.Limit+1)
	if err != nil {
		return nil, 0, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return nil, 0, err
	}
	var next int64
	if len(out) > p.Limit {
		out = out[:p.Limit]
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// Count is how many addresses are suppressed now.
func Count(ctx context.Context, db onceplan.DB) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(DISTINCT s.address) FROM suppression s WHERE `+notRemoved).Scan(&n)
	return n, err
}

const entryCols = `s.id, s.address, s.reason, s.source, coalesce(s.campaign_id::text, ''), coalesce(s.event_id, 0),
	s.actor, s.note, s.created_at, r.actor, r.reason, r.created_at`

func scanEntry(row pgx.Row) (Entry, error) {
	var (
		e               Entry
		rActor, rReason *string
		rAt             *time.Time
	)
	err := row.Scan(&e.ID, &e.Address, &e.Reason, &e.Source, &e.CampaignID, &e.EventID, &e.Actor, &e.Note, &e.CreatedAt,
		&rActor, &rReason, &rAt)
	if err != nil {
		return Entry{}, err
	}
	if rActor != nil {
		e.Removed = &Removal{Actor: *rActor, Reason: *rReason, CreatedAt: *rAt}
	}
	return e, nil
}

func active(ctx context.Context, db onceplan.DB, address string) (Entry, bool, error) {
	e, err := scanEntry(db.QueryRow(ctx, `
		SELECT `+entryCols+` FROM suppression s
		LEFT JOIN suppression_removal r ON r.suppression_id = s.id
		WHERE s.address = $1 AND r.suppression_id IS NULL
		ORDER BY s.id LIMIT 1`, address))
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, false, nil
	}
	return e, err == nil, err
}

func get(ctx context.Context, db onceplan.DB, id int64) (Entry, error) {
	return scanEntry(db.QueryRow(ctx, `
		SELECT `+entryCols+` FROM suppression s
		LEFT JOIN suppression_removal r ON r.suppression_id = s.id
		WHERE s.id = $1`, id))
}

// inTx runs fn in a transaction of db (a savepoint when db is one).
func inTx(ctx context.Context, db onceplan.DB, fn func(pgx.Tx) error) error {
	b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return errors.New("suppression: db cannot begin a transaction")
	}
	return pgx.BeginFunc(ctx, b, fn)
}

// Set is the suppression list as it stands, for checking many addresses
// at once (an import of a million rows asks it once per row).
type Set map[string]Reason

// ActiveSet reads every address suppressed now (notRemoved), with
// the reason of its oldest active entry.
func ActiveSet(ctx context.Context, db onceplan.DB) (Set, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (s.address) s.address, s.reason FROM suppression s
		WHERE `+notRemoved+`
		ORDER BY s.address, s.id`)
	if err != nil {
		return nil, err
	}
	set := Set{}
	var (
		a string
		r Reason
	)
	_, err = pgx.ForEachRow(rows, []any{&a, &r}, func() error {
		set[a] = r
		return nil
	})
	return set, err
}

// Lookup says whether a normalised address is in the set, and why.
func (s Set) Lookup(address string) (string, bool) {
	r, ok := s[address]
	return string(r), ok
}

// InList counts the targets of a target list whose address is suppressed
// now: the approval page shows it, since they will not be mailed. The
// list's targets are the plan's, read through its list_target (migration
// 0030).
func InList(ctx context.Context, db onceplan.DB, listID int64) (int, error) {
	if listID == 0 {
		return 0, nil
	}
	var n int
	err := db.QueryRow(ctx, `
		SELECT count(DISTINCT t.ordinal) FROM suppression s
		JOIN list_target() t ON t.list_id = $1 AND t.target = s.address
		WHERE `+notRemoved, listID).Scan(&n)
	return n, err
}
