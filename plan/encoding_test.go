package plan

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// latin1List is a list as a spreadsheet on Windows saves it: "Müller"
// and "Éloïse" in Latin-1 (also their Windows-1252 bytes), one byte each.
const latin1List = "email,name\nmuller@example.com,M\xfcller\neloise@example.com,\xc9lo\xefse\n"

func TestReadCSVDeclaredEncoding(t *testing.T) {
	t.Parallel()
	for _, enc := range []Encoding{EncodingLatin1, EncodingWindows1252} {
		tr, err := NewCSVReader(strings.NewReader(latin1List), ReadOptions{Encoding: enc})
		require.NoError(t, err, enc)
		items, err := readAll(t, tr)
		require.NoError(t, err)
		require.Equal(t, []item{
			{Line: 2, Address: "muller@example.com", Vars: map[string]string{"name": "Müller"}},
			{Line: 3, Address: "eloise@example.com", Vars: map[string]string{"name": "Éloïse"}},
		}, items, enc)
	}
	// Windows-1252's own characters (the euro sign, curly quotes) are not
	// Latin-1's.
	tr, err := NewCSVReader(strings.NewReader("email,note\nann@example.com,\x80 5 \x93net\x94\n"), ReadOptions{Encoding: EncodingWindows1252})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	require.NoError(t, err)
	require.Equal(t, "€ 5 “net”", items[0].Vars["note"])
}

// TestReadCSVNotUTF8 is a Latin-1 list read as UTF-8: the start of a
// short file is mostly accented names, so the whole file is refused,
// naming the line of its first byte that is not UTF-8 and what to do; a
// longer file's lines are rejected one by one, each saying the same.
func TestReadCSVNotUTF8(t *testing.T) {
	t.Parallel()
	_, err := NewCSVReader(strings.NewReader("email,nom\na@b.fr,\xc9lo\xefse H\xe9rv\xe9\n"), ReadOptions{})
	requireListError(t, err, 2, "the file is not UTF-8 (byte 0xC9); if the file is in Latin-1 or Windows-1252, declare that encoding")
	require.Equal(t, "line 2: the file is not UTF-8 (byte 0xC9); "+notUTF8Hint, err.Error())

	tr, err := NewCSVReader(strings.NewReader(latin1List), ReadOptions{})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	require.NoError(t, err)
	require.Equal(t, []item{
		{Line: 2, Reject: `column "name" is not valid UTF-8 (byte 0xFC); ` + notUTF8Hint},
		{Line: 3, Reject: `column "name" is not valid UTF-8 (byte 0xC9); ` + notUTF8Hint},
	}, items)

	// A file with a UTF-8 byte order mark is UTF-8, whatever was declared.
	_, err = NewCSVReader(strings.NewReader("\xef\xbb\xbfemail\nann@example.com\n"), ReadOptions{Encoding: EncodingLatin1})
	requireListError(t, err, 0, "the file starts with a UTF-8 byte order mark, so it is UTF-8, not Latin-1 (ISO-8859-1): import it as UTF-8")
}

// TestReadCSVDeclaredEncodingLimit: the size limit counts the bytes as
// uploaded, not as decoded.
func TestReadCSVDeclaredEncodingLimit(t *testing.T) {
	t.Parallel()
	list := "email,name\n" + strings.Repeat("ann@example.com,\xe9\xe9\xe9\xe9\n", 10)
	tr, err := NewCSVReader(strings.NewReader(list), ReadOptions{Encoding: EncodingLatin1, MaxBytes: int64(len(list))})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	require.NoError(t, err)
	require.Len(t, items, 10)

	tr, err = NewCSVReader(strings.NewReader(list), ReadOptions{Encoding: EncodingLatin1, MaxBytes: int64(len(list) - 1)})
	if err == nil {
		_, err = readAll(t, tr)
	}
	requireListError(t, err, 0, "the list is larger than the")
}

func TestParseEncoding(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Encoding{
		"": EncodingUTF8, "UTF-8": EncodingUTF8, "latin-1": EncodingLatin1, "ISO-8859-1": EncodingLatin1,
		"latin1": EncodingLatin1, "windows-1252": EncodingWindows1252, "CP1252": EncodingWindows1252,
	} {
		got, err := ParseEncoding(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ParseEncoding("koi8-r")
	require.EqualError(t, err, `encoding: must be utf-8, iso-8859-1 (latin-1) or windows-1252, not "koi8-r"`)
}
