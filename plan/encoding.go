package plan

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
)

// Encoding is the character encoding a CSV target list is declared in.
// Lists are read as UTF-8 unless the upload says otherwise: spreadsheets
// on Windows save "CSV" in Windows-1252, older tools in Latin-1.
type Encoding string

// The encodings a CSV list may be declared in.
const (
	EncodingUTF8        Encoding = "utf-8"
	EncodingLatin1      Encoding = "iso-8859-1"
	EncodingWindows1252 Encoding = "windows-1252"
)

// Encodings lists the encodings, in the order a form offers them.
var Encodings = []Encoding{EncodingUTF8, EncodingLatin1, EncodingWindows1252}

// Label is how a form names the encoding.
func (e Encoding) Label() string {
	switch e {
	case EncodingLatin1:
		return "Latin-1 (ISO-8859-1)"
	case EncodingWindows1252:
		return "Windows-1252"
	}
	return "UTF-8"
}

// ParseEncoding reads an encoding's name as a form field or a
// Content-Type's charset parameter gives it, ignoring case: "" or utf-8
// (utf8), iso-8859-1 (latin-1, latin1, iso8859-1), windows-1252 (cp1252).
func ParseEncoding(s string) (Encoding, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "utf-8", "utf8":
		return EncodingUTF8, nil
	case "iso-8859-1", "iso8859-1", "iso_8859-1", "latin-1", "latin1", "l1":
		return EncodingLatin1, nil
	case "windows-1252", "cp1252", "x-cp1252":
		return EncodingWindows1252, nil
	}
	return "", fieldErr("encoding", "must be utf-8, iso-8859-1 (latin-1) or windows-1252, not %q", strings.TrimSpace(s))
}

// notUTF8Hint follows the sentence saying a line is not UTF-8.
const notUTF8Hint = "if the file is in Latin-1 or Windows-1252, declare that encoding when importing it, or save it as CSV UTF-8"

// notUTF8 says that value (of a line) is not UTF-8, naming its first
// byte that is not, with notUTF8Hint.
func notUTF8(what, value string) string {
	for i := 0; i < len(value); {
		r, size := utf8.DecodeRuneInString(value[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Sprintf("%s is not valid UTF-8 (byte 0x%02X); %s", what, value[i], notUTF8Hint)
		}
		i += size
	}
	return what + " is not valid UTF-8; " + notUTF8Hint
}

// decodeList returns a reader of r's text as UTF-8, decoded from enc. A
// list declared in an 8-bit encoding is limited to maxBytes as uploaded
// (decoding may lengthen it); one that starts with a UTF-8 byte order
// mark is UTF-8 whatever was declared, and is refused rather than read
// as mojibake.
func decodeList(r io.Reader, enc Encoding, maxBytes int64) (io.Reader, error) {
	var cm *charmap.Charmap
	switch enc {
	case "", EncodingUTF8:
		return r, nil
	case EncodingLatin1:
		cm = charmap.ISO8859_1
	case EncodingWindows1252:
		cm = charmap.Windows1252
	default:
		return nil, fieldErr("encoding", "must be utf-8, iso-8859-1 or windows-1252, not %q", enc)
	}
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len(utf8BOM)); bytes.Equal(head, utf8BOM) {
		return nil, &ListError{Reason: fmt.Sprintf("the file starts with a UTF-8 byte order mark, so it is UTF-8, not %s: import it as UTF-8", enc.Label())}
	}
	var src io.Reader = br
	if maxBytes > 0 {
		src = &rawLimit{r: br, left: maxBytes, limit: maxBytes}
	}
	return cm.NewDecoder().Reader(src), nil
}

// rawLimit refuses a list larger than the limit as uploaded, with the
// message csvGuard gives a UTF-8 list.
type rawLimit struct {
	r     io.Reader
	left  int64
	limit int64
}

func (l *rawLimit) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		return int(l.left), &ListError{TooLarge: true, Reason: fmt.Sprintf("the list is larger than the %s limit", humanBytes(l.limit))}
	}
	l.left -= int64(n)
	return n, err
}
