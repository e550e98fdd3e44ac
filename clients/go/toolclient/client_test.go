package toolclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/clients/go/toolclient"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/web/api"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// server is the JSON API on a test database, and an agent token's client.
func server(t *testing.T) *toolclient.Client {
	t.Helper()
	return serverWith(t, api.Config{})
}

// serverWith is server with cfg's settings (Pool and Approval are the
// test database's).
func serverWith(t *testing.T, cfg api.Config) *toolclient.Client {
	t.Helper()
	c, _, _ := serverAt(t, cfg)
	return c
}

// serverAt is serverWith, with the server's URL and database.
func serverAt(t *testing.T, cfg api.Config) (*toolclient.Client, string, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.AppPool(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	e := echo.New()
	cfg.Pool, cfg.Approval = pool, approval.NewService(pool, jobs.NewEnqueuer(rc))
	api.Register(e, cfg)
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	pgtest.User(t, pool, pgtest.UserOpts{Email: "ann@example.com", Roles: []string{"proposer"}})
	token, _, err := auth.CreateToken(t.Context(), pool, "ann@example.com", "runtime", true)
	require.NoError(t, err)
	c, err := toolclient.New(ts.URL, token)
	require.NoError(t, err)
	return c, ts.URL, pool
}

// TestDoOnce: Do runs the body once; a second Do replays the recorded
// result without running it; a body that outlives its lease keeps it by
// heartbeats, so a concurrent Do is told the call is in flight.
//
// The in-flight answer is the point, so its timing is generous and
// derived from the lease: the second Do comes one and a half leases after
// the body started (the lease would have run out without heartbeats),
// and a heartbeat goes every third of the lease, so two may be lost or
// slow before the lease is. The body ends when the test says so, not
// after a fixed time.
func TestDoOnce(t *testing.T) {
	t.Parallel()
	c := server(t)
	ctx := t.Context()
	var runs atomic.Int32
	const lease = 3 * time.Second
	in := toolclient.Intent{Event: "run-1", Tool: "crm.set_status", Target: toolclient.Subject("customer-17"),
		Args: map[string]string{"status": "gold"}, Lease: lease}
	started, finish := make(chan time.Time, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, in, func(ctx context.Context, key string) ([]byte, string, error) {
			runs.Add(1)
			started <- time.Now()
			select {
			case <-finish:
			case <-ctx.Done():
				return nil, "", context.Cause(ctx)
			}
			return []byte(`{"id":"op-1"}`), "op-1", nil
		})
		done <- err
	}()
	at := await.Either(t, started, done, time.Minute, "the first Do running its body")
	time.Sleep(time.Until(at.Add(lease * 3 / 2)))
	_, err := c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		runs.Add(1)
		return nil, "", nil
	})
	close(finish)
	var np *toolclient.NotPerformedError
	require.ErrorAs(t, err, &np)
	require.ErrorIs(t, err, toolclient.ErrInDoubt)
	require.Equal(t, "pending", np.Effect.State, "the heartbeats kept the lease: still in flight, not in doubt")
	require.NoError(t, await.Recv(t, done, time.Minute, "the first Do settling"))

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

// TestDoWaitsOutTheRateLimit: a token over its rate is answered 429
// before anything is carried out; the client waits the Retry-After the
// server asks for and asks again, so a burst of runtimes sharing a token
// all get their answers.
func TestDoWaitsOutTheRateLimit(t *testing.T) {
	t.Parallel()
	c := serverWith(t, api.Config{RatePerToken: 2})
	ctx := t.Context()
	var runs atomic.Int32
	for i := range 8 {
		res, err := c.Do(ctx, toolclient.Intent{Event: "burst", Tool: "crm.note", Target: toolclient.Subject("c-1"), Args: map[string]int{"n": 1}},
			func(context.Context, string) ([]byte, string, error) {
				runs.Add(1)
				return []byte(`{}`), "note-1", nil
			})
		require.NoError(t, err, "call %d", i)
		require.Equal(t, "done", res.Effect.State)
	}
	require.EqualValues(t, 1, runs.Load())
}

// TestDoReplaysAPersonsResolution: a call left unknown is resolved by a
// person (an operator, through the API) with the receipt and evidence
// they found; Wait learns the verdict when it is given, and the next Do
// replays the person's receipt and raw answer, marked as theirs, without
// running the body. A 201's lease comes with lease_seconds.
func TestDoReplaysAPersonsResolution(t *testing.T) {
	t.Parallel()
	c, url, pool := serverAt(t, api.Config{})
	ctx := t.Context()
	pgtest.User(t, pool, pgtest.UserOpts{Email: "ops@example.com", Roles: []string{"operator"}})
	operator, _, err := auth.CreateToken(ctx, pool, "ops@example.com", "ops", false)
	require.NoError(t, err)

	in := toolclient.Intent{Event: "run-9", Tool: "crm.set_status", Target: toolclient.Subject("customer-3"), Args: map[string]string{"status": "gold"}, Lease: 30 * time.Second}
	res, err := c.Do(ctx, in, func(ctx context.Context, key string) ([]byte, string, error) {
		eff, err := c.Get(ctx, key)
		require.NoError(t, err)
		require.NotNil(t, eff.LeaseSeconds, "the lease's seconds left, by the server's clock")
		require.InDelta(t, 29, *eff.LeaseSeconds, 1.01)
		require.JSONEq(t, `{"status":"gold"}`, string(eff.Args))
		return nil, "", errors.New("the CRM timed out")
	})
	require.ErrorContains(t, err, "timed out")
	require.Equal(t, "unknown", res.Effect.State)
	key := res.Effect.Key

	type waitAnswer struct {
		eff toolclient.Effect
		err error
	}
	waited := make(chan waitAnswer, 1)
	go func() {
		eff, err := c.Wait(ctx, key, 50*time.Second)
		waited <- waitAnswer{eff, err}
	}()
	await.Until(t, 10*time.Second, "the Wait to listen for the call's changes", func() bool {
		return pgtest.Listeners(t, pool, "onceplan_tool_call") > 0
	})
	body, err := json.Marshal(map[string]string{"outcome": "delivered", "reason": "the CRM shows it", "receipt": "crm-77", "raw": `{"id":"crm-77"}`})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/effects/"+key+"/resolve", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operator)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(answer))
	w := await.Recv(t, waited, 30*time.Second, "the Wait's answer after the resolution")
	require.NoError(t, w.err)
	eff := w.eff
	require.Equal(t, "done", eff.State)
	require.Equal(t, "person", eff.RawSource)

	res, err = c.Do(ctx, in, func(context.Context, string) ([]byte, string, error) {
		t.Fatal("a call resolved as delivered is never run again")
		return nil, "", nil
	})
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, "crm-77", res.Receipt)
	require.Equal(t, `{"id":"crm-77"}`, string(res.Raw))
	require.Equal(t, "person", res.RawSource)
	require.Equal(t, "user:ops@example.com", res.Effect.ResolvedBy)
}
