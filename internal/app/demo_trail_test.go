package app

import (
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
)

// TestDemoProposerIsInTheAdminTrail: the user the demo makes to propose
// its campaign is in the administration trail, like every other user, as
// made by the process that started (who), with its role.
func TestDemoProposerIsInTheAdminTrail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(pool, jobs.NewEnqueuer(rc))

	id, err := EnsureDemo(ctx, pool, svc, DemoOptions{Provider: "outbox", Targets: 3, Who: "ops@host"})
	require.NoError(t, err)
	require.NotEmpty(t, id)

	events, err := auth.RecentEvents(ctx, pool, 10)
	require.NoError(t, err)
	require.Len(t, events, 1, "one entry: the demo proposer")
	e := events[0]
	require.Equal(t, auth.EventUserAdd, e.Action)
	require.Equal(t, DemoProposer, e.Subject)
	require.Equal(t, "command line (ops@host)", e.Who())
	require.JSONEq(t, `{"roles": ["proposer"], "demo": true}`, e.Detail)

	// A second start finds campaigns and makes nobody.
	again, err := EnsureDemo(ctx, pool, svc, DemoOptions{Provider: "outbox", Targets: 3, Who: "ops@host"})
	require.NoError(t, err)
	require.Empty(t, again)
	events, err = auth.RecentEvents(ctx, pool, 10)
	require.NoError(t, err)
	require.Len(t, events, 1)
}
