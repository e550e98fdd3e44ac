package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxLineBytes is the row size limit used when ReadOptions.MaxLineBytes
// is zero. An email list row is a few hundred bytes; a row of 64 KiB means a
// broken file (typically a quote that is never closed), not a long address.
const DefaultMaxLineBytes = 64 << 10

// maxListedColumns bounds how many header names an error message lists.
const maxListedColumns = 20

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Row is one target as read from the list, before normalisation.
//
// A Row returned by TargetReader.Next is valid until the next call to Next:
// the reader reuses the Vars map for the following row. The strings
// themselves are never modified, so a caller that keeps a row copies the map
// (maps.Clone) and may keep the strings as they are.
type Row struct {
	// Line locates the row for error reports. For CSV it is the 1-based line
	// number of the row's first line in the file (the header is line 1, the
	// first data row line 2; a row with quoted newlines spans several lines
	// and reports the first). For JSON it is the 1-based index of the element
	// in the top-level array.
	Line int
	// Address is the address field exactly as given (not trimmed, not
	// lower-cased); the importer normalises it. It is never empty or blank:
	// such rows are reported as a *RowError.
	Address string
	// Vars maps every other column to its value (the merge variables). Keys
	// are the header names, trimmed; values are kept exactly as given,
	// surrounding spaces included. For JSON, numbers and booleans are given
	// as their literal JSON text ("42", "1e3", "true").
	Vars map[string]string
}

// RowError is a problem with one row; the importer lists it as rejected and
// carries on with the next row.
type RowError struct {
	Line   int    // as Row.Line: a CSV line number, or a JSON element index
	Reason string // what is wrong, without the line: "the address is empty"
}

// Error returns "line 7: <reason>".
func (e *RowError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// ListError is a problem with the whole list (no header, no address column,
// duplicate header names, binary data, a size limit exceeded, broken quoting
// or malformed JSON): the import is refused as a whole.
//
// A ListError can come after rows have been returned (a size limit is only
// noticed when it is reached); the importer must then discard the rows it
// has already read.
type ListError struct {
	// Line is the CSV line the problem is on, or 0 when the problem is not
	// on one line (an empty file, a size limit, any JSON problem: those
	// name a byte offset in Reason instead).
	Line   int
	Reason string
	// TooLarge: the list broke a size limit (bytes or targets), as opposed
	// to being malformed.
	TooLarge bool
}

// Error returns "line 12: <reason>", or the reason alone when Line is 0.
func (e *ListError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	}
	return e.Reason
}

// ReadOptions configures NewCSVReader and NewJSONReader. The zero value is
// ready to use.
type ReadOptions struct {
	// AddressColumn names the CSV column holding the address (matched
	// case-insensitively, ignoring surrounding spaces). When empty, the
	// column named "email" is used, else the one named "address". Ignored
	// for JSON, whose elements always use the "address" field.
	AddressColumn string
	// MaxBytes refuses lists larger than this many bytes with a *ListError.
	// 0 (or negative) means no limit.
	MaxBytes int64
	// MaxLineBytes refuses, with a *ListError, a CSV row longer than this
	// many bytes (a physical line, or a row whose quoted values span
	// several lines) or a JSON element larger than this. It also bounds the
	// memory the reader needs. 0 (or negative) means DefaultMaxLineBytes.
	MaxLineBytes int
	// Delimiter forces the CSV field delimiter. When 0 it is detected from
	// the header line: ';' if it has more semicolons than commas outside
	// quotes, else ','. It must be an ASCII punctuation character or a tab,
	// and not '"'.
	Delimiter rune
	// Encoding is the CSV's declared character encoding ("": UTF-8);
	// a Latin-1 or Windows-1252 list is decoded to UTF-8 as it is read.
	// Ignored for JSON, which is UTF-8.
	Encoding Encoding
}

func (o ReadOptions) lineLimit() int {
	if o.MaxLineBytes <= 0 {
		return DefaultMaxLineBytes
	}
	return o.MaxLineBytes
}

// TargetReader yields the rows of a target list one at a time, so that a
// list of a million rows is never held in memory.
type TargetReader interface {
	// Next returns the next row. The row is valid until the next call (see
	// Row). A *RowError means that row is bad: report it and call Next
	// again. io.EOF means the list ended. Any other error (a *ListError, or
	// an I/O error from the source) is fatal for the whole import and is
	// returned again by every later call.
	Next() (Row, error)
	// Columns returns the merge-variable names: for CSV the header minus the
	// address column, in header order; for JSON the names seen so far, in
	// order of first appearance. The caller may modify the returned slice.
	Columns() []string
}

// humanBytes formats a size in binary units: "200 MiB", "64 KiB", "1.5 GiB".
func humanBytes(n int64) string {
	if n < 1024 {
		return plural(int(n), "byte")
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f := float64(n) / 1024
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	s := strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0")
	return s + " " + units[i]
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// listNames quotes header names for a message, eliding after a few.
func listNames(names []string) string {
	var b strings.Builder
	for i, name := range names {
		if i == maxListedColumns {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(name))
	}
	return b.String()
}
