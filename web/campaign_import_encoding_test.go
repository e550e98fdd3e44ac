package web

import (
	"net/http"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/plan"
)

// latin1CSV is a list as a spreadsheet on Windows saves it: "Müller" and
// "Éloïse" in Latin-1, one byte per accented letter.
const latin1CSV = "email,first_name\nmuller@example.com,M\xfcller\neloise@example.com,\xc9lo\xefse\n"

// TestImportFormLatin1: the draft's import form offers the list's
// encoding. A Latin-1 file uploaded as UTF-8 is refused with one sentence
// that says it is not UTF-8, on which line, and what to do; chosen as
// Latin-1 it is imported, and the preview shows the accents.
func TestImportFormLatin1(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.as["proposer"]
	c := b.draft(campaignOpts{Targets: "email,first_name\nann@example.com,Ann\n",
		Payload: plan.Payload{From: "billing@example.com", Subject: "Bonjour {{.first_name}}", Text: "Bonjour {{.first_name}}"}})

	d := parse(t, p.get("/campaigns/"+c.ID+"/draft"))
	var offered []string
	tid(d, "field-encoding").Find("option").Each(func(_ int, o *goquery.Selection) { offered = append(offered, o.Text()) })
	require.Equal(t, []string{"UTF-8", "Latin-1 (ISO-8859-1)", "Windows-1252"}, offered)

	rec := p.upload("/campaigns/"+c.ID+"/import", nil, latin1CSV)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Equal(t, "the list was refused: none of the list's 2 rows is a usable target (2 rejected, 0 duplicates); "+
		`line 2: column "first_name" is not valid UTF-8 (byte 0xFC); if the file is in Latin-1 or Windows-1252, `+
		"declare that encoding when importing it, or save it as CSV UTF-8", tid(parse(t, rec), "error-targets").Text())
	require.Equal(t, "ann@example.com", tid(parse(t, p.get("/campaigns/"+c.ID+"/draft")), "preview-to").Text(), "nothing changed")

	rec = p.upload("/campaigns/"+c.ID+"/import", map[string]string{"encoding": "koi8-r"}, latin1CSV)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error-encoding").Text(), `must be utf-8, iso-8859-1 (latin-1) or windows-1252, not "koi8-r"`)

	rec = p.upload("/campaigns/"+c.ID+"/import", map[string]string{"encoding": "iso-8859-1"}, latin1CSV)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, p.follow(rec))
	require.Equal(t, "2", tid(d, "import-accepted").Text())
	require.Equal(t, "0", tid(d, "import-rejected").Text())
	require.Equal(t, "Bonjour Müller", tid(d, "preview-subject").Text())

	// The new-campaign form takes the encoding of its list too.
	rec = p.upload("/campaigns", map[string]string{"name": "Rappel", "provider": "outbox", "required_approvals": "1",
		"from": "billing@example.com", "subject": "Bonjour {{.first_name}}", "text": "x", "encoding": "windows-1252"}, latin1CSV)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, p.follow(rec))
	require.Equal(t, "2", tid(d, "import-accepted").Text())
	require.Equal(t, "Bonjour Müller", tid(d, "preview-subject").Text())
}
