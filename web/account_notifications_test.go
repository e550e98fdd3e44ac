package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/notify"
)

// TestAccountNotificationsPage: a signed-in user sees the events their
// roles make them an audience of, all on by default, and turns one off;
// the choice is what notify reads. Only the events the form showed
// change; an unknown event is refused with a sentence naming it.
func TestAccountNotificationsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	approver := b.as["approver"]

	d := parse(t, approver.get("/account/notifications"))
	rows := tid(d, "preference-row")
	require.Equal(t, 1, rows.Length(), "an approver is told of submits only")
	require.Equal(t, "submitted", rows.AttrOr("data-event", ""))
	_, checked := tid(d, "preference-submitted").Attr("checked")
	require.True(t, checked, "on by default")
	require.Equal(t, 1, tid(d, "no-mail-notifier").Length(), "no mailto: notifier is configured on this server")

	rec := approver.post("/account/notifications", url.Values{"shown": {"submitted"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	prefs, err := notify.Preferences(ctx, b.pool, approver.actor.UserID)
	require.NoError(t, err)
	require.False(t, prefs[notify.EventSubmitted])
	d = parse(t, approver.get(rec.Header().Get("Location")))
	_, checked = tid(d, "preference-submitted").Attr("checked")
	require.False(t, checked)
	require.Equal(t, "Your notification choices are saved.", tid(d, "flash").Text())

	// On again; an event the user's roles do not reach is ignored.
	rec = approver.post("/account/notifications", url.Values{"shown": {"submitted", "attention"}, "event": {"submitted", "attention"}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	prefs, err = notify.Preferences(ctx, b.pool, approver.actor.UserID)
	require.NoError(t, err)
	require.True(t, prefs[notify.EventSubmitted])
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM notification_preference WHERE user_id = $1 AND event = 'attention'`, approver.actor.UserID).Scan(&n))
	require.Zero(t, n)

	rec = approver.post("/account/notifications", url.Values{"shown": {"sent"}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), "shown: &#34;sent&#34; is not an event")

	// An operator is told of attention and completions; an admin of all.
	d = parse(t, b.as["operator"].get("/account/notifications"))
	require.Equal(t, []string{"attention", "completed"}, tid(d, "preference-row").Map(func(_ int, s *goquerySelection) string { return s.AttrOr("data-event", "") }))
	d = parse(t, b.as["admin"].get("/account/notifications"))
	require.Equal(t, len(notify.Events), tid(d, "preference-row").Length())
	require.Equal(t, 1, tid(d, "nav-notifications").Length())
}

// TestAdminListsNoNotifierConfigured: without notifiers, the admin page
// says so, and how to add one.
func TestAdminListsNoNotifierConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := parse(t, b.as["admin"].get("/admin"))
	require.Equal(t, 1, tid(d, "no-notifiers").Length())
	require.Equal(t, 1, tid(d, "no-undelivered").Length())
}
