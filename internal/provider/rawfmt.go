package provider

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// field is one key=value of a raw answer line.
type field struct{ key, value string }

// encodeLine writes "<tag> k1=v1 k2=v2 …" on one line. Values are written
// bare when they are plain tokens, else Go-quoted (strconv.Quote), so any
// text (multi-line SMTP replies, error strings) survives the round trip.
func encodeLine(tag string, fields ...field) []byte {
	var b strings.Builder
	b.WriteString(tag)
	for _, f := range fields {
		b.WriteByte(' ')
		b.WriteString(f.key)
		b.WriteByte('=')
		if isBareToken(f.value) {
			b.WriteString(f.value)
		} else {
			b.WriteString(strconv.Quote(f.value))
		}
	}
	return []byte(b.String())
}

func isBareToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '=' || c == '\\' {
			return false
		}
	}
	return true
}

// parseLine reads a line written by encodeLine. ok is false when the line
// does not start with "<tag> " or is malformed; the first value of a key
// repeated wins.
func parseLine(raw []byte, tag string) (map[string]string, bool) {
	s := string(raw)
	if !strings.HasPrefix(s, tag+" ") {
		return nil, false
	}
	s = s[len(tag)+1:]
	out := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return out, true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \"") {
			return nil, false
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false
			}
			if val, err = strconv.Unquote(q); err != nil {
				return nil, false
			}
			s = s[len(q):]
			if s != "" && s[0] != ' ' {
				return nil, false
			}
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		if _, dup := out[key]; !dup {
			out[key] = val
		}
	}
}

// maxReason bounds the sentences put in Verdict.Reason.
const maxReason = 300

// oneLine makes s fit a Reason: valid UTF-8, control characters as spaces,
// runs of white space collapsed, at most maxReason bytes.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		if b.Len()+utf8.RuneLen(r) > maxReason {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
