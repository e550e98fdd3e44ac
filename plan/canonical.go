package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"unicode/utf8"
)

// errNotVars: a stored vars value is not a JSON object of strings, which
// no import writes.
var errNotVars = errors.New("not a JSON object of string values")

// AppendCanonicalVars appends to dst the canonical form ([CanonicalVars])
// of merge variables stored as JSON: any JSON object whose values are all
// strings, such as PostgreSQL's text output of a target's vars (jsonb
// orders keys by length, puts spaces after ':' and ',', and escapes fewer
// characters than encoding/json does). The audit recomputes a list's
// digest from the stored rows with it, a million rows at a time, so it
// decodes and re-encodes by hand instead of through a map; a property
// test holds it to CanonicalVars. It fails on anything else: a value that
// is not a string, a duplicate key, malformed JSON.
func AppendCanonicalVars(dst, src []byte) ([]byte, error) {
	p := varsParser{src: src}
	p.space()
	if !p.eat('{') {
		return dst, errNotVars
	}
	type pair struct{ k, v []byte }
	var pairs []pair
	var buf [8]pair
	pairs = buf[:0]
	p.space()
	if !p.eat('}') {
		for {
			p.space()
			k, ok := p.str()
			if !ok {
				return dst, errNotVars
			}
			p.space()
			if !p.eat(':') {
				return dst, errNotVars
			}
			p.space()
			v, ok := p.str()
			if !ok {
				return dst, errNotVars
			}
			pairs = append(pairs, pair{k, v})
			p.space()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return dst, errNotVars
			}
		}
	}
	p.space()
	if p.i != len(src) {
		return dst, errNotVars
	}
	if len(pairs) == 0 {
		return append(dst, "{}"...), nil
	}
	slices.SortFunc(pairs, func(a, b pair) int { return bytes.Compare(a.k, b.k) })
	dst = append(dst, '{')
	for i, kv := range pairs {
		if i > 0 {
			if bytes.Equal(kv.k, pairs[i-1].k) {
				return dst, errNotVars
			}
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, kv.k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, kv.v)
	}
	return append(dst, '}'), nil
}

type varsParser struct {
	src []byte
	i   int
}

func (p *varsParser) space() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *varsParser) eat(c byte) bool {
	if p.i < len(p.src) && p.src[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a JSON string and returns its decoded bytes: a sub-slice of
// the input when it has no escapes (the common case), a copy otherwise.
func (p *varsParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			s := p.src[start:p.i]
			p.i++
			return s, true
		case c == '\\':
			return p.escaped(start)
		case c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// escaped finishes a string that has escapes, from its start (just after
// the opening quote): it finds the closing quote and leaves the decoding to
// encoding/json, so that escapes (surrogate pairs included) are read as the
// import's encoder would have read them.
func (p *varsParser) escaped(start int) ([]byte, bool) {
	for p.i < len(p.src) {
		switch c := p.src[p.i]; {
		case c == '\\':
			p.i += 2
			continue
		case c == '"':
			var out string
			if err := json.Unmarshal(p.src[start-1:p.i+1], &out); err != nil {
				return nil, false
			}
			p.i++
			return []byte(out), true
		case c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// appendJSONString appends s as encoding/json's Marshal writes a string,
// so that the digest is the one the import computed. A string of plain
// ASCII — the common case — is written as it is; anything else (a quote,
// a backslash, a control or HTML character, any byte above ASCII) is left
// to encoding/json itself, so its escaping rules have one author.
func appendJSONString(dst, s []byte) []byte {
	for _, b := range s {
		if b < 0x20 || b >= utf8.RuneSelf || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			q, _ := json.Marshal(string(s)) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
