package plan_test

// What a newcomer trips over: a NUL in a name or a message is a
// field error, not a database error; a merge variable present but empty is
// reported, at import and at submit, so the proposer decides; a line break
// in a variable the subject uses is refused at submit, naming the line.

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

func TestNULIsAFieldError(t *testing.T) {
	t.Parallel()
	good := plan.Payload{From: "ann@example.com", Subject: "Hi {{.name}}", Text: "Hello {{.name}}", HTML: "<p>Hello</p>"}
	for field, mutate := range map[string]func(*plan.Payload){
		"from":    func(p *plan.Payload) { p.From = "ann\x00@example.com" },
		"subject": func(p *plan.Payload) { p.Subject = "Hi\x00 {{.name}}" },
		"text":    func(p *plan.Payload) { p.Text = "Hello\x00" },
		"html":    func(p *plan.Payload) { p.HTML = "<p>\x00</p>" },
	} {
		p := good
		mutate(&p)
		requireFieldError(t, p.Validate(), field, "NUL")
	}

	b := setup(t)
	_, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{Name: "News\x00letter", Provider: "outbox", Payload: good})
	requireFieldError(t, err, "name", "NUL")
}

func requireFieldError(t *testing.T, err error, field, mentions string) {
	t.Helper()
	var fe *onceplan.FieldError
	require.True(t, errors.As(err, &fe), "%s: want a field error, got %v", field, err)
	require.Equal(t, field, fe.Field)
	require.Contains(t, fe.Reason, mentions)
	require.ErrorIs(t, err, onceplan.ErrInvalid)
}

func TestImportReportsEmptyMergeVariables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	csv := "email,name,city\n" +
		"ann@example.com,Ann,\n" + // 2: city is empty, but no template reads it
		"frank@example.com,,Paris\n" + // 3: empty name
		"gus@example.com,  ,Rome\n" + // 4: only spaces
		"frank@example.com,,Paris\n" + // 5: a duplicate, not listed again
		"hal@example.com,Hal,Oslo\n" // 6
	r, err := b.importList(t, plan.ImportParams{Body: strings.NewReader(csv), Blank: plan.BlankFields{Printed: []string{"name"}}})
	require.NoError(t, err)
	require.Equal(t, 4, r.Accepted, "empty variables are imported: a warning, not a refusal")
	require.Equal(t, 2, r.EmptyCount)
	require.Equal(t, []plan.EmptyVar{
		{Line: 3, Target: "frank@example.com", Empty: []string{"name"}},
		{Line: 4, Target: "gus@example.com", Empty: []string{"name"}},
	}, r.Empty)

	// Appended rows are reported by their own lines; the rows carried
	// over from the earlier list are not this import's.
	r, err = b.importList(t, plan.ImportParams{Append: true, Format: plan.FormatJSON, Blank: plan.BlankFields{Printed: []string{"name", "city"}},
		Body: strings.NewReader(`[{"address": "ivy@example.com", "vars": {"name": "Ivy", "city": ""}}]`)})
	require.NoError(t, err)
	require.Equal(t, []plan.EmptyVar{{Line: 1, Target: "ivy@example.com", Empty: []string{"city"}}}, r.Empty)
	require.Equal(t, 1, r.EmptyCount)
}

func TestCheckWarnsOfEmptyAndRefusesLineBreaksInTheSubject(t *testing.T) {
	t.Parallel()
	b := setup(t) // subject "Hi {{.name}}", text "Hello {{.name}}"
	check := func(csv string) (plan.CheckReport, error) {
		t.Helper()
		_, err := b.importList(t, plan.ImportParams{Body: strings.NewReader(csv)})
		require.NoError(t, err)
		d, err := approval.GetDraft(b.ctx, b.pool, b.campaign.ID, 1)
		require.NoError(t, err)
		return plan.Check(b.ctx, b.pool, d.Content())
	}

	r, err := check("email,name\nann@example.com,Ann\nfrank@example.com,\n")
	require.NoError(t, err)
	require.Equal(t, 1, r.EmptyCount)
	require.Equal(t, []plan.EmptyVar{{Line: 3, Target: "frank@example.com", Empty: []string{"name"}}}, r.Empty)
	require.Zero(t, r.MissingCount)
	require.Equal(t, "1 target has empty merge variables the draft uses (first: line 3, frank@example.com, has an empty name), so its message will have nothing there unless you correct the list",
		plan.EmptyWarning(r.Empty[0], r.EmptyCount))

	// A line break in a variable the subject reads would fail every send
	// of that target: refused, naming the first line.
	for _, brk := range []string{"\r\n", "\n", "\r"} {
		_, err = check("email,name\nann@example.com,Ann\n\"bob@example.com\",\"Bob" + brk + "Bcc: victim@example.com\"\ncy@example.com,\"C" + brk + "y\"\n")
		var le *plan.ListError
		require.True(t, errors.As(err, &le), "%q: %v", brk, err)
		require.Equal(t, 3, le.Line)
		require.Equal(t, "the merge variable name of bob@example.com contains a line break, and the subject uses it (a subject is one line; 2 targets in all)", le.Reason)
	}

	// In a variable only the body reads, a line break is text.
	_, err = b.svc.Edit(b.ctx, b.proposer, b.campaign.ID, plan.Payload{From: "a@example.com", Subject: "Hi", Text: "Hello {{.name}}"})
	require.NoError(t, err)
	r, err = check("email,name\nann@example.com,\"Ann\r\nof Cleves\"\n")
	require.NoError(t, err)
	require.Zero(t, r.EmptyCount)
}
