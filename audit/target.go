package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// StateNotStarted is the state of a target with no attempt at its key's
// current epoch (the metric counts it as missing).
const StateNotStarted = "not_started"

// TargetRow is one target of a plan as the ledger has it: the newest
// attempt at its key's current epoch, and when its attempts there began and
// last changed. The JSON names are the export's columns.
type TargetRow struct {
	Ordinal int    `json:"ordinal"`
	Target  string `json:"target"`
	Key     string `json:"key"`
	Epoch   int    `json:"epoch"`
	// State is the ledger state of the newest attempt, or not_started.
	State string `json:"state"`
	// Attempts counts the attempts at the current epoch.
	Attempts int    `json:"attempts"`
	Receipt  string `json:"receipt"`
	// FirstAt is when the first attempt at the current epoch started,
	// LastAt when any of them last changed; nil when not started.
	FirstAt *time.Time `json:"first_at"`
	LastAt  *time.Time `json:"last_at"`
	// ResolvedBy and ResolutionReason say who settled an unknown and why.
	ResolvedBy       string `json:"resolved_by"`
	ResolutionReason string `json:"resolution_reason"`
	// Reason is why the newest attempt failed, is unknown or stranded.
	Reason string `json:"reason"`
	// RevokedBy and RevokeReason say who withdrew a done effect and why.
	RevokedBy    string `json:"revoked_by"`
	RevokeReason string `json:"revoke_reason"`
}

// pageSize is how many targets one page of eachTarget reads.
const pageSize = 5000

// eachTarget calls fn for every target of the plan in ordinal order, a page
// at a time: memory does not grow with the plan.
func eachTarget(ctx context.Context, db DB, planID int64, fn func(TargetRow) error) error {
	var campaign string
	if err := db.QueryRow(ctx, planCampaign, planID).Scan(&campaign); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: there is no plan %d", ErrNotFound, planID)
		}
		return err
	}
	after := 0
	for {
		rows, err := db.Query(ctx, targetPageSQL, pgx.NamedArgs{"plan": planID, "after": after, "limit": pageSize})
		if err != nil {
			return err
		}
		var (
			r           TargetRow
			first, last *time.Time
		)
		// The page is read whole before fn runs, so a slow consumer (a
		// probe, a pipe) holds no query open.
		page := make([]TargetRow, 0, pageSize)
		_, err = pgx.ForEachRow(rows, []any{&r.Ordinal, &r.Target, &r.Key, &r.Epoch, &r.State, &r.Attempts, &r.Receipt,
			&first, &last, &r.ResolvedBy, &r.ResolutionReason, &r.Reason, &r.RevokedBy, &r.RevokeReason}, func() error {
			r.FirstAt, r.LastAt = utc(first), utc(last)
			page = append(page, r)
			return nil
		})
		if err != nil {
			return err
		}
		for _, row := range page {
			if err := fn(row); err != nil {
				return err
			}
			after = row.Ordinal
		}
		if len(page) < pageSize {
			return nil
		}
	}
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// ExportFormat is the encoding of [Export].
type ExportFormat string

// Export formats.
const (
	ExportCSV  ExportFormat = "csv"
	ExportJSON ExportFormat = "json"
)

// ParseExportFormat checks an export format given by a person.
func ParseExportFormat(s string) (ExportFormat, error) {
	switch f := ExportFormat(s); f {
	case ExportCSV, ExportJSON:
		return f, nil
	}
	return "", fmt.Errorf("export format %q is not csv or json", s)
}

// exportColumns are the CSV header, in order: the per-target fields of
// issue 7, then the ones that explain a failure or a revocation.
var exportColumns = []string{
	"target", "key", "epoch", "state", "attempts", "receipt", "first_at", "last_at",
	"resolved_by", "resolution_reason", "reason", "revoked_by", "revoke_reason",
}

// Export writes every target of the plan to w, streamed a page at a time:
// CSV with a header line, or JSON as one array of TargetRow objects.
// Timestamps are RFC 3339 in UTC. A CSV cell a spreadsheet would run as a
// formula (one starting with =, +, -, @, a tab or a carriage return) is
// prefixed with a single quote.
func Export(ctx context.Context, db DB, planID int64, format ExportFormat, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var err error
	switch format {
	case ExportCSV:
		err = exportCSV(ctx, db, planID, bw)
	case ExportJSON:
		err = exportJSON(ctx, db, planID, bw)
	default:
		_, err = ParseExportFormat(string(format))
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

func exportCSV(ctx context.Context, db DB, planID int64, w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(exportColumns); err != nil {
		return err
	}
	rec := make([]string, len(exportColumns))
	err := eachTarget(ctx, db, planID, func(r TargetRow) error {
		rec = append(rec[:0], cell(r.Target), cell(r.Key), strconv.Itoa(r.Epoch), r.State, strconv.Itoa(r.Attempts),
			cell(r.Receipt), timeCell(r.FirstAt), timeCell(r.LastAt), cell(r.ResolvedBy), cell(r.ResolutionReason),
			cell(r.Reason), cell(r.RevokedBy), cell(r.RevokeReason))
		return cw.Write(rec)
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

func exportJSON(ctx context.Context, db DB, planID int64, w io.Writer) error {
	sep := "[\n"
	err := eachTarget(ctx, db, planID, func(r TargetRow) error {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, sep); err != nil {
			return err
		}
		sep = ",\n"
		_, err = w.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	end := "\n]\n"
	if sep == "[\n" {
		end = "[]\n"
	}
	_, err = io.WriteString(w, end)
	return err
}

// cell defuses a value a spreadsheet would evaluate.
func cell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

func timeCell(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}
