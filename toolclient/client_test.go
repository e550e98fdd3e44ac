package toolclient_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/toolclient"
	"github.com/onceplan/onceplan/web/api"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// server is the JSON API on a test database, and an agent token's client.
func server(t *testing.T) *toolclient.Client {
	t.Helper()
	pool := pgtest.AppPool(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	e := echo.New()
	api.Register(e, api.Config{Pool: pool, Approval: approval.NewService(pool, jobs.NewEnqueuer(rc))})
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	pgtest.User(t, pool, pgtest.UserOpts{Email: "ann@example.com", Roles: []string{"proposer"}})
	token, _, err := auth.CreateToken(t.Context(), pool, "ann@example.com", "runtime", true)
	require.NoError(t, err)
	c, err := toolclient.New(ts.URL, token)
	require.NoError(t, err)
	return c
}

// TestDoOnce: Do runs the body once; a second Do replays the recorded
// result without running it; a body slower than its lease keeps the lease
// by heartbeats, so a concurrent Do is told the call is in flight.
func TestDoOnce(t *testing.T) {
	t.Parallel()
	c := server(t)
	ctx := t.Context()
	var runs atomic.Int32
	in := toolclient.Intent{Event: "run-1", Tool: "crm.set_status", Target: toolclient.Subject("customer-17"),
		Args: map[string]string{"status": "gold"}, Lease: time.Second}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, in, func(ctx context.Context, key string) ([]byte, string, error) {
			runs.Add(1)
			close(started)
			select { // three leases long: only heartbeats keep it
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
			return []byte(`{"id":"op-1"}`), "op-1", nil
		})
		done <- err
	}()
	<-started
	time.Sleep(2 * time.Second)
	_, err := c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		runs.Add(1)
		return nil, "", nil
	})
	var np *toolclient.NotPerformedError
	require.ErrorAs(t, err, &np)
	require.ErrorIs(t, err, toolclient.ErrInDoubt)
	require.Equal(t, "pending", np.Effect.State, "the heartbeats kept the lease: still in flight, not in doubt")
	require.NoError(t, <-done)

	res, err := c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		runs.Add(1)
		return nil, "", nil
	})
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, "op-1", res.Receipt)
	require.Equal(t, `{"id":"op-1"}`, string(res.Raw))
	require.EqualValues(t, 1, runs.Load())

	// Changed args under the same event: refused, the body not run.
	in.Args = map[string]string{"status": "silver"}
	_, err = c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) { runs.Add(1); return nil, "", nil })
	require.ErrorIs(t, err, toolclient.ErrArgsMismatch)
	require.EqualValues(t, 1, runs.Load())
}

// TestDoSettlesTheBodysVerdict: a body's Rejected error settles failed
// (the key is free: the next Do runs it), any other error unknown (never
// run again blindly).
func TestDoSettlesTheBodysVerdict(t *testing.T) {
	t.Parallel()
	c := server(t)
	ctx := t.Context()
	in := toolclient.Intent{Event: "run-2", Tool: "crm.note", Target: toolclient.Subject("c-1"), Args: map[string]int{"n": 1}}
	res, err := c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		return []byte("HTTP/1.1 422 bad note"), "", toolclient.Rejected(errors.New("the CRM refused the note"))
	})
	require.ErrorContains(t, err, "the CRM refused the note")
	require.Equal(t, "failed", res.Effect.State)
	res, err = c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) { return nil, "", errors.New("timed out") })
	require.ErrorContains(t, err, "timed out")
	require.Equal(t, "unknown", res.Effect.State)
	_, err = c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		t.Fatal("an unknown call is never run again")
		return nil, "", nil
	})
	require.ErrorIs(t, err, toolclient.ErrInDoubt)
	got, err := c.Get(ctx, res.Effect.Key)
	require.NoError(t, err)
	require.Equal(t, "unknown", got.State)
	require.Contains(t, got.Next, "a person resolves it")
}
