package plan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// Default import limits. MaxTargets is per campaign (one list); the byte
// limit bounds the upload itself.
const (
	DefaultMaxTargets = 1_000_000
	DefaultMaxBytes   = 256 << 20
	// reportListMax caps how many rejected and duplicate lines a report
	// lists one by one; the counts always cover every line.
	reportListMax = 1000
)

// Format is a target list's encoding.
type Format string

// Target list formats.
const (
	FormatCSV  Format = "csv"
	FormatJSON Format = "json"
)

// ImportParams describe one import of a target list for a campaign's
// draft. The draft itself is approval's: it locks the draft's row, passes
// the list the draft holds now (Current), points the draft at the new
// list and drops the one it replaced (DropUnfrozenList).
type ImportParams struct {
	CampaignID string
	// Current is the list the draft holds now (nil: none), the one Append
	// adds to.
	Current *int64
	Tool    string // the campaign's tool, part of every key
	Format  Format
	Body    io.Reader
	// AddressColumn names the CSV column holding addresses (default: the
	// column named email or address).
	AddressColumn string
	// Encoding is the CSV's declared encoding ("": UTF-8; ParseEncoding).
	// A JSON list is UTF-8 and may declare nothing else.
	Encoding Encoding
	// Append adds to the draft's current list instead of replacing it.
	Append     bool
	MaxTargets int   // default DefaultMaxTargets
	MaxBytes   int64 // default DefaultMaxBytes
	ActorID    int64
	// Suppressed, when set, says whether a normalised address is on the
	// suppression list now, and why (suppression.Set's Lookup): such a row
	// is left out of the list and reported in Suppressed.
	Suppressed func(address string) (reason string, ok bool)
	// Blank are the merge variables whose blank value would show in the
	// draft's messages (Templates.BlankFields): accepted rows where one is
	// blank so that it shows are listed in the report's Empty.
	Blank BlankFields
}

// Rejection is a line the import refused, and why.
type Rejection struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// Suppressed is a line left out because its address is on the
// suppression list (it unsubscribed, bounced hard, complained, or an admin
// said so), and why.
type Suppressed struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// Duplicate is a line whose target an earlier line already holds.
type Duplicate struct {
	Line        int `json:"line"`
	DuplicateOf int `json:"duplicate_of"`
}

// ImportReport accounts for every row of the input: Rows = Accepted +
// Duplicate + Rejected + Suppressed. The lists name the lines (the first 1,000 of each;
// Truncated says when there were more).
type ImportReport struct {
	Rows          int         `json:"rows"`
	Accepted      int         `json:"accepted"`
	Duplicate     int         `json:"duplicate"`
	RejectedCount int         `json:"rejected_count"`
	Rejected      []Rejection `json:"rejected"`
	Duplicates    []Duplicate `json:"duplicates"`
	// Suppressed lists rows left out because their address is suppressed
	// (the first 1,000; SuppressedCount in all).
	Suppressed      []Suppressed `json:"suppressed"`
	SuppressedCount int          `json:"suppressed_count"`
	// Empty lists accepted rows whose merge variables are present but
	// blank where a message shows them (ImportParams.Blank); EmptyCount is
	// how many in all. A warning: the rows are imported.
	Empty      []EmptyVar `json:"empty"`
	EmptyCount int        `json:"empty_count"`
	Truncated  bool       `json:"truncated,omitempty"`
	// TargetCount is the draft's list size after the import (with Append,
	// the earlier targets too).
	TargetCount int           `json:"target_count"`
	ListID      int64         `json:"-"`
	ListDigest  string        `json:"-"`
	Elapsed     time.Duration `json:"-"`
}

// importSource streams accepted rows into COPY: it reads, normalises,
// keys, de-duplicates and hashes one row at a time, so memory does not grow
// with the list beyond one small map entry per accepted target.
type importSource struct {
	ctx    context.Context
	reader TargetReader
	p      ImportParams
	report *ImportReport
	digest *ListDigest
	// seen maps the first 16 bytes of each accepted key to its line. Keys
	// are sha256 outputs, so a 128-bit prefix does not collide in practice.
	seen    map[[16]byte]int32
	ordinal int
	listID  int64
	values  []any
	err     error
}

func (s *importSource) Next() bool {
	for {
		if s.err != nil {
			return false
		}
		row, err := s.reader.Next()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			var re *RowError
			if errors.As(err, &re) {
				s.report.Rows++
				s.reject(re.Line, re.Reason)
				continue
			}
			s.err = err
			return false
		}
		s.report.Rows++
		target, key, err := TargetKey(s.p.CampaignID, s.p.Tool, row.Address)
		if err != nil {
			s.reject(row.Line, err.Error())
			continue
		}
		if s.p.Suppressed != nil {
			if reason, ok := s.p.Suppressed(target.Value); ok {
				s.report.SuppressedCount++
				if len(s.report.Suppressed) < reportListMax {
					s.report.Suppressed = append(s.report.Suppressed, Suppressed{Line: row.Line, Reason: reason})
				} else {
					s.report.Truncated = true
				}
				continue
			}
		}
		var prefix [16]byte
		hex.Decode(prefix[:], []byte(key[3:35]))
		if first, dup := s.seen[prefix]; dup {
			s.report.Duplicate++
			if len(s.report.Duplicates) < reportListMax {
				s.report.Duplicates = append(s.report.Duplicates, Duplicate{Line: row.Line, DuplicateOf: int(first)})
			} else {
				s.report.Truncated = true
			}
			continue
		}
		if s.ordinal >= s.p.MaxTargets {
			s.err = &ListError{Line: row.Line, TooLarge: true, Reason: fmt.Sprintf("the list has more than %d targets, the limit for one campaign", s.p.MaxTargets)}
			return false
		}
		s.seen[prefix] = int32(row.Line)
		s.ordinal++
		s.report.Accepted++
		vars := CanonicalVars(row.Vars)
		s.digest.Add(string(key), vars)
		s.values = append(s.values[:0], s.listID, s.ordinal, target.Value, string(key), vars, row.Line)
		return true
	}
}

// IsTargetKey reports whether key is the key of a campaign target at
// address (TargetKey), for the audit's check of every frozen row: the
// stored address is normalised already when the import wrote it, so the
// key is recomputed without normalising it again, and only a row that does
// not match that way pays for the full rule.
func IsTargetKey(campaignID, tool, address string, key []byte) bool {
	var buf [80]byte
	fast := ledger.AppendKeyOfNormalized(buf[:0], ledger.KeyInput{Event: campaignID, Tool: tool,
		Target: ledger.Target{Kind: ledger.TargetEmail, Value: address}})
	if bytes.Equal(fast, key) {
		return true
	}
	_, want, err := TargetKey(campaignID, tool, address)
	return err == nil && string(want) == string(key)
}

// TargetKey is a campaign target's identity: the normalised address and
// its effect key, {event: the campaign's id, tool: the campaign's tool,
// target: the address}. The import keys every row with it, and the audit
// checks every frozen row against it.
func TargetKey(campaignID, tool, address string) (ledger.Target, ledger.Key, error) {
	target, err := ledger.NewEmailTarget(address)
	if err != nil {
		return target, "", err
	}
	key, err := ledger.NewKey(ledger.KeyInput{Event: campaignID, Tool: tool, Target: target})
	return target, key, err
}

func (s *importSource) reject(line int, reason string) {
	s.report.RejectedCount++
	if len(s.report.Rejected) < reportListMax {
		s.report.Rejected = append(s.report.Rejected, Rejection{Line: line, Reason: reason})
	} else {
		s.report.Truncated = true
	}
}

func (s *importSource) Values() ([]any, error) { return s.values, nil }
func (s *importSource) Err() error             { return s.err }

// ImportTargets reads a target list into a new list for a campaign's
// draft, inside tx, and reports it (ListID). On any error the caller rolls
// tx back and nothing changed. With Append the new list starts with the
// Current one's targets, in order.
func ImportTargets(ctx context.Context, tx pgx.Tx, p ImportParams) (ImportReport, error) {
	start := time.Now()
	report := ImportReport{Rejected: []Rejection{}, Duplicates: []Duplicate{}, Suppressed: []Suppressed{}, Empty: []EmptyVar{}}
	if p.MaxTargets <= 0 {
		p.MaxTargets = DefaultMaxTargets
	}
	if p.MaxBytes <= 0 {
		p.MaxBytes = DefaultMaxBytes
	}
	if p.Tool == "" {
		p.Tool = "email.send"
	}
	opts := ReadOptions{AddressColumn: p.AddressColumn, MaxBytes: p.MaxBytes, Encoding: p.Encoding}
	var (
		reader TargetReader
		err    error
	)
	switch p.Format {
	case FormatCSV:
		reader, err = NewCSVReader(p.Body, opts)
	case FormatJSON:
		if p.Encoding != "" && p.Encoding != EncodingUTF8 {
			return report, fieldErr("encoding", "a JSON list is UTF-8, not %s", p.Encoding.Label())
		}
		reader, err = NewJSONReader(p.Body, opts)
	default:
		return report, fieldErr("format", "must be csv or json, not %q", p.Format)
	}
	if err != nil {
		return report, err
	}

	oldList := p.Current
	var listID int64
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('target_list', 'id'))`).Scan(&listID); err != nil {
		return report, err
	}
	src := &importSource{
		ctx: ctx, reader: reader, p: p, report: &report, digest: NewListDigest(),
		seen: map[[16]byte]int32{}, listID: listID,
	}
	if p.Append && oldList != nil {
		if err := src.carryOver(ctx, tx, *oldList); err != nil {
			return report, err
		}
	}
	carried := src.ordinal
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"target"},
		[]string{"list_id", "ordinal", "target", "key", "vars", "line"}, src); err != nil {
		if src.err != nil {
			return report, src.err
		}
		return report, err
	}
	if src.ordinal == 0 {
		return report, &ListError{Reason: noTargetsReason(&report)}
	}
	empty, n, err := EmptyVars(ctx, tx, listID, p.Blank, carried, reportListMax)
	if err != nil {
		return report, err
	}
	report.Empty = append(report.Empty, empty...)
	report.EmptyCount = n
	report.Truncated = report.Truncated || n > len(empty)
	if _, err := tx.Exec(ctx, `INSERT INTO target_list (id, campaign_id, target_count, digest, created_by) VALUES ($1, $2, $3, $4, $5)`,
		listID, p.CampaignID, src.ordinal, src.digest.Sum(), p.ActorID); err != nil {
		return report, err
	}
	report.TargetCount = src.ordinal
	report.ListID = listID
	report.ListDigest = src.digest.Sum()
	report.Elapsed = time.Since(start)
	return report, nil
}

// noTargetsReason says why a list with no usable target is refused: how
// its rows went, and the first rejected line's reason (the report is not
// shown when the import is refused).
func noTargetsReason(r *ImportReport) string {
	if r.Rows == 0 {
		return "the list has no targets"
	}
	counts := fmt.Sprintf("%d rejected, %s", r.RejectedCount, plural(r.Duplicate, "duplicate"))
	if r.SuppressedCount > 0 {
		counts += fmt.Sprintf(", %d suppressed", r.SuppressedCount)
	}
	out := fmt.Sprintf("none of the list's %s is a usable target (%s)", plural(r.Rows, "row"), counts)
	if r.Rows == 1 {
		out = fmt.Sprintf("the list's one row is not a usable target (%s)", counts)
	}
	if len(r.Rejected) > 0 {
		first := r.Rejected[0]
		out += fmt.Sprintf("; line %d: %s", first.Line, first.Reason)
	}
	return out
}

// carryOver copies the current list's targets into the new list (server
// side) and primes the de-duplication map and the digest with them.
func (s *importSource) carryOver(ctx context.Context, tx pgx.Tx, oldList int64) error {
	rows, err := tx.Query(ctx, `SELECT key, vars, line FROM target WHERE list_id = $1 ORDER BY ordinal`, oldList)
	if err != nil {
		return err
	}
	var (
		key  string
		vars map[string]string
		line int32
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &vars, &line}, func() error {
		var prefix [16]byte
		hex.Decode(prefix[:], []byte(key[3:35]))
		s.seen[prefix] = line
		s.digest.Add(key, CanonicalVars(vars))
		s.ordinal++
		return nil
	})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO target (list_id, ordinal, target, key, vars, line)
		SELECT $2, ordinal, target, key, vars, line FROM target WHERE list_id = $1`, oldList, s.listID)
	return err
}

// DropUnfrozenList removes a list nothing points at any more (a draft's
// superseded list, once the draft points at its new one): deleting its
// target_list row takes its targets with it (migration 0014). A list a
// plan froze, a draft uses or a submission named (approval's rows, read
// through campaign_draft and campaign_submission, migration 0030) stays;
// PostgreSQL's foreign keys would refuse the delete anyway, but that would
// fail the import.
func DropUnfrozenList(ctx context.Context, tx pgx.Tx, list int64) error {
	var used bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plan WHERE list_id = $1)
		OR EXISTS (SELECT 1 FROM campaign_draft() d WHERE d.list_id = $1)
		OR EXISTS (SELECT 1 FROM campaign_submission() s WHERE s.list_id = $1)`,
		list).Scan(&used); err != nil || used {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM target_list WHERE id = $1`, list)
	return err
}

// Target is one target of a list as an effect needs it: its ordinal,
// normalised address, key and variables.
type Target struct {
	Ordinal int
	Address string
	Key     string
	Vars    map[string]string
}

// TargetsAt reads the targets of list listID at ordinals, in no particular
// order; an ordinal the list does not have is left out. It is the read
// every effect makes before it renders its message (the executor's target
// batch asks it once for all the workers waiting). One list, "ordinal =
// ANY(…)": the primary key's index whatever the statistics say, planned
// for each call (two indexes of target start with list_id, and which is
// better depends on the list), never from a cached generic plan.
func TargetsAt(ctx context.Context, db onceplan.DB, listID int64, ordinals []int32) ([]Target, error) {
	rows, err := db.Query(ctx, `SELECT ordinal, target, key, vars FROM target WHERE list_id = $1 AND ordinal = ANY($2::int[])`,
		pgx.QueryExecModeExec, listID, ordinals)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Target, error) {
		var t Target
		err := r.Scan(&t.Ordinal, &t.Address, &t.Key, &t.Vars)
		return t, err
	})
}

// ListTarget is one target of a list as imported: its ordinal, the line
// of the file it came from, its normalised address and its variables (as
// PostgreSQL prints the JSON).
type ListTarget struct {
	Ordinal int
	Line    int
	Target  string
	Vars    string
}

// ListTargets reads up to limit targets of list listID after ordinal
// after, in ordinal order.
func ListTargets(ctx context.Context, db onceplan.DB, listID int64, after, limit int) ([]ListTarget, error) {
	rows, err := db.Query(ctx, `
		SELECT ordinal, line, target, vars::text FROM target
		WHERE list_id = $1 AND ordinal > $2 ORDER BY ordinal LIMIT $3`, listID, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ListTarget, error) {
		var t ListTarget
		err := r.Scan(&t.Ordinal, &t.Line, &t.Target, &t.Vars)
		return t, err
	})
}

// WriteListJSON writes list listID to w as the JSON target list an import
// reads (NewJSONReader: an array of {"address", "vars"}), in ordinal order,
// streamed: a campaign made from another imports it as it would an upload,
// so the suppression list, normalisation and the report apply as to any.
func WriteListJSON(ctx context.Context, db onceplan.DB, listID int64, w io.Writer) error {
	rows, err := db.Query(ctx, `
		SELECT json_build_object('address', target, 'vars', vars)::text FROM target
		WHERE list_id = $1 ORDER BY ordinal`, listID)
	if err != nil {
		return err
	}
	defer rows.Close()
	bw := bufio.NewWriter(w)
	bw.WriteByte('[')
	var elem string
	for first := true; rows.Next(); first = false {
		if err := rows.Scan(&elem); err != nil {
			return err
		}
		if !first {
			bw.WriteByte(',')
		}
		bw.WriteString(elem)
		bw.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return err
	}
	bw.WriteByte(']')
	return bw.Flush()
}

// OrdinalOf finds the target of list listID with address (normalised as
// a target's is) and returns its ordinal; a list without it is
// onceplan.ErrNotFound, saying so.
func OrdinalOf(ctx context.Context, db onceplan.DB, listID int64, address string) (int, error) {
	target, err := ledger.NewEmailTarget(address)
	if err != nil {
		return 0, fieldErr("address", "%q is not an email address", strings.TrimSpace(address))
	}
	var ordinal int
	err = db.QueryRow(ctx, `SELECT ordinal FROM target WHERE list_id = $1 AND target = $2 ORDER BY ordinal LIMIT 1`,
		listID, target.Value).Scan(&ordinal)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: no target of the list has the address %s", onceplan.ErrNotFound, target.Value)
	}
	return ordinal, err
}
