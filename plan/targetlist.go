package plan

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxLineBytes is the row size limit used when ReadOptions.MaxLineBytes
// is zero. An email list row is a few hundred bytes; a row of 64 KiB means a
// broken file (typically a quote that is never closed), not a long address.
const DefaultMaxLineBytes = 64 << 10

const (
	// sniffBytes is how much of a CSV file is inspected to tell text from
	// binary and to detect the delimiter.
	sniffBytes = 8 << 10
	// jsonReadChunk caps one read from the source of a JSON list, so that the
	// bytes buffered ahead of the element being decoded stay small and the
	// per-element limit can be enforced while reading.
	jsonReadChunk = 16 << 10
	// maxJSONVarNames bounds the union of var names a JSON list may use: each
	// name is kept for Columns, so an unbounded number would defeat streaming.
	maxJSONVarNames = 1024
	// maxListedColumns bounds how many header names an error message lists.
	maxListedColumns = 20
)

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

// csvGuard sits between the source and encoding/csv. It enforces MaxBytes and
// the row size limit while the bytes stream past, before encoding/csv buffers
// them: encoding/csv has no limit of its own and would otherwise keep
// appending a never-closed quoted value until the file ends.
type csvGuard struct {
	src      io.Reader
	total    int64 // bytes of the list read so far, BOM included
	maxBytes int64
	limit    int
	sc       csvScanner
	eof      bool  // src returned io.EOF
	err      error // sticky *ListError
}

func (g *csvGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.src.Read(p)
	if le := (*ListError)(nil); errors.As(err, &le) {
		g.err = le // a limit of the source's (rawLimit)
	}
	if g.maxBytes > 0 && g.total+int64(n) > g.maxBytes {
		n = int(g.maxBytes - g.total)
		g.err = &ListError{TooLarge: true, Reason: fmt.Sprintf("the list is larger than the %s limit", humanBytes(g.maxBytes))}
	}
	for i, b := range p[:n] {
		g.sc.step(b)
		if g.sc.span > g.limit {
			g.err = g.sc.tooLong(g.limit)
			g.total += int64(i)
			return i, g.err
		}
	}
	g.total += int64(n)
	if g.err != nil {
		return n, g.err
	}
	if err == io.EOF {
		g.eof = true
	}
	return n, err
}

type scanState uint8

const (
	scanLineStart   scanState = iota // between records, at the start of a line
	scanLineStartCR                  // a '\r' at the start of a line: a blank CRLF line or a record
	scanFieldStart                   // inside a record, at the start of a value
	scanUnquoted
	scanQuoted
	scanQuote    // a '"' inside a quoted value: closes it or starts a doubled ""
	scanQuoteCR  // '"' then '\r': a CRLF line end or an error
	scanSkipLine // the rest of a line encoding/csv drops after a quote error
)

// scanInRecord0 is the first state inside a record; those after it are too.
const scanInRecord0 = scanFieldStart

// csvScanner follows the CSV grammar byte by byte exactly as encoding/csv
// (strict quotes) splits records, so that the guard knows where each record
// starts and how long it is without buffering it. FuzzReadCSV checks that it
// finds the same record starts as encoding/csv.
type csvScanner struct {
	delim      byte
	state      scanState
	line       int // current physical line, 1-based
	recordLine int // line the current record started on
	quoteLine  int // line the last quoted value opened on
	span       int // bytes of the current record so far
	records    int // records started
}

func (s *csvScanner) step(c byte) {
	switch s.state {
	case scanLineStart:
		switch c {
		case '\n':
			s.line++
			return
		case '\r':
			s.state = scanLineStartCR
			return
		}
		s.begin(0)
		s.fieldStart(c)
	case scanLineStartCR:
		if c == '\n' {
			s.line++
			s.state = scanLineStart
			return
		}
		s.begin(1) // the '\r' is the start of an unquoted value
		s.state = scanUnquoted
		s.unquoted(c)
	case scanFieldStart:
		s.fieldStart(c)
	case scanUnquoted:
		s.unquoted(c)
	case scanQuoted:
		switch c {
		case '"':
			s.state = scanQuote
		case '\n':
			s.line++
		}
	case scanQuote:
		switch c {
		case '"':
			s.state = scanQuoted
		case s.delim:
			s.state = scanFieldStart
		case '\n':
			s.end()
		case '\r':
			s.state = scanQuoteCR
		default:
			s.state = scanSkipLine
		}
	case scanQuoteCR:
		if c == '\n' {
			s.end()
		} else {
			s.state = scanSkipLine
		}
	case scanSkipLine:
		if c == '\n' {
			s.end()
		}
	}
	if s.state >= scanInRecord0 {
		s.span++
	}
}

func (s *csvScanner) fieldStart(c byte) {
	switch c {
	case '"':
		s.state = scanQuoted
		s.quoteLine = s.line
	case s.delim:
		s.state = scanFieldStart
	case '\n':
		s.end()
	default:
		s.state = scanUnquoted
	}
}

func (s *csvScanner) unquoted(c byte) {
	switch c {
	case s.delim:
		s.state = scanFieldStart
	case '\n':
		s.end()
	case '"':
		s.state = scanSkipLine // encoding/csv: ErrBareQuote, rest of line dropped
	}
}

func (s *csvScanner) begin(span int) {
	s.records++
	s.recordLine = s.line
	s.span = span
}

func (s *csvScanner) end() {
	s.line++
	s.state = scanLineStart
	s.span = 0
}

func (s *csvScanner) tooLong(limit int) *ListError {
	if s.state == scanQuoted {
		return &ListError{Line: s.quoteLine, Reason: fmt.Sprintf(
			"a quoted field is still open after %s (the row size limit); is its closing quote missing?", humanBytes(int64(limit)))}
	}
	return &ListError{Line: s.recordLine, Reason: fmt.Sprintf(
		"the row is longer than the %s limit", humanBytes(int64(limit)))}
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

// NewJSONReader returns a reader of a JSON target list: an array of objects
// {"address": "...", "vars": {"name": "value", ...}}. It streams: only one
// element is held in memory at a time. It reads the opening '[' eagerly and
// returns a *ListError if the input is empty or not an array.
//
// Row.Line is the 1-based index of the element in the array. A UTF-8 byte
// order mark is skipped. "address" must be a string; "vars" is optional (null
// counts as absent) and each var must be a string, number or boolean
// (numbers and booleans become their literal text). Any other field, a null,
// object or array var, a repeated key, a NUL character or invalid UTF-8 make
// the element a *RowError. A JSON syntax error, an input that is not an
// array, or data after the array is a *ListError naming the byte offset.
func NewJSONReader(r io.Reader, opts ReadOptions) (TargetReader, error) {
	src := &jsonSource{src: r, maxBytes: opts.MaxBytes, limit: int64(opts.lineLimit())}
	// Skip a BOM: encoding/json rejects it, but editors on Windows write it.
	var bom [3]byte
	n, err := io.ReadFull(r, bom[:])
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("plan: reading the target list: %w", err)
	}
	head := bom[:n]
	if bytes.Equal(head, utf8BOM) {
		src.bomLen, head = 3, nil
	}
	src.src = io.MultiReader(bytes.NewReader(head), r)
	src.total = src.bomLen

	j := &jsonReader{src: src, names: make(map[string]string), vars: make(map[string]string)}
	j.dec = json.NewDecoder(src)
	j.dec.UseNumber()

	tok, err := j.dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, &ListError{Reason: "the list is empty (no JSON array)"}
		}
		return nil, j.fatal(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, &ListError{Reason: fmt.Sprintf(
			"the JSON list must be an array of targets, but its top-level value is %s", jsonKind(tok))}
	}
	return j, nil
}

type jsonReader struct {
	dec     *json.Decoder
	src     *jsonSource
	index   int // elements read
	raw     json.RawMessage
	elem    bytes.Reader
	names   map[string]string // interned var names seen so far
	columns []string          // var names in order of first appearance
	vars    map[string]string
	err     error // sticky: io.EOF or a fatal error
}

func (j *jsonReader) Columns() []string {
	return append([]string(nil), j.columns...)
}

func (j *jsonReader) offset() int64 { return j.dec.InputOffset() + j.src.bomLen }

func (j *jsonReader) Next() (Row, error) {
	if j.err != nil {
		return Row{}, j.err
	}
	if !j.dec.More() {
		j.err = j.finish()
		return Row{}, j.err
	}
	j.index++
	start := j.dec.InputOffset()
	j.src.elemStart, j.src.elem = start+j.src.bomLen, j.index
	if err := j.dec.Decode(&j.raw); err != nil {
		j.err = j.fatal(err)
		return Row{}, j.err
	}
	if size := j.dec.InputOffset() - start; size > j.src.limit {
		j.err = j.src.tooLarge()
		return Row{}, j.err
	}
	row, rerr := j.parseElement(j.raw)
	if rerr != nil {
		if le, ok := rerr.(*ListError); ok {
			j.err = le
			return Row{}, le
		}
		return Row{}, rerr
	}
	return row, nil
}

// finish reads the closing ']' and checks that nothing follows the array.
func (j *jsonReader) finish() error {
	tok, err := j.dec.Token()
	if err != nil {
		return j.fatal(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != ']' {
		return &ListError{Reason: fmt.Sprintf("invalid JSON at byte %d: unexpected %s", j.offset(), jsonKind(tok))}
	}
	j.dec.More() // moves the decoder past whitespace, onto what follows
	at := j.offset()
	if _, err := j.dec.Token(); err != io.EOF {
		if j.src.err != nil {
			return j.src.err
		}
		return &ListError{Reason: fmt.Sprintf("unexpected data after the JSON array at byte %d", at)}
	}
	return io.EOF
}

func (j *jsonReader) fatal(err error) error {
	if j.src.err != nil {
		return j.src.err
	}
	where := ""
	if j.index > 0 {
		where = fmt.Sprintf(" (element %d)", j.index)
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &ListError{Reason: fmt.Sprintf("invalid JSON at byte %d%s: %s", j.syntaxOffset(se)+j.src.bomLen, where, se.Error())}
	case err == io.EOF, err == io.ErrUnexpectedEOF:
		return &ListError{Reason: fmt.Sprintf("the JSON ends at byte %d%s before the array is closed", j.src.total, where)}
	}
	return fmt.Errorf("plan: reading the target list: %w", err)
}

// syntaxOffset returns the 0-based offset of the byte a syntax error is at.
// For an error inside a value, json.Decoder reports a count of bytes its
// scanner has seen across calls, which skips the bytes Token consumed; so
// the value is scanned again from where the decoder stands, which is still
// its start (the decoder does not advance on error), and the bytes it needs
// are still buffered. For an error between values (Token's "expected comma"),
// the decoder stands on the offending byte and that rescan finds nothing.
func (j *jsonReader) syntaxOffset(se *json.SyntaxError) int64 {
	pos := j.dec.InputOffset()
	var raw json.RawMessage
	var se2 *json.SyntaxError
	if err := json.NewDecoder(j.dec.Buffered()).Decode(&raw); errors.As(err, &se2) {
		return pos + se2.Offset - 1
	}
	return pos
}

// parseElement turns one syntactically valid element into a Row, a
// *RowError, or (when the list uses too many var names) a *ListError.
func (j *jsonReader) parseElement(raw []byte) (Row, error) {
	line := j.index
	rowErr := func(format string, args ...any) (Row, error) {
		return Row{}, &RowError{Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(raw) {
		return rowErr("the element is not valid UTF-8")
	}
	j.elem.Reset(raw)
	d := json.NewDecoder(&j.elem)
	d.UseNumber()
	// raw is valid JSON, so Token cannot fail on it.
	tok, _ := d.Token()
	if tok != json.Delim('{') {
		return rowErr("the element is %s, not an object", jsonKind(tok))
	}
	clear(j.vars)
	var address string
	seenAddress, seenVars := false, false
	for d.More() {
		kt, _ := d.Token()
		key, _ := kt.(string)
		switch key {
		case "address":
			if seenAddress {
				return rowErr(`"address" appears twice`)
			}
			seenAddress = true
			vt, _ := d.Token()
			s, ok := vt.(string)
			if !ok {
				return rowErr("the address must be a string, not %s", jsonKind(vt))
			}
			address = s
		case "vars":
			if seenVars {
				return rowErr(`"vars" appears twice`)
			}
			seenVars = true
			vt, _ := d.Token()
			if vt == nil {
				continue // "vars": null is no vars
			}
			if vt != json.Delim('{') {
				return rowErr(`"vars" must be an object, not %s`, jsonKind(vt))
			}
			for d.More() {
				nt, _ := d.Token()
				name := strings.TrimSpace(nt.(string))
				vt, _ := d.Token()
				var value string
				switch v := vt.(type) {
				case string:
					value = v
				case json.Number:
					value = v.String()
				case bool:
					value = strconv.FormatBool(v)
				default:
					return rowErr("var %q is %s; a var must be a string, number or boolean", name, jsonKind(vt))
				}
				switch {
				case name == "":
					return rowErr("a var has an empty name")
				case strings.IndexByte(name, 0) >= 0:
					return rowErr("a var name contains a NUL character")
				case strings.IndexByte(value, 0) >= 0:
					return rowErr("var %q contains a NUL character", name)
				}
				if _, dup := j.vars[name]; dup {
					return rowErr("var %q appears twice", name)
				}
				interned, err := j.intern(name)
				if err != nil {
					return Row{}, err
				}
				j.vars[interned] = value
			}
			_, _ = d.Token() // '}'
		default:
			return rowErr(`unknown field %q; an element has only "address" and "vars"`, key)
		}
	}
	switch {
	case !seenAddress:
		return rowErr("the address is missing")
	case strings.TrimSpace(address) == "":
		return rowErr("the address is empty")
	case strings.IndexByte(address, 0) >= 0:
		return rowErr("the address contains a NUL character")
	}
	return Row{Line: line, Address: address, Vars: j.vars}, nil
}

// intern returns the shared copy of a var name, recording new names for
// Columns.
func (j *jsonReader) intern(name string) (string, error) {
	if s, ok := j.names[name]; ok {
		return s, nil
	}
	if len(j.names) >= maxJSONVarNames {
		return "", &ListError{Reason: fmt.Sprintf(
			"element %d: the list uses more than %d different var names", j.index, maxJSONVarNames)}
	}
	j.names[name] = name
	j.columns = append(j.columns, name)
	return name, nil
}

// jsonSource counts the bytes of a JSON list as encoding/json reads them,
// enforcing MaxBytes and the element size limit before the decoder buffers
// more than a read chunk past the limit.
type jsonSource struct {
	src       io.Reader
	bomLen    int64
	total     int64 // bytes read, BOM included
	maxBytes  int64
	limit     int64
	elem      int   // index of the element being read, 0 before the first
	elemStart int64 // offset where it starts
	err       error // sticky *ListError
}

func (s *jsonSource) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if len(p) > jsonReadChunk {
		p = p[:jsonReadChunk]
	}
	n, err := s.src.Read(p)
	s.total += int64(n)
	switch {
	case s.maxBytes > 0 && s.total > s.maxBytes:
		s.err = &ListError{TooLarge: true, Reason: fmt.Sprintf("the list is larger than the %s limit", humanBytes(s.maxBytes))}
	case s.total-s.elemStart > s.limit+jsonReadChunk:
		s.err = s.tooLarge()
	}
	if s.err != nil {
		return 0, s.err
	}
	return n, err
}

func (s *jsonSource) tooLarge() *ListError {
	if s.elem == 0 {
		return &ListError{TooLarge: true, Reason: fmt.Sprintf(
			"the JSON before the first element is larger than the %s limit", humanBytes(s.limit))}
	}
	return &ListError{TooLarge: true, Reason: fmt.Sprintf(
		"element %d is larger than the %s limit", s.elem, humanBytes(s.limit))}
}

// jsonKind names the JSON value a token starts, for messages.
func jsonKind(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", rune(v))
	}
	return fmt.Sprintf("%T", tok)
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
