package web

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestSuppressionsPage: every signed-in user sees the list (nav link,
// search); an operator adds through the form (POST → 303, the form token
// makes a second send act once); only an admin sees and uses the remove
// form, which needs a reason.
func TestSuppressionsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op, adm, viewer := b.as["operator"], b.as["admin"], b.as["viewer"]

	d := parse(t, viewer.get("/suppressions"))
	require.Equal(t, 1, tid(d, "nav-suppressions").Length())
	require.Equal(t, 0, tid(d, "suppression-add-form").Length(), "a viewer cannot add")
	require.Equal(t, 0, tid(d, "suppression-remove-form").Length())
	require.Equal(t, "0", tid(d, "suppression-active-count").Text())

	d = parse(t, op.get("/suppressions"))
	form := tid(d, "suppression-add-form")
	require.Equal(t, 1, form.Length())
	require.Equal(t, 0, tid(d, "suppression-remove-form").Length(), "an operator cannot remove")
	token := form.Find(`input[name=form_token]`).AttrOr("value", "")
	require.NotEmpty(t, token)
	values := url.Values{"address": {"Ann@Example.com"}, "reason": {"manual"}, "note": {"asked"}, "form_token": {token}}
	rec := op.post("/suppressions", values)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/suppressions?flash=suppressed", rec.Header().Get("Location"))
	again := op.post("/suppressions", values)
	require.Equal(t, http.StatusSeeOther, again.Code)
	require.Equal(t, rec.Header().Get("Location"), again.Header().Get("Location"), "the same form again: the first's answer")
	e, ok, err := suppression.Lookup(t.Context(), b.pool, "ann@example.com")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "operator@example.com", e.Actor)

	rec = op.post("/suppressions", url.Values{"address": {"not an address"}, "reason": {"manual"}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.NotEmpty(t, tid(parse(t, rec), "error-address").Text())
	require.Equal(t, http.StatusForbidden, viewer.post("/suppressions", url.Values{"address": {"bob@example.com"}, "reason": {"manual"}}).Code)
	require.Equal(t, http.StatusForbidden, op.post("/suppressions/remove", url.Values{"address": {"ann@example.com"}, "reason": {"x"}}).Code)

	d = parse(t, viewer.get("/suppressions?address=ANN"))
	require.Equal(t, 1, tid(d, "suppression").Length())
	require.Equal(t, "ann@example.com", tid(d, "suppression").AttrOr("data-address", ""))
	require.Equal(t, 0, tid(parse(t, viewer.get("/suppressions?address=zed")), "suppression").Length())

	d = parse(t, adm.get("/suppressions"))
	require.Equal(t, 1, tid(d, "suppression-remove-form").Length())
	rec = adm.post("/suppressions/remove", url.Values{"address": {"ann@example.com"}, "reason": {""}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	_, ok, _ = suppression.Lookup(t.Context(), b.pool, "ann@example.com")
	require.True(t, ok, "no reason, no removal")
	rec = adm.post("/suppressions/remove", url.Values{"address": {"ann@example.com"}, "reason": {"she asked again"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	_, ok, _ = suppression.Lookup(t.Context(), b.pool, "ann@example.com")
	require.False(t, ok)
	d = parse(t, viewer.get("/suppressions?include_removed=true"))
	require.Equal(t, "yes", tid(d, "suppression").AttrOr("data-removed", ""))
	require.Contains(t, tid(d, "suppression").Text(), "she asked again")
}

// outboxNew lists the messages delivered to the bundle's outbox.
func (b *bundle) outboxNew() []string {
	b.t.Helper()
	p, ok := b.srv.cfg.Providers.Get("outbox")
	require.True(b.t, ok)
	_, raw, _ := strings.Cut(p.String(), "=")
	u, err := url.Parse(raw)
	require.NoError(b.t, err)
	entries, err := os.ReadDir(filepath.Join(u.Path, "new"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(b.t, err)
	var out []string
	for _, e := range entries {
		m, err := os.ReadFile(filepath.Join(u.Path, "new", e.Name()))
		require.NoError(b.t, err)
		out = append(out, string(m))
	}
	return out
}

// TestTestSendFromDraftAndApproval: the draft and approval pages offer the
// test-send form listing the reviewers; sending goes to the reviewers
// ticked, "[Test]" before the subject, returns to the page (303), and a
// second send of the same form acts once. A viewer sees no form.
func TestTestSendFromDraftAndApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.pending(campaignOpts{})
	ap := b.as["approver"]

	d := parse(t, ap.get("/campaigns/"+c.ID+"/approval"))
	form := tid(d, "test-send-form")
	require.Equal(t, 1, form.Length())
	var reviewers []string
	tid(d, "test-send-to").Each(func(_ int, s *goquerySelection) { reviewers = append(reviewers, s.AttrOr("value", "")) })
	require.Contains(t, reviewers, "approver@example.com")
	require.Contains(t, reviewers, "viewer@example.com")
	token := form.Find(`input[name=form_token]`).AttrOr("value", "")
	values := url.Values{"to": {"approver@example.com", "operator@example.com"}, "ordinal": {"2"}, "back": {"approval"}, "form_token": {token}}
	rec := ap.post("/campaigns/"+c.ID+"/test", values)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/campaigns/"+c.ID+"/approval?flash=test-sent", rec.Header().Get("Location"))
	require.Equal(t, http.StatusSeeOther, ap.post("/campaigns/"+c.ID+"/test", values).Code)
	msgs := b.outboxNew()
	require.Len(t, msgs, 2, "two reviewers, once")
	for _, m := range msgs {
		require.Contains(t, m, "Subject: [Test] Hello Name 2")
		require.NotContains(t, m, "user0002@example.com")
	}
	var effects int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM effect`).Scan(&effects))
	require.Zero(t, effects)

	// The draft page too, for the proposer; a stranger's address is refused naming it.
	d = parse(t, b.as["proposer"].get("/campaigns/"+c.ID+"/draft"))
	require.Equal(t, 1, tid(d, "test-send-form").Length())
	rec = b.as["proposer"].post("/campaigns/"+c.ID+"/test", url.Values{"to": {"stranger@elsewhere.example"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "to[0]: stranger@elsewhere.example is not a user or an allowed test recipient")
	require.Len(t, b.outboxNew(), 2)

	d = parse(t, b.as["viewer"].get("/campaigns/"+c.ID+"/approval"))
	require.Equal(t, 0, tid(d, "test-send-form").Length())
	require.Equal(t, http.StatusForbidden, b.as["viewer"].post("/campaigns/"+c.ID+"/test", url.Values{"to": {"viewer@example.com"}}).Code)
}
