package plan

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// item is one result of Next: a row, or the reason of a *RowError.
type item struct {
	Line    int
	Address string
	Vars    map[string]string
	Reject  string
}

// readAll reads tr to the end. It returns the rows and row errors in order,
// and the error that ended the read (nil for io.EOF).
func readAll(t *testing.T, tr TargetReader) ([]item, error) {
	t.Helper()
	var items []item
	for {
		row, err := tr.Next()
		var re *RowError
		switch {
		case err == io.EOF:
			_, again := tr.Next()
			require.Equal(t, io.EOF, again, "io.EOF must be sticky")
			return items, nil
		case errors.As(err, &re):
			items = append(items, item{Line: re.Line, Reject: re.Reason})
		case err != nil:
			_, again := tr.Next()
			require.Equal(t, err, again, "a fatal error must be sticky")
			return items, err
		default:
			items = append(items, item{Line: row.Line, Address: row.Address, Vars: maps.Clone(row.Vars)})
		}
	}
}

func readCSV(t *testing.T, input string, opts ReadOptions) ([]item, []string, error) {
	t.Helper()
	tr, err := NewCSVReader(strings.NewReader(input), opts)
	if err != nil {
		return nil, nil, err
	}
	items, err := readAll(t, tr)
	return items, tr.Columns(), err
}

func requireListError(t *testing.T, err error, line int, reason string) {
	t.Helper()
	var le *ListError
	require.ErrorAs(t, err, &le)
	require.Equal(t, line, le.Line, "ListError.Line of %q", le.Error())
	require.Contains(t, le.Reason, reason)
}

func TestReadCSVMessyFile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/messy.csv")
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })

	tr, err := NewCSVReader(f, ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"First Name", "City", "Note"}, tr.Columns())

	items, err := readAll(t, tr)
	require.NoError(t, err)
	vars := func(name, city, note string) map[string]string {
		return map[string]string{"First Name": name, "City": city, "Note": note}
	}
	require.Equal(t, []item{
		{Line: 2, Address: "ada@example.com", Vars: vars("Ada", "London", "plain")},
		{Line: 3, Address: "grace@example.com", Vars: vars("Grace; Admiral", "New York", `said "hi"`)},
		{Line: 4, Address: "linus@example.com", Vars: vars("Linus", "Helsinki", "first line\nsecond line; still quoted")},
		{Line: 6, Reject: "has 2 fields, the header has 4"},
		// line 7 is blank: not a row
		{Line: 8, Reject: "the address is empty"},
		{Line: 9, Reject: `column "First Name" contains a NUL byte`},
		{Line: 10, Address: "  spaced@example.com ", Vars: vars(" Spaced ", "Rome", " ")},
		// line 11 is ";;;": no data, not a row
		{Line: 12, Reject: `column "First Name" has a quote (") inside an unquoted value; quote the whole value and double the quotes inside it`},
		{Line: 13, Reject: `column "First Name" is not valid UTF-8 (byte 0xE9); ` + notUTF8Hint},
		{Line: 14, Address: "last@example.com", Vars: vars("Last", "Oslo", "multi\n\nline")},
	}, items)
}

func TestReadCSVHeader(t *testing.T) {
	t.Parallel()
	type want struct {
		address string   // address of the first row
		columns []string // Columns()
		line    int      // ListError.Line, when reason is set
		reason  string   // substring of ListError.Reason
	}
	tests := []struct {
		name  string
		input string
		opts  ReadOptions
		want  want
	}{
		{
			name:  "email column",
			input: "name,Email,city\nAda,ada@example.com,London\n",
			want:  want{address: "ada@example.com", columns: []string{"name", "city"}},
		},
		{
			name:  "address column",
			input: " Address ,name\nada@example.com,Ada\n",
			want:  want{address: "ada@example.com", columns: []string{"name"}},
		},
		{
			name:  "email preferred over address",
			input: "address,EMAIL\n1 Main St,ada@example.com\n",
			want:  want{address: "ada@example.com", columns: []string{"address"}},
		},
		{
			name:  "explicit column, case-insensitive",
			input: "email,Work Mail,name\nhome@example.com,work@example.com,Ada\n",
			opts:  ReadOptions{AddressColumn: " work mail "},
			want:  want{address: "work@example.com", columns: []string{"email", "name"}},
		},
		{
			name:  "no address column",
			input: "name,city\nAda,London\n",
			want: want{line: 1, reason: `no address column: expected a column named "email" or "address", ` +
				`the header has "name", "city"`},
		},
		{
			name:  "explicit column missing",
			input: "email,name\na@example.com,Ada\n",
			opts:  ReadOptions{AddressColumn: "mail"},
			want:  want{line: 1, reason: `the address column "mail" is not in the header, which has "email", "name"`},
		},
		{
			name:  "duplicate header names",
			input: "Email,name, EMAIL\n",
			want:  want{line: 1, reason: `columns 1 ("Email") and 3 ("EMAIL") of the header have the same name`},
		},
		{
			name:  "empty header name",
			input: "email,,name\n",
			want:  want{line: 1, reason: "column 2 of the header has no name"},
		},
		{
			name:  "header after blank lines",
			input: "\r\n\r\nname;email\n",
			want:  want{columns: []string{"name"}},
		},
		{
			name:  "header looking like data is a header",
			input: "a@example.com,b@example.com\nc@example.com,d@example.com\n",
			opts:  ReadOptions{AddressColumn: "a@example.com"},
			want:  want{address: "c@example.com", columns: []string{"b@example.com"}},
		},
		{
			name:  "semicolons win",
			input: "email;name;\"a,b,c,d\"\nx@example.com;X;1,5\n",
			want:  want{address: "x@example.com", columns: []string{"name", "a,b,c,d"}},
		},
		{
			name:  "tie is a comma",
			input: "email,name;x\nx@example.com,X;1\n",
			want:  want{address: "x@example.com", columns: []string{"name;x"}},
		},
		{
			name:  "forced delimiter",
			input: "email;name,a,b\nx@example.com;X,1,2\n",
			opts:  ReadOptions{Delimiter: ';'},
			want:  want{address: "x@example.com", columns: []string{"name,a,b"}},
		},
		{
			name:  "tab delimiter",
			input: "email\tname\nx@example.com\tX\n",
			opts:  ReadOptions{Delimiter: '\t'},
			want:  want{address: "x@example.com", columns: []string{"name"}},
		},
		{name: "empty file", input: "", want: want{reason: "the list is empty (no header row)"}},
		{name: "only a BOM", input: "\uFEFF", want: want{reason: "the list is empty (no header row)"}},
		{name: "only blank lines", input: "\n\r\n\n", want: want{reason: "the list is empty (no header row)"}},
		{
			name:  "UTF-16",
			input: "\xFF\xFEe\x00m\x00a\x00i\x00l\x00\n\x00",
			want:  want{reason: "the file is not a text CSV file (it is UTF-16 encoded"},
		},
		{
			name:  "xlsx workbook",
			input: "PK\x03\x04\x14\x00\x06\x00",
			want:  want{reason: "the file is not a text CSV file (it looks like a spreadsheet workbook"},
		},
		{
			name:  "header with NUL",
			input: "email,na\x00me\nx@example.com,X\n",
			want:  want{line: 1, reason: "the header row contains a NUL byte"},
		},
		{
			name:  "header not UTF-8",
			input: "email,caf\xe9\n",
			want:  want{line: 1, reason: "the header row is not valid UTF-8"},
		},
		{
			name:  "header with a bare quote",
			input: "email,na\"me\n",
			want:  want{line: 1, reason: "the header row has a quote error"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items, columns, err := readCSV(t, tt.input, tt.opts)
			if tt.want.reason != "" {
				requireListError(t, err, tt.want.line, tt.want.reason)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.columns, columns)
			if tt.want.address == "" {
				require.Empty(t, items)
				return
			}
			require.NotEmpty(t, items)
			require.Empty(t, items[0].Reject)
			require.Equal(t, tt.want.address, items[0].Address)
		})
	}
}

func TestReadCSVBinaryGarbage(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 20_000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	_, err := NewCSVReader(bytes.NewReader(garbage), ReadOptions{})
	requireListError(t, err, 0, "the file is not a text CSV file")
	require.Equal(t, "the file is not a text CSV file", err.Error())
}

func TestReadCSVBadDelimiter(t *testing.T) {
	t.Parallel()
	for _, d := range []rune{'"', 'a', ' ', '\n', '§'} {
		_, err := NewCSVReader(strings.NewReader("email\n"), ReadOptions{Delimiter: d})
		require.Error(t, err, "delimiter %q", d)
		var le *ListError
		require.False(t, errors.As(err, &le), "a bad option is the caller's bug, not the list's")
	}
}

func TestReadCSVHeaderOnly(t *testing.T) {
	t.Parallel()
	for _, input := range []string{"email,name", "email,name\n", "email,name\r\n\r\n\r\n"} {
		tr, err := NewCSVReader(strings.NewReader(input), ReadOptions{})
		require.NoError(t, err)
		row, err := tr.Next()
		require.Equal(t, io.EOF, err)
		require.Zero(t, row)
		require.Equal(t, []string{"name"}, tr.Columns())
	}
}

func TestReadCSVRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		want  []item
	}{
		{
			name:  "LF line ends, quoted newlines",
			input: "email,note\na@example.com,\"x\ny\nz\"\nb@example.com,w\n",
			want: []item{
				{Line: 2, Address: "a@example.com", Vars: map[string]string{"note": "x\ny\nz"}},
				{Line: 5, Address: "b@example.com", Vars: map[string]string{"note": "w"}},
			},
		},
		{
			name:  "CRLF and blank lines",
			input: "email,note\r\n\r\na@example.com,x\r\n\r\n\r\nb@example.com,\"\"\r\n",
			want: []item{
				{Line: 3, Address: "a@example.com", Vars: map[string]string{"note": "x"}},
				{Line: 6, Address: "b@example.com", Vars: map[string]string{"note": ""}},
			},
		},
		{
			name:  "field counts",
			input: "email,a,b\nx@example.com\nx@example.com,1,2,3\nx@example.com,1,2\n",
			want: []item{
				{Line: 2, Reject: "has 1 field, the header has 3"},
				{Line: 3, Reject: "has 4 fields, the header has 3"},
				{Line: 4, Address: "x@example.com", Vars: map[string]string{"a": "1", "b": "2"}},
			},
		},
		{
			name:  "blank address",
			input: "name,email\nAda,\"  \"\nBob,\t\n",
			want: []item{
				{Line: 2, Reject: "the address is empty"},
				{Line: 3, Reject: "the address is empty"},
			},
		},
		{
			name:  "encoding problems in the address",
			input: "email\nx\x00@example.com\nx\xff@example.com\n",
			want: []item{
				{Line: 2, Reject: `column "email" contains a NUL byte`},
				{Line: 3, Reject: `column "email" is not valid UTF-8 (byte 0xFF); ` + notUTF8Hint},
			},
		},
		{
			name:  "bare quote only rejects its own line",
			input: "email,name\na@example.com,say \"hi\",\"x\nb@example.com,B\n",
			want: []item{
				{Line: 2, Reject: `column "name" has a quote (") inside an unquoted value; quote the whole value and double the quotes inside it`},
				{Line: 3, Address: "b@example.com", Vars: map[string]string{"name": "B"}},
			},
		},
		{
			name:  "no trailing newline, trailing CR",
			input: "email\na@example.com\r",
			want:  []item{{Line: 2, Address: "a@example.com", Vars: map[string]string{}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items, _, err := readCSV(t, tt.input, ReadOptions{})
			require.NoError(t, err)
			require.Equal(t, tt.want, items)
		})
	}
}

func TestReadCSVListErrors(t *testing.T) {
	t.Parallel()
	longLine := "x@example.com," + strings.Repeat("a", 100_000) + "\n"
	tests := []struct {
		name     string
		input    string
		opts     ReadOptions
		wantRows int // rows (or row errors) before the ListError
		line     int
		reason   string
	}{
		{
			name:     "unclosed quote",
			input:    "email,name\na@example.com,A\n\nb@example.com,\"never closed\nc@example.com,C\n",
			wantRows: 1,
			line:     4,
			reason:   `a quoted field is not closed (column "name"); the file ends inside it`,
		},
		{
			name:     "unclosed quote in the last line",
			input:    "email,name\na@example.com,\"A",
			wantRows: 0,
			line:     2,
			reason:   "a quoted field is not closed",
		},
		{
			name:     "text after a closing quote",
			input:    "email,name\na@example.com,A\nb@example.com,\"B\"x\nc@example.com,\"C\n",
			wantRows: 1,
			line:     3,
			reason:   `in column "name", a closing quote is followed by other text at byte 17 of the line`,
		},
		{
			name:     "line longer than the limit",
			input:    "email,name\na@example.com,A\n" + longLine + "c@example.com,C\n",
			opts:     ReadOptions{MaxLineBytes: 64 << 10},
			wantRows: 1,
			line:     3,
			reason:   "the row is longer than the 64 KiB limit",
		},
		{
			name:     "default line limit",
			input:    "email,name\n" + longLine,
			line:     2,
			reason:   "the row is longer than the 64 KiB limit",
			wantRows: 0,
		},
		{
			name: "unclosed quote swallowing the file hits the line limit",
			input: "email,name\na@example.com,\"oops\n" +
				strings.Repeat("b@example.com,B\n", 1000),
			opts:   ReadOptions{MaxLineBytes: 1000},
			line:   2,
			reason: "a quoted field is still open after 1000 bytes (the row size limit); is its closing quote missing?",
		},
		{
			name:     "list larger than MaxBytes",
			input:    "email\n" + strings.Repeat("a@example.com\n", 10_000),
			opts:     ReadOptions{MaxBytes: 100 << 10},
			wantRows: -1, // some rows come first; the import is refused anyway
			reason:   "the list is larger than the 100 KiB limit",
		},
		{
			name:   "MaxBytes smaller than the header",
			input:  "email,name,city\n",
			opts:   ReadOptions{MaxBytes: 5},
			reason: "the list is larger than the 5 bytes limit",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items, _, err := readCSV(t, tt.input, tt.opts)
			requireListError(t, err, tt.line, tt.reason)
			if tt.wantRows >= 0 {
				require.Len(t, items, tt.wantRows)
			}
		})
	}
}

func TestReadCSVMaxBytesExact(t *testing.T) {
	t.Parallel()
	input := "\uFEFFemail\na@example.com\n"
	items, _, err := readCSV(t, input, ReadOptions{MaxBytes: int64(len(input))})
	require.NoError(t, err)
	require.Len(t, items, 1)

	_, _, err = readCSV(t, input, ReadOptions{MaxBytes: int64(len(input) - 1)})
	requireListError(t, err, 0, "the list is larger than the 22 bytes limit")
}

var errSource = errors.New("connection reset")

type failingReader struct{ data io.Reader }

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.data.Read(p)
	if err == io.EOF {
		return n, errSource
	}
	return n, err
}

func TestReadSourceError(t *testing.T) {
	t.Parallel()
	csvInput := "email\na@example.com\n" + strings.Repeat("b@example.com\n", 1000)
	tr, err := NewCSVReader(&failingReader{strings.NewReader(csvInput)}, ReadOptions{})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	require.ErrorIs(t, err, errSource)
	var le *ListError
	require.False(t, errors.As(err, &le), "an I/O error is not the list's fault")
	require.Len(t, items, 1001)

	jsonInput := `[{"address": "a@example.com"}, {"address": "b@`
	jr, err := NewJSONReader(&failingReader{strings.NewReader(jsonInput)}, ReadOptions{})
	require.NoError(t, err)
	items, err = readAll(t, jr)
	require.ErrorIs(t, err, errSource)
	require.Len(t, items, 1)
}

func TestReadJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		input   string
		want    []item
		columns []string
		reason  string // substring of the ListError that ends the list
	}{
		{
			name: "happy path",
			input: `[
				{"address": "ada@example.com", "vars": {"name": "Ada", "city": "London"}},
				{"vars": {"name": "Bob"}, "address": " bob@example.com "},
				{"address": "cy@example.com"}
			]`,
			want: []item{
				{Line: 1, Address: "ada@example.com", Vars: map[string]string{"name": "Ada", "city": "London"}},
				{Line: 2, Address: " bob@example.com ", Vars: map[string]string{"name": "Bob"}},
				{Line: 3, Address: "cy@example.com", Vars: map[string]string{}},
			},
			columns: []string{"name", "city"},
		},
		{
			name:  "numbers and booleans as their literal text",
			input: `[{"address": "a@example.com", "vars": {"n": 42, "f": 1.50, "e": 1e3, "neg": -0, "yes": true, "no": false, "s": "42"}}]`,
			want: []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{
				"n": "42", "f": "1.50", "e": "1e3", "neg": "-0", "yes": "true", "no": "false", "s": "42",
			}}},
			columns: []string{"n", "f", "e", "neg", "yes", "no", "s"},
		},
		{
			name: "row errors",
			input: `[
				{"address": "a@example.com", "vars": {"name": null}},
				{"vars": {"name": "B"}},
				{"address": "c@example.com", "vars": {"tags": ["x"]}},
				{"address": "d@example.com", "vars": {"o": {}}},
				{"address": "e@example.com", "emial": "typo"},
				{"address": 7},
				{"address": null},
				{"address": "  "},
				"f@example.com",
				{"address": "g@example.com", "vars": []},
				{"address": "h@example.com", "address": "i@example.com"},
				{"address": "j@example.com", "vars": {"x": "1", " x ": "2"}},
				{"address": "k\u0000@example.com"},
				{"address": "l@example.com", "vars": {"": "1"}},
				{"address": "m@example.com", "vars": null}
			]`,
			want: []item{
				{Line: 1, Reject: `var "name" is null; a var must be a string, number or boolean`},
				{Line: 2, Reject: "the address is missing"},
				{Line: 3, Reject: `var "tags" is an array; a var must be a string, number or boolean`},
				{Line: 4, Reject: `var "o" is an object; a var must be a string, number or boolean`},
				{Line: 5, Reject: `unknown field "emial"; an element has only "address" and "vars"`},
				{Line: 6, Reject: "the address must be a string, not a number"},
				{Line: 7, Reject: "the address must be a string, not null"},
				{Line: 8, Reject: "the address is empty"},
				{Line: 9, Reject: "the element is a string, not an object"},
				{Line: 10, Reject: `"vars" must be an object, not an array`},
				{Line: 11, Reject: `"address" appears twice`},
				{Line: 12, Reject: `var "x" appears twice`},
				{Line: 13, Reject: "the address contains a NUL character"},
				{Line: 14, Reject: "a var has an empty name"},
				{Line: 15, Address: "m@example.com", Vars: map[string]string{}},
			},
		},
		{
			name:  "invalid UTF-8",
			input: "[{\"address\": \"a\xff@example.com\"}]",
			want:  []item{{Line: 1, Reject: "the element is not valid UTF-8"}},
		},
		{
			name:  "BOM and empty array",
			input: "\uFEFF [ ] \n",
		},
		{name: "empty input", input: "", reason: "the list is empty (no JSON array)"},
		{name: "blank input", input: " \n\t", reason: "the list is empty (no JSON array)"},
		{
			name:   "object at the top",
			input:  `{"targets": []}`,
			reason: "the JSON list must be an array of targets, but its top-level value is an object",
		},
		{
			name:   "string at the top",
			input:  `"a@example.com"`,
			reason: "the JSON list must be an array of targets, but its top-level value is a string",
		},
		{
			name:   "syntax error before the array",
			input:  `nope`,
			reason: "invalid JSON at byte 1: invalid character 'o' in literal null (expecting 'u')",
		},
		{
			name:   "syntax error in an element",
			input:  `[{"address": "a@example.com"}, {"address": "b@example.com",}]`,
			want:   []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{}}},
			reason: "invalid JSON at byte 59 (element 2): invalid character '}' looking for beginning of object key string",
		},
		{
			name:   "missing comma",
			input:  `[{"address": "a@example.com"} {"address": "b@example.com"}]`,
			want:   []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{}}},
			reason: "invalid JSON at byte 30 (element 2): expected comma after array element",
		},
		{
			name:   "truncated",
			input:  `[{"address": "a@example.com"}, {"address": "b@exa`,
			want:   []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{}}},
			reason: "the JSON ends at byte 49 (element 2) before the array is closed",
		},
		{
			name:   "array not closed",
			input:  `[{"address": "a@example.com"}`,
			want:   []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{}}},
			reason: "the JSON ends at byte 29 (element 1) before the array is closed",
		},
		{
			name:   "data after the array",
			input:  `[{"address": "a@example.com"}] []`,
			want:   []item{{Line: 1, Address: "a@example.com", Vars: map[string]string{}}},
			reason: "unexpected data after the JSON array at byte 31",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := NewJSONReader(strings.NewReader(tt.input), ReadOptions{})
			if err != nil {
				require.Empty(t, tt.want)
				requireListError(t, err, 0, tt.reason)
				return
			}
			items, err := readAll(t, tr)
			if tt.reason != "" {
				requireListError(t, err, 0, tt.reason)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, items)
			if tt.columns != nil {
				require.Equal(t, tt.columns, tr.Columns())
			}
		})
	}
}

func TestReadJSONLimits(t *testing.T) {
	t.Parallel()
	big := fmt.Sprintf(`[{"address": "a@example.com"}, {"address": "b@example.com", "vars": {"x": %q}}]`,
		strings.Repeat("y", 200_000))

	tr, err := NewJSONReader(strings.NewReader(big), ReadOptions{})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	requireListError(t, err, 0, "element 2 is larger than the 64 KiB limit")
	require.Len(t, items, 1)

	// Just over the limit after decoding, not while reading.
	tr, err = NewJSONReader(strings.NewReader(big), ReadOptions{MaxLineBytes: 199_000})
	require.NoError(t, err)
	_, err = readAll(t, tr)
	requireListError(t, err, 0, "element 2 is larger than the 194.3 KiB limit")

	tr, err = NewJSONReader(strings.NewReader(big), ReadOptions{MaxLineBytes: 300_000, MaxBytes: 100_000})
	require.NoError(t, err)
	_, err = readAll(t, tr)
	requireListError(t, err, 0, "the list is larger than the 97.7 KiB limit")

	_, err = NewJSONReader(strings.NewReader(strings.Repeat(" ", 100_000)+"[]"), ReadOptions{})
	requireListError(t, err, 0, "the JSON before the first element is larger than the 64 KiB limit")
}

func TestReadJSONTooManyVarNames(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("[")
	for i := range maxJSONVarNames + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"address": "a%d@example.com", "vars": {"v%d": "x"}}`, i, i)
	}
	b.WriteString("]")
	tr, err := NewJSONReader(strings.NewReader(b.String()), ReadOptions{})
	require.NoError(t, err)
	items, err := readAll(t, tr)
	requireListError(t, err, 0, "element 1025: the list uses more than 1024 different var names")
	require.Len(t, items, maxJSONVarNames)
	require.Len(t, tr.Columns(), maxJSONVarNames)
}

func TestHumanBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		1:         "1 byte",
		1000:      "1000 bytes",
		1024:      "1 KiB",
		64 << 10:  "64 KiB",
		1536:      "1.5 KiB",
		200 << 20: "200 MiB",
		5 << 30:   "5 GiB",
	} {
		require.Equal(t, want, humanBytes(n))
	}
}

// genReader produces a list on the fly, one row at a time, so a test can read
// a list far larger than what it holds in memory.
type genReader struct {
	head, tail string
	rows       int
	row        func(dst []byte, i int) []byte
	i          int
	buf        []byte
	pending    []byte
	tailDone   bool
}

func (g *genReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(g.pending) == 0 {
			switch {
			case g.head != "":
				g.pending, g.head = []byte(g.head), ""
			case g.i < g.rows:
				g.buf = g.row(g.buf[:0], g.i)
				g.pending = g.buf
				g.i++
			case !g.tailDone:
				g.pending, g.tailDone = []byte(g.tail), true
			default:
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
		}
		c := copy(p[n:], g.pending)
		g.pending = g.pending[c:]
		n += c
	}
	return n, nil
}

func csvRows(rows int) *genReader {
	return &genReader{
		head: "email,first name,city,plan\n",
		rows: rows,
		row: func(dst []byte, i int) []byte {
			dst = append(dst, "user"...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, "@example.com,\"Name "...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			return append(dst, "\",Berlin,gold\n"...)
		},
	}
}

func jsonRows(rows int) *genReader {
	return &genReader{
		head: "[\n",
		tail: "\n]\n",
		rows: rows,
		row: func(dst []byte, i int) []byte {
			if i > 0 {
				dst = append(dst, ",\n"...)
			}
			dst = append(dst, `{"address": "user`...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, `@example.com", "vars": {"n": `...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			return append(dst, `, "vip": true, "city": "Berlin"}}`...)
		},
	}
}

// heapPeak reads tr to the end, sampling the heap every sampleEvery rows,
// and returns the row count and the largest HeapAlloc seen.
func heapPeak(t *testing.T, tr TargetReader, sampleEvery int) (rows int, peak uint64) {
	t.Helper()
	var ms runtime.MemStats
	for {
		row, err := tr.Next()
		if err == io.EOF {
			return rows, peak
		}
		require.NoError(t, err)
		require.NotEmpty(t, row.Address)
		rows++
		if rows%sampleEvery == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
}

// The memory tests do not call t.Parallel: HeapAlloc is process-wide, and a
// sequential test runs while every parallel test is paused.

func TestReadCSVStreamsInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a generated list of 1,000,000 rows")
	}
	const rows = 1_000_000
	runtime.GC()
	tr, err := NewCSVReader(csvRows(rows), ReadOptions{})
	require.NoError(t, err)
	n, peak := heapPeak(t, tr, 100_000)
	require.Equal(t, rows, n)
	t.Logf("1,000,000 CSV rows read; peak HeapAlloc %.1f MiB", float64(peak)/(1<<20))
	require.Less(t, peak, uint64(32<<20), "the reader's memory must not grow with the list")
}

func TestReadJSONStreamsInBoundedMemory(t *testing.T) {
	rows := 200_000
	if testing.Short() {
		rows = 20_000
	}
	runtime.GC()
	tr, err := NewJSONReader(jsonRows(rows), ReadOptions{})
	require.NoError(t, err)
	n, peak := heapPeak(t, tr, 20_000)
	require.Equal(t, rows, n)
	require.Equal(t, []string{"n", "vip", "city"}, tr.Columns())
	t.Logf("%d JSON elements read; peak HeapAlloc %.1f MiB", rows, float64(peak)/(1<<20))
	require.Less(t, peak, uint64(32<<20), "the reader's memory must not grow with the list")
}

// scannerRecordStarts returns the lines on which csvScanner sees records
// start.
func scannerRecordStarts(data []byte, delim byte) []int {
	sc := csvScanner{delim: delim, line: 1}
	var starts []int
	for _, b := range data {
		before := sc.records
		sc.step(b)
		if sc.records != before {
			starts = append(starts, sc.recordLine)
		}
	}
	return starts
}

// csvRecordStarts returns the lines on which encoding/csv (strict quotes)
// starts records, including those it rejects for a bare quote, and whether it
// read to the end (false when it stopped at a fatal quote error).
func csvRecordStarts(data []byte, delim byte) (starts []int, complete bool) {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comma = rune(delim)
	r.FieldsPerRecord = -1
	for {
		_, err := r.Read()
		var pe *csv.ParseError
		switch {
		case err == io.EOF:
			return starts, true
		case errors.As(err, &pe) && pe.Err == csv.ErrBareQuote:
			starts = append(starts, pe.StartLine)
		case err != nil:
			return starts, false
		default:
			line, _ := r.FieldPos(0)
			starts = append(starts, line)
		}
	}
}

var csvSeeds = []string{
	"email,name\na@example.com,Ada\n",
	"\uFEFFEmail;Name\r\na@example.com;\"A;B\"\r\n\r\nb@example.com;\"x\r\ny\"\r\n",
	"email,name\na@example.com,\"unclosed\nb@example.com,B\n",
	"email,name\na@example.com,O\"Brien\nb@example.com,\"B\"x\n",
	"email\n\r\n\r\r\n\"a\"\"b\"\r",
	"email,a,b\n,,\nx\x00@y,1\n\xff\xfe,2,3\n",
	"address,email\n\"\n\",\"\"\"\"\n",
	"\n\n\"e\nmail\",x\n1,2\n\"3\",\"4\"",
	"email;x\n\"a\"\r;b\n\"a\"\r\r\nc\r\n",
	"email,name\na@example.com,\"multi\r\n\r\nline\"\r\nb@example.com,B",
}

func FuzzReadCSV(f *testing.F) {
	for _, s := range csvSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The guard's scanner must split records exactly as encoding/csv.
		for _, delim := range []byte{',', ';'} {
			want, complete := csvRecordStarts(data, delim)
			got := scannerRecordStarts(data, delim)
			want, got = append([]int{}, want...), append([]int{}, got...)
			if complete {
				require.Equal(t, want, got, "record starts, delimiter %q", delim)
			} else {
				require.GreaterOrEqual(t, len(got), len(want))
				require.Equal(t, want, got[:len(want)], "record starts, delimiter %q", delim)
			}
		}

		records := bytes.Count(data, []byte("\n")) + 1
		for _, opts := range []ReadOptions{{}, {MaxLineBytes: 16}, {MaxBytes: 64}} {
			tr, err := NewCSVReader(bytes.NewReader(data), opts)
			if err != nil {
				var le *ListError
				require.ErrorAs(t, err, &le)
				continue
			}
			columns := tr.Columns()
			n, last := 0, 0
			for {
				require.LessOrEqual(t, n, records, "more rows than lines: Next does not end")
				row, err := tr.Next()
				if err == io.EOF {
					break
				}
				var re *RowError
				var line int
				switch {
				case errors.As(err, &re):
					line = re.Line
					require.NotEmpty(t, re.Reason)
				case err != nil:
					var le *ListError
					require.ErrorAs(t, err, &le)
					if opts.MaxLineBytes == 0 && opts.MaxBytes == 0 {
						require.NotContains(t, le.Reason, "limit", "no limit can be reached by %d bytes", len(data))
					}
				default:
					line = row.Line
					require.NotEmpty(t, strings.TrimSpace(row.Address))
					require.Len(t, row.Vars, len(columns))
				}
				if err != nil && re == nil {
					break
				}
				require.GreaterOrEqual(t, line, 2)
				require.GreaterOrEqual(t, line, last, "lines must not go back")
				last = line
				n++
			}
			require.LessOrEqual(t, n, records)
		}
	})
}

func FuzzReadJSON(f *testing.F) {
	for _, s := range []string{
		`[{"address": "a@example.com", "vars": {"n": 1, "b": true, "s": "x"}}]`,
		`[{"address": null}, {"vars": {"x": null}}, 1, "x", [], {}]`,
		`{"address": "a"}`,
		`[{"address": "a"},]`,
		"\uFEFF[]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := NewJSONReader(bytes.NewReader(data), ReadOptions{MaxLineBytes: 256})
		if err != nil {
			var le *ListError
			require.ErrorAs(t, err, &le)
			return
		}
		for n := 0; ; n++ {
			require.LessOrEqual(t, n, len(data), "Next does not end")
			row, err := tr.Next()
			if err == io.EOF {
				return
			}
			var re *RowError
			switch {
			case errors.As(err, &re):
				require.Equal(t, n+1, re.Line)
			case err != nil:
				var le *ListError
				require.ErrorAs(t, err, &le)
				return
			default:
				require.Equal(t, n+1, row.Line)
				require.NotEmpty(t, strings.TrimSpace(row.Address))
			}
		}
	})
}

func BenchmarkReadCSV(b *testing.B) {
	var buf bytes.Buffer
	_, err := io.Copy(&buf, csvRows(10_000))
	require.NoError(b, err)
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		tr, err := NewCSVReader(bytes.NewReader(data), ReadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := tr.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkReadJSON(b *testing.B) {
	var buf bytes.Buffer
	_, err := io.Copy(&buf, jsonRows(10_000))
	require.NoError(b, err)
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		tr, err := NewJSONReader(bytes.NewReader(data), ReadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := tr.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}
