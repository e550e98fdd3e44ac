package plan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/plan"
)

// TestBlankFieldsReadTheTemplatesParseTree: whether a blank merge variable
// would show in a message is read from text/template's parse tree, as the
// template writes the variable: printed as it is, written only when not
// empty (a fallback's first choice, inside a condition on it), or only
// tested; in the subject, the text and the HTML alike.
func TestBlankFieldsReadTheTemplatesParseTree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text             string
		printed, guarded []string
	}{
		{`Hi {{.first_name}}`, []string{"first_name"}, nil},
		{`Hi {{or .first_name "friend"}}`, nil, []string{"first_name"}},
		{`Hi {{or .first_name .nickname "friend"}}`, nil, []string{"first_name", "nickname"}},
		{`Hi {{or .first_name .nickname}}`, []string{"nickname"}, []string{"first_name"}},
		{`{{if .first_name}}Dear {{.first_name}}{{else}}Hello{{end}}`, nil, []string{"first_name"}},
		{`{{if .first_name}}Dear {{.first_name}}{{else}}Dear {{.first_name}}{{end}}`, []string{"first_name"}, nil},
		{`{{if and .first_name .city}}{{.first_name}} of {{.city}}{{end}}`, nil, []string{"city", "first_name"}},
		{`{{with .first_name}}Dear {{.}}{{end}}`, nil, []string{"first_name"}},
		{`{{if .vip}}Dear VIP{{end}}`, nil, nil},
		{`Hi {{printf "%s!" .first_name}}`, []string{"first_name"}, nil},
		{`Hi {{.first_name}}, or {{or .first_name "friend"}}`, []string{"first_name"}, nil},
		{`{{if .vip}}{{.first_name}}{{end}}`, []string{"first_name"}, nil},
		{`Unsubscribe: {{.unsubscribe_url}}`, nil, nil},
	} {
		tpl, err := plan.Payload{From: "a@example.com", Subject: "News", Text: tc.text}.Compile()
		require.NoError(t, err, tc.text)
		require.Equal(t, plan.BlankFields{Printed: tc.printed, Guarded: tc.guarded}, tpl.BlankFields(), tc.text)
	}
	// The subject and the HTML body count too (the HTML after its
	// escaper added its own functions to each action).
	tpl, err := plan.Payload{From: "a@example.com", Subject: "Hi {{or .first_name \"there\"}}", Text: "Hello",
		HTML: `<p>{{.city}}</p><p>{{or .nickname "friend"}}</p>`}.Compile()
	require.NoError(t, err)
	require.Equal(t, plan.BlankFields{Printed: []string{"city"}, Guarded: []string{"first_name", "nickname"}}, tpl.BlankFields())
}

// TestBlankWarningFollowsTheTemplate: {{or .first_name "friend"}} renders
// "Hi friend" for a blank first_name, so neither the import's report nor
// the submission check warns of it; a name of only spaces still would
// show blank ("Hi   "), and is reported; {{.first_name}} is as before.
func TestBlankWarningFollowsTheTemplate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	csv := "email,first_name\nann@example.com,Ann\nbob@example.com,\ncat@example.com,   \n"
	for _, tc := range []struct {
		text  string
		lines []int
	}{
		{`Hi {{or .first_name "friend"}}`, []int{4}},
		{`{{if .first_name}}Dear {{.first_name}}{{else}}Hello{{end}}`, []int{4}},
		{`Hi {{.first_name}}`, []int{3, 4}},
	} {
		pl := plan.Payload{From: "a@example.com", Subject: "News", Text: tc.text}
		tpl, err := pl.Compile()
		require.NoError(t, err)
		r, err := b.importList(t, plan.ImportParams{Body: strings.NewReader(csv), Blank: tpl.BlankFields()})
		require.NoError(t, err)
		var lines []int
		for _, e := range r.Empty {
			lines = append(lines, e.Line)
		}
		require.Equal(t, tc.lines, lines, "import: %s", tc.text)

		d, err := approval.GetDraft(b.ctx, b.pool, b.campaign.ID, 1)
		require.NoError(t, err)
		content := d.Content()
		content.Payload = pl
		chk, err := plan.Check(b.ctx, b.pool, content)
		require.NoError(t, err)
		require.Equal(t, len(tc.lines), chk.EmptyCount, "check: %s", tc.text)

		m, err := plan.Preview(b.ctx, b.pool, content, "bob@example.com", 0)
		if tc.lines[0] == 4 && strings.Contains(tc.text, "friend") {
			require.NoError(t, err)
			require.Equal(t, "Hi friend", m.Text, "the preview shows the fallback")
		}
	}
}
