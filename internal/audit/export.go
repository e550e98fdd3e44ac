package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

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

// exportColumns are the CSV header, in order: TargetRow's JSON names (the
// per-target fields of the audit, then the ones that explain a failure or a
// revocation), so that both formats carry the same columns.
var exportColumns = []string{
	"ordinal", "target", "key", "epoch", "state", "attempts", "receipt", "first_at", "last_at",
	"resolved_by", "resolution_reason", "reason", "revoked_by", "revoke_reason", "failure",
}

// Export writes every target of the plan to w, streamed a page at a time,
// in ordinal order: CSV with a header line (exportColumns), or JSON as one
// array of TargetRow objects. It is the one per-target export: `onceplan
// audit --export` writes it as it is, and the web UI's downloads carry it
// (the JSON one inside an envelope with the metric). Timestamps are RFC
// 3339 in UTC. A CSV cell a spreadsheet would run as a formula (one
// starting with =, +, -, @, a tab or a carriage return) is prefixed with a
// single quote. Nothing is written before the first page has been read,
// so an error there leaves w untouched.
func Export(ctx context.Context, db onceplan.DB, planID int64, format ExportFormat, w io.Writer) error {
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

func exportCSV(ctx context.Context, db onceplan.DB, planID int64, w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(exportColumns); err != nil {
		return err
	}
	rec := make([]string, len(exportColumns))
	err := eachTarget(ctx, db, planID, func(r TargetRow) error {
		rec = append(rec[:0], strconv.Itoa(r.Ordinal), cell(r.Target), cell(r.Key), strconv.Itoa(r.Epoch), r.State,
			strconv.Itoa(r.Attempts), cell(r.Receipt), timeCell(r.FirstAt), timeCell(r.LastAt), cell(r.ResolvedBy),
			cell(r.ResolutionReason), cell(r.Reason), cell(r.RevokedBy), cell(r.RevokeReason), r.Failure)
		return cw.Write(rec)
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

func exportJSON(ctx context.Context, db onceplan.DB, planID int64, w io.Writer) error {
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
