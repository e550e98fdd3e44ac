package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// latin1List is a list saved by a spreadsheet in ISO-8859-1: "Müller"'s ü
// is the byte 0xFC, not UTF-8.
const latin1List = "email,name\nann@example.com,M\xfcller\n"

// TestARefusedListIsSaidWhereTheUserLooks: an upload refused (a Latin-1
// file sent as UTF-8) is said at the top of the page, in the alert every
// page shows, naming the file and the line; beside the form, the file is
// asked for again by name, the field has the focus (the browser scrolls
// to it) and the choices made are kept; nothing is imported. On the
// new-campaign form alike, and no campaign is made.
func TestARefusedListIsSaidWhereTheUserLooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.draft(campaignOpts{})
	p := b.as["proposer"]

	rec := p.upload("/campaigns/"+c.ID+"/import", map[string]string{"encoding": "utf-8", "address_column": "email"}, latin1List)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	d := parse(t, rec)
	top := tid(d, "error").Text()
	require.Contains(t, top, "The target list targets.csv was not imported, and nothing was changed: ")
	require.Contains(t, top, `line 2: column "name" is not valid UTF-8 (byte 0xFC)`)
	require.Contains(t, top, "Choose the file again to upload it.")
	require.Contains(t, tid(d, "upload-again").Text(), "Choose targets.csv again")
	_, focused := tid(d, "import-file").Attr("autofocus")
	require.True(t, focused, "the file field has the focus")
	require.Equal(t, "utf-8", tid(d, "field-encoding").Find("option[selected]").AttrOr("value", ""))
	require.Equal(t, "email", d.Find(`input[name="address_column"]`).AttrOr("value", ""))
	require.Equal(t, "5", tid(d, "target-count").Text(), "the list is as it was")

	// The same file with its encoding chosen is taken.
	rec = p.upload("/campaigns/"+c.ID+"/import", map[string]string{"encoding": "iso-8859-1"}, latin1List)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "1", tid(parse(t, p.follow(rec)), "target-count").Text())

	// The new-campaign form: nothing is created.
	before := len(b.campaignIDs())
	rec = p.upload("/campaigns", map[string]string{"name": "Refused", "provider": "outbox", "from": "a@example.com",
		"subject": "Hi {{.name}}", "text": "Hello", "required_approvals": "1", "start": "manual", "encoding": "windows-1252"}, "email\nnot an address\n")
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	d = parse(t, rec)
	require.Contains(t, tid(d, "error").Text(), "The target list targets.csv was not imported")
	require.Contains(t, tid(d, "upload-again").Text(), "Choose targets.csv again")
	_, focused = tid(d, "field-targets").Attr("autofocus")
	require.True(t, focused)
	require.Equal(t, "windows-1252", tid(d, "field-encoding").Find("option[selected]").AttrOr("value", ""))
	require.Len(t, b.campaignIDs(), before, "no campaign was made")
}

// TestATestSendWithNoReviewerSaysSoOnItsPage: a test send with no
// reviewer ticked answers the page it was sent from — the draft or the
// approval page — saying why at its top and beside the form, not a bare
// error page; nothing is sent and the trail records nothing.
func TestATestSendWithNoReviewerSaysSoOnItsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	trail := b.events(c.ID)
	for _, tc := range []struct{ who, back string }{{"proposer", "draft"}, {"approver", "approval"}} {
		rec := b.as[tc.who].post("/campaigns/"+c.ID+"/test", url.Values{"back": {tc.back}, "ordinal": {"1"}})
		require.Equal(t, http.StatusBadRequest, rec.Code, tc.back)
		d := parse(t, rec)
		require.Equal(t, 0, tid(d, "error-page").Length(), "not an error page")
		require.Equal(t, 1, tid(d, "test-send-form").Length(), "the %s page, with its form", tc.back)
		require.Equal(t, "The test was not sent: tick at least one reviewer to send the test to: nothing was sent.", strings.TrimSpace(tid(d, "error").Text()))
		require.Equal(t, tid(d, "error").Text(), tid(d, "test-send-error").Text())
	}
	require.Equal(t, trail, b.events(c.ID), "nothing recorded")
}

// campaignIDs lists every campaign's id.
func (b *bundle) campaignIDs() []string {
	b.t.Helper()
	rows, err := b.pool.Query(b.t.Context(), `SELECT id::text FROM campaign`)
	require.NoError(b.t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(b.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(b.t, rows.Err())
	return ids
}
