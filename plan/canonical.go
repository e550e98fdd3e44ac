package plan

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"unicode/utf16"
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

// escaped finishes a string that has escapes, from its start.
func (p *varsParser) escaped(start int) ([]byte, bool) {
	out := append([]byte(nil), p.src[start:p.i]...)
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			return out, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.src) {
			return nil, false
		}
		e := p.src[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by a low one is one character;
				// anything else is invalid, as encoding/json decodes it.
				r2 := utf8.RuneError
				if p.i+1 < len(p.src) && p.src[p.i] == '\\' && p.src[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if x, ok := p.hex4(); ok && utf16.DecodeRune(r, x) != utf8.RuneError {
						r2 = utf16.DecodeRune(r, x)
					} else {
						p.i = save
					}
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (p *varsParser) hex4() (rune, bool) {
	if p.i+4 > len(p.src) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.src[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// appendJSONString appends s as encoding/json's Marshal writes a string
// (HTML-safe: <, > and & escaped; invalid UTF-8 as U+FFFD; U+2028 and
// U+2029 escaped), so that the digest is the one the import computed.
func appendJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
