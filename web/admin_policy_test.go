package web

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// TestAdminListsBumpPolicies: the admin page shows the registered bump
// policies read-only, and says how they are registered.
func TestAdminListsBumpPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.as["admin"]

	d := parse(t, a.get("/admin"))
	require.Equal(t, 1, tid(d, "no-policies").Length())
	require.Zero(t, tid(d, "policy-row").Length())
	note := tid(d, "policies-note").Text()
	require.Contains(t, note, "onceplan policy add")
	require.Contains(t, note, "onceplan_owner")

	// The test pool is the superuser's, which may register (the server's
	// role may not: internal/cli's policy tests show the refusal).
	store := ledger.NewStore(b.pool)
	require.NoError(t, store.RegisterPolicy(context.Background(), "monthly-reminder", "one reminder per calendar month", "ops@build-1"))
	require.NoError(t, store.RegisterPolicy(context.Background(), "annual-renewal", "one <b>renewal</b> notice a year", "ops@build-1"))

	rec := a.get("/admin")
	require.Equal(t, http.StatusOK, rec.Code)
	d = parse(t, rec)
	require.Zero(t, tid(d, "no-policies").Length())
	rows := tid(d, "policy-row")
	require.Equal(t, 2, rows.Length())
	require.Equal(t, "annual-renewal", rows.Eq(0).AttrOr("data-name", ""))
	row := tid(d, "policies").Find(`[data-name="monthly-reminder"]`)
	cells := row.Find("td")
	require.Equal(t, 4, cells.Length())
	require.Equal(t, "monthly-reminder", cells.Eq(0).Text())
	require.Equal(t, "one reminder per calendar month", cells.Eq(1).Text())
	require.Equal(t, "ops@build-1", cells.Eq(2).Text())
	require.NotEmpty(t, cells.Eq(3).Text())
	// A description is text, never markup.
	require.Equal(t, "one <b>renewal</b> notice a year", rows.Eq(0).Find("td").Eq(1).Text())
	require.Zero(t, rows.Eq(0).Find("b").Length())
	// Read-only: no form in the section.
	require.Zero(t, tid(d, "policies").Find("form, button, input").Length())

	// Only admins see the page.
	require.Equal(t, http.StatusForbidden, b.as["viewer"].get("/admin").Code)
}
