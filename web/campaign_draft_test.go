package web

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/plan"
)

// TestSaveShowsTemplateErrorsBesideTheField: a misspelt merge variable is
// said at save, beside the field that reads it, with the list's own
// variables; a template that does not parse is refused at save; and after
// a save the preview still shows.
func TestSaveShowsTemplateErrorsBesideTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{Targets: csvOf(2)})
	p := b.as["proposer"]
	path := "/campaigns/" + c.ID + "/payload"

	rec := p.post(path, url.Values{"from": {"a@example.com"}, "subject": {"Hello {{.frist_name}}"}, "text": {"Dear {{.first_name}}"}})
	d := parse(t, p.follow(rec))
	require.Contains(t, tid(d, "flash").Text(), "cannot be submitted yet")
	msg := tid(d, "error-subject").Text()
	require.Contains(t, msg, "{{.frist_name}}: 2 targets have no such variable (first: line 2, user0001@example.com)")
	require.Contains(t, msg, "the list's variables are first_name")
	require.Equal(t, 0, tid(d, "error-text").Length(), "the text reads a variable every target has")
	require.Equal(t, 1, tid(d, "missing-vars").Length())
	require.Equal(t, 1, tid(d, "preview").Length(), "the preview stays")
	require.Contains(t, tid(d, "preview-error").Text(), "frist_name")

	// A template that does not parse is refused, with the form as typed.
	rec = p.post(path, url.Values{"from": {"a@example.com"}, "subject": {"Hi"}, "text": {"Dear {{.first_name"}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	d = parse(t, rec)
	require.Contains(t, tid(d, "error-text").Text(), "line 1")
	require.Equal(t, "Dear {{.first_name", tid(d, "field-text").Text())

	// Fixed: saved, previewed, nothing to say.
	rec = p.post(path, url.Values{"from": {"a@example.com"}, "subject": {"Hello {{.first_name}}"}, "text": {"Dear {{.first_name}}"}})
	d = parse(t, p.follow(rec))
	require.Equal(t, "Draft saved.", tid(d, "flash").Text())
	require.Equal(t, "Hello Name 1", tid(d, "preview-subject").Text())
	require.Equal(t, 0, tid(d, "error-subject").Length())
	require.Equal(t, 0, tid(d, "missing-vars").Length())
}

// TestDraftShowsBlankMergeValues: a variable present but blank is a
// warning on the draft page, with its lines; the draft may still be
// submitted.
func TestDraftShowsBlankMergeValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{Targets: "email,first_name\nann@example.com,Ann\nfrank@example.com,\n"})
	d := parse(t, b.as["proposer"].get("/campaigns/"+c.ID+"/draft"))
	empty := tid(d, "empty-vars")
	require.Equal(t, 1, empty.Length())
	require.Contains(t, empty.Text(), "frank@example.com")
	require.Contains(t, empty.Find("td").First().Text(), "3")
	rec := b.as["proposer"].post("/campaigns/"+c.ID+"/submit", nil)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Contains(t, tid(parse(t, b.as["proposer"].follow(rec)), "flash").Text(), "blank")
}

// TestDraftUnderstandsAFallback: {{or .first_name "friend"}} writes
// "friend" for a blank first name — the preview says so — so the draft
// page warns of nothing, submits without the blank flash, and says that
// templates are Go's text/template.
func TestDraftUnderstandsAFallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{Targets: "email,first_name\nfrank@example.com,\n",
		Payload: plan.Payload{From: "news@example.com", Subject: "News", Text: `Hi {{or .first_name "friend"}}`}})
	d := parse(t, b.as["proposer"].get("/campaigns/"+c.ID+"/draft"))
	require.Equal(t, 0, tid(d, "empty-vars").Length())
	require.Contains(t, tid(d, "preview-text").Text(), "Hi friend")
	require.Contains(t, tid(d, "template-hint").Text(), "Go's text/template")
	rec := b.as["proposer"].post("/campaigns/"+c.ID+"/submit", nil)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/campaigns/"+c.ID+"/approval?flash=submitted", rec.Header().Get("Location"))
}
