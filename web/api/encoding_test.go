package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// latin1CSV is a list as a spreadsheet on Windows saves it: "Müller" and
// "Éloïse" in Latin-1, one byte per accented letter.
const latin1CSV = "email,name\nmuller@example.com,M\xfcller\neloise@example.com,\xc9lo\xefse\n"

// TestAPIImportLatin1: a Latin-1 list sent as UTF-8 is refused with a
// sentence that says it is not UTF-8, on which line, and what to do, and
// changes nothing; declared in the Content-Type's charset it is imported
// with its accents.
func TestAPIImportLatin1(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	created := s.json("proposer", "POST", "/campaigns", map[string]any{
		"name": "Rappel", "provider": "outbox", "from": "billing@example.com", "subject": "Bonjour {{.name}}", "text": "Bonjour {{.name}}",
	})
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)

	s.refused("proposer", "POST", "/campaigns/"+id+"/targets", "text/csv", latin1CSV, http.StatusBadRequest, "invalid_list",
		"none of the list's 2 rows is a usable target (2 rejected, 0 duplicates); line 2: column \"name\" is not valid UTF-8 (byte 0xFC); "+
			"if the file is in Latin-1 or Windows-1252, declare that encoding when importing it, or save it as CSV UTF-8")
	s.refused("proposer", "POST", "/campaigns/"+id+"/targets", "text/csv; charset=koi8-r", latin1CSV, http.StatusUnsupportedMediaType,
		"unsupported_media_type", "send utf-8, iso-8859-1 or windows-1252")

	for _, charset := range []string{"iso-8859-1", "windows-1252"} {
		r := s.do("proposer", "POST", "/campaigns/"+id+"/targets", "text/csv; charset="+charset, latin1CSV)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		imp := r.body["import"].(map[string]any)
		require.EqualValues(t, 2, imp["accepted"], charset)
		require.EqualValues(t, 0, imp["rejected_count"], charset)
		rows, err := s.pool.Query(context.Background(), `
			SELECT t.vars->>'name' FROM target t JOIN draft d ON d.list_id = t.list_id
			WHERE d.campaign_id = $1 ORDER BY t.ordinal`, id)
		require.NoError(t, err)
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"Müller", "Éloïse"}, names, charset)
	}
}
