package plan

import (
	"errors"
	"fmt"
	"io"
)

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
