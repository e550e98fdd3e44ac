package api_test

// Over real HTTP: what a newcomer trips over in the first hour.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A provider nobody serves is refused at create, naming the configured
// ones, and changes nothing.
func TestAPIRefusesAProviderNobodyServes(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	body := newCampaign(1)
	body["provider"] = "nope"
	r := s.json("proposer", "POST", "/campaigns", body)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Equal(t, "invalid", r.errCode())
	require.Equal(t, "provider", r.body["error"].(map[string]any)["field"])
	require.Equal(t, `provider: "nope" is not a provider this server sends through; the configured providers are outbox`, r.errMessage())
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM campaign`).Scan(&n))
	require.Zero(t, n)
}

// A started campaign whose provider no live worker process serves says so,
// and stops saying so once one runs.
func TestAPISaysWhenNoLiveWorkerServesTheProvider(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	draft := w.campaignIn(t, "draft")
	got := w.do("viewer", "GET", "/campaigns/"+draft.id, "", "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	require.EqualValues(t, 0, got.body["provider_workers"])
	require.Empty(t, got.body["warnings"], "a draft is not waiting for a worker yet")

	running := w.campaignIn(t, "running")
	got = w.do("viewer", "GET", "/campaigns/"+running.id, "", "")
	require.EqualValues(t, 0, got.body["provider_workers"])
	require.Equal(t, []any{map[string]any{
		"code":    "no_live_worker",
		"message": `No live worker process serves provider "outbox", so nothing of this campaign is sent: run onceplan serve or onceplan worker with --provider outbox=URL.`,
	}}, got.body["warnings"])

	// A worker process serving it beats.
	_, err := w.pool.Exec(w.ctx, `INSERT INTO worker_process (owner, host, pid, providers) VALUES ('w/1/x', 'w', 1, '{outbox}')`)
	require.NoError(t, err)
	got = w.do("viewer", "GET", "/campaigns/"+running.id, "", "")
	require.EqualValues(t, 1, got.body["provider_workers"])
	require.Equal(t, []any{}, got.body["warnings"])
}

// A NUL in a name, a subject or a body is a 400 naming the field, not a
// 500 from the database.
func TestAPIRefusesNULNamingTheField(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, field := range []string{"name", "subject", "text"} {
		body := newCampaign(1)
		body[field] = "Hello\u0000 there"
		r := w.json("proposer", "POST", "/campaigns", body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", field, r.raw)
		require.Equal(t, field, r.body["error"].(map[string]any)["field"], r.raw)
		require.Equal(t, field+`: contains a NUL character (\u0000); remove it`, r.errMessage())
	}
	c := w.campaignIn(t, "draft")
	w.refused("proposer", "PATCH", "/campaigns/"+c.id, "application/json", `{"subject": "Hi\u0000"}`,
		400, "invalid", "subject: contains a NUL character")
}

// A line break in a merge variable the subject uses would fail every send
// of that target: submit refuses it, naming the first line.
func TestAPISubmitRefusesALineBreakInASubjectVariable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "draft") // subject "Hi {{.name}}"
	r := w.do("proposer", "POST", "/campaigns/"+c.id+"/targets", "text/csv",
		"email,name\r\nann@example.com,Ann\r\nbob@example.com,\"Bob\r\nBcc: victim@example.com\"\r\n")
	require.Equal(t, http.StatusOK, r.status, "the list itself is fine: %s", r.raw)
	r = w.refused("proposer", "POST", "/campaigns/"+c.id+"/submit", "", "", 400, "invalid_list",
		"line 3: the merge variable name of bob@example.com contains a line break, and the subject uses it")
	require.EqualValues(t, 3, r.body["error"].(map[string]any)["line"])
}

// A merge variable present but empty is listed by the import and by the
// submit, which goes ahead: the proposer decides.
func TestAPIReportsEmptyMergeVariablesAtImportAndSubmit(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	body := newCampaign(0)
	delete(body, "targets") // imported below, as CSV
	created := s.json("proposer", "POST", "/campaigns", body)
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	r := s.do("proposer", "POST", "/campaigns/"+id+"/targets", "text/csv",
		"email,first_name\nann@example.com,Ann\nfrank@example.com,\ngus@example.com, \n")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	imp := r.body["import"].(map[string]any)
	require.EqualValues(t, 3, imp["accepted"], "imported: a warning, not a refusal")
	require.EqualValues(t, 2, imp["empty_count"])
	frank := map[string]any{"line": 3.0, "target": "frank@example.com", "empty": []any{"first_name"}}
	gus := map[string]any{"line": 4.0, "target": "gus@example.com", "empty": []any{"first_name"}}
	require.Equal(t, []any{frank, gus}, imp["empty"])

	sub := s.do("proposer", "POST", "/campaigns/"+id+"/submit", "", "")
	require.Equal(t, http.StatusOK, sub.status, sub.raw)
	require.Equal(t, "pending_approval", sub.body["state"])
	warnings := sub.body["warnings"].([]any)
	require.Len(t, warnings, 1)
	warn := warnings[0].(map[string]any)
	require.Equal(t, "empty_vars", warn["code"])
	require.EqualValues(t, 2, warn["count"])
	require.Equal(t, []any{frank, gus}, warn["targets"])
	require.True(t, strings.HasPrefix(warn["message"].(string), "2 targets have empty merge variables the draft uses (first: line 3, frank@example.com, has an empty first_name)"), warn["message"])
}
