package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// jsonReadChunk caps one read from the source of a JSON list, so that the
	// bytes buffered ahead of the element being decoded stay small and the
	// per-element limit can be enforced while reading.
	jsonReadChunk = 16 << 10
	// maxJSONVarNames bounds the union of var names a JSON list may use: each
	// name is kept for Columns, so an unbounded number would defeat streaming.
	maxJSONVarNames = 1024
)

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
