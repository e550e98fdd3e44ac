package plan

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// sniffBytes is how much of a CSV file is inspected to tell text from
// binary and to detect the delimiter.
const sniffBytes = 8 << 10

// NewCSVReader returns a reader of a CSV target list. It reads and checks
// the header eagerly and returns a *ListError if the list cannot be read at
// all (empty, binary, header problems, no address column).
//
// The input is UTF-8, with or without a byte order mark, with CRLF or LF
// line ends. The first record is the header. Values may be quoted as in
// RFC 4180 (embedded delimiters, doubled quotes and newlines); quotes are
// strict. Empty lines, and rows whose every value is empty or blank, are not
// rows: they are skipped without a report because they carry no data.
//
// Row problems (wrong number of values, an empty address, a NUL byte,
// invalid UTF-8, a stray quote inside an unquoted value) are reported as a
// *RowError and reading continues. A quoted value that is not closed, or a
// closing quote followed by other text, makes the rest of the file
// ambiguous, so it is a *ListError.
func NewCSVReader(r io.Reader, opts ReadOptions) (TargetReader, error) {
	delim := byte(',')
	if opts.Delimiter != 0 {
		d := opts.Delimiter
		if d >= utf8.RuneSelf || d == '"' || !(d == '\t' || unicode.IsPunct(d) || unicode.IsSymbol(d)) {
			return nil, fmt.Errorf("plan: CSV delimiter %q is not supported (use ',', ';', '|' or a tab)", d)
		}
		delim = byte(d)
	}

	maxBytes := opts.MaxBytes
	if opts.Encoding != "" && opts.Encoding != EncodingUTF8 {
		var err error
		if r, err = decodeList(r, opts.Encoding, maxBytes); err != nil {
			return nil, err
		}
		maxBytes = 0 // counted as uploaded, before decoding
	}

	head := make([]byte, sniffBytes)
	n, err := io.ReadFull(r, head)
	atEOF := err == io.EOF || err == io.ErrUnexpectedEOF
	if le := (*ListError)(nil); errors.As(err, &le) {
		return nil, le
	}
	if err != nil && !atEOF {
		return nil, fmt.Errorf("plan: reading the target list: %w", err)
	}
	head = head[:n]
	bomLen := 0
	if bytes.HasPrefix(head, utf8BOM) {
		head, bomLen = head[len(utf8BOM):], len(utf8BOM)
	}
	if len(head) == 0 && atEOF {
		return nil, &ListError{Reason: "the list is empty (no header row)"}
	}
	if reason, line := sniffBinary(head, !atEOF); reason != "" {
		return nil, &ListError{Line: line, Reason: reason}
	}
	if opts.Delimiter == 0 {
		delim = detectDelimiter(head)
	}

	g := &csvGuard{
		src:      io.MultiReader(bytes.NewReader(head), r),
		total:    int64(bomLen),
		maxBytes: maxBytes,
		limit:    opts.lineLimit(),
		sc:       csvScanner{delim: delim, line: 1},
	}
	cr := csv.NewReader(g)
	cr.Comma = rune(delim)
	cr.FieldsPerRecord = -1 // checked per row, to reject the row and not the list
	cr.ReuseRecord = true
	cr.LazyQuotes = false

	cl := &csvReader{cr: cr, guard: g}
	if err := cl.readHeader(opts.AddressColumn); err != nil {
		return nil, err
	}
	return cl, nil
}

type csvReader struct {
	cr      *csv.Reader
	guard   *csvGuard
	header  []string // trimmed names
	addr    int      // index of the address column in header
	columns []string // header minus the address column
	vars    map[string]string
	err     error // sticky: io.EOF or a fatal error
}

func (c *csvReader) readHeader(addressColumn string) error {
	rec, err := c.cr.Read()
	if err != nil {
		if err == io.EOF {
			return &ListError{Reason: "the list is empty (no header row)"}
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return &ListError{Line: pe.StartLine, Reason: "the header row has a quote error: " + pe.Err.Error()}
		}
		return c.fatal(err, rec)
	}
	line, _ := c.cr.FieldPos(0)
	c.header = make([]string, len(rec))
	byName := make(map[string]int, len(rec))
	for i, raw := range rec {
		name := strings.TrimSpace(raw)
		switch {
		case strings.IndexByte(name, 0) >= 0:
			return &ListError{Line: line, Reason: "the header row contains a NUL byte"}
		case !utf8.ValidString(name):
			return &ListError{Line: line, Reason: notUTF8("the header row", name)}
		case name == "":
			return &ListError{Line: line, Reason: fmt.Sprintf("column %d of the header has no name", i+1)}
		}
		key := strings.ToLower(name)
		if j, dup := byName[key]; dup {
			return &ListError{Line: line, Reason: fmt.Sprintf(
				"columns %d (%q) and %d (%q) of the header have the same name", j+1, c.header[j], i+1, name)}
		}
		byName[key] = i
		c.header[i] = name
	}

	c.addr = -1
	if want := strings.TrimSpace(addressColumn); want != "" {
		i, ok := byName[strings.ToLower(want)]
		if !ok {
			return &ListError{Line: line, Reason: fmt.Sprintf(
				"the address column %q is not in the header, which has %s", want, listNames(c.header))}
		}
		c.addr = i
	} else if i, ok := byName["email"]; ok {
		c.addr = i
	} else if i, ok := byName["address"]; ok {
		c.addr = i
	} else {
		return &ListError{Line: line, Reason: fmt.Sprintf(
			`no address column: expected a column named "email" or "address", the header has %s`, listNames(c.header))}
	}

	c.columns = make([]string, 0, len(c.header)-1)
	for i, name := range c.header {
		if i != c.addr {
			c.columns = append(c.columns, name)
		}
	}
	c.vars = make(map[string]string, len(c.columns))
	return nil
}

func (c *csvReader) Columns() []string {
	return append([]string(nil), c.columns...)
}

func (c *csvReader) Next() (Row, error) {
	if c.err != nil {
		return Row{}, c.err
	}
	for {
		rec, err := c.cr.Read()
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && pe.Err == csv.ErrBareQuote {
				// encoding/csv drops the rest of the physical line and carries
				// on with the next one, exactly as csvScanner does: the error
				// stays confined to this row.
				return Row{}, &RowError{Line: pe.StartLine, Reason: fmt.Sprintf(
					`%s has a quote (") inside an unquoted value; quote the whole value and double the quotes inside it`,
					c.columnName(len(rec)))}
			}
			if err == io.EOF {
				c.err = io.EOF
				return Row{}, io.EOF
			}
			c.err = c.fatal(err, rec)
			return Row{}, c.err
		}
		line, _ := c.cr.FieldPos(0)
		if blankRecord(rec) {
			continue
		}
		if len(rec) != len(c.header) {
			return Row{}, &RowError{Line: line, Reason: fmt.Sprintf(
				"has %s, the header has %d", plural(len(rec), "field"), len(c.header))}
		}
		for i, v := range rec {
			if strings.IndexByte(v, 0) >= 0 {
				return Row{}, &RowError{Line: line, Reason: c.columnName(i) + " contains a NUL byte"}
			}
			if !utf8.ValidString(v) {
				return Row{}, &RowError{Line: line, Reason: notUTF8(c.columnName(i), v)}
			}
		}
		address := rec[c.addr]
		if strings.TrimSpace(address) == "" {
			return Row{}, &RowError{Line: line, Reason: "the address is empty"}
		}
		clear(c.vars)
		for i, name := range c.header {
			if i != c.addr {
				c.vars[name] = rec[i]
			}
		}
		return Row{Line: line, Address: address, Vars: c.vars}, nil
	}
}

// fatal turns an error from encoding/csv that is not a row problem into the
// error that ends the import. rec is the partial record csv returned with it.
func (c *csvReader) fatal(err error, rec []string) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		if pe.Err == csv.ErrQuote {
			g := &c.guard.sc
			if c.guard.eof && g.state == scanQuoted && g.quoteLine <= pe.Line {
				return &ListError{Line: g.quoteLine, Reason: fmt.Sprintf(
					"a quoted field is not closed (%s); the file ends inside it", c.columnName(len(rec)))}
			}
			return &ListError{Line: pe.Line, Reason: fmt.Sprintf(
				`in %s, a closing quote is followed by other text at byte %d of the line; a quote inside a quoted value must be doubled ("")`,
				c.columnName(len(rec)), pe.Column)}
		}
		return &ListError{Line: pe.Line, Reason: pe.Err.Error()}
	}
	if c.guard.err != nil {
		return c.guard.err
	}
	return fmt.Errorf("plan: reading the target list: %w", err)
}

// columnName names column i (0-based) for a message.
func (c *csvReader) columnName(i int) string {
	if i >= 0 && i < len(c.header) {
		return fmt.Sprintf("column %q", c.header[i])
	}
	return fmt.Sprintf("column %d", i+1)
}

func blankRecord(rec []string) bool {
	for _, v := range rec {
		if strings.TrimSpace(v) != "" {
			return false
		}
	}
	return true
}

// sniffBinary returns why head (the start of the file, BOM removed) is not a
// text file, or "", and the line it names (0: none). more says whether the
// file continues past head, in which case a multi-byte character cut at
// the end of head is not an error. One bad byte is a bad row; a start that
// is more than a tenth control characters or invalid UTF-8 is not a
// UTF-8 CSV file at all: text in an 8-bit encoding when it has next to no
// control characters (the line of its first byte that is not UTF-8 is
// named), else not text.
func sniffBinary(head []byte, more bool) (string, int) {
	const notText = "the file is not a text CSV file"
	switch {
	case bytes.HasPrefix(head, []byte{0xFF, 0xFE}), bytes.HasPrefix(head, []byte{0xFE, 0xFF}):
		return notText + " (it is UTF-16 encoded; save it as CSV UTF-8)", 0
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte{0xD0, 0xCF, 0x11, 0xE0}):
		return notText + " (it looks like a spreadsheet workbook; save it as CSV UTF-8)", 0
	}
	control, invalid, firstInvalid := 0, 0, -1
	for i := 0; i < len(head); {
		c := head[i]
		if c < utf8.RuneSelf {
			if c == 0x7F || (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') {
				control++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && size == 1 {
			if more && !utf8.FullRune(head[i:]) {
				break
			}
			if firstInvalid < 0 {
				firstInvalid = i
			}
			invalid++
		}
		i += size
	}
	switch {
	case (control+invalid)*10 <= len(head):
		return "", 0
	case control*100 <= len(head) && firstInvalid >= 0:
		line := 1 + bytes.Count(head[:firstInvalid], []byte{'\n'})
		return fmt.Sprintf("the file is not UTF-8 (byte 0x%02X); %s", head[firstInvalid], notUTF8Hint), line
	}
	return notText, 0
}

// detectDelimiter counts commas and semicolons outside quotes on the first
// non-blank line of head; ';' wins only with a strict majority.
func detectDelimiter(head []byte) byte {
	head = bytes.TrimLeft(head, "\r\n")
	commas, semicolons := 0, 0
	quoted := false
scan:
	for _, c := range head {
		switch {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '\n':
			break scan
		case c == ',':
			commas++
		case c == ';':
			semicolons++
		}
	}
	if semicolons > commas {
		return ';'
	}
	return ','
}
