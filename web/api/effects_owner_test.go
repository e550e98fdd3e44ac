package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/migrations"
)

// A single effect belongs to the user it is begun for, its lease is a
// number checked where it enters, and no row written outside any plan
// holds its key before it is begun (docs/ARCHITECTURE.md, "Single agent
// effects").

// performAt makes the call at the outside system with the begin's key as
// its idempotency key, as a runtime does, and returns the outside
// system's receipt and raw answer.
func performAt(t *testing.T, outside *sink.Webhook, r reply) (string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, outside.URL(), strings.NewReader(`{"target":"acct"}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", r.body["key"].(string))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	var answer struct {
		Receipt string `json:"receipt"`
	}
	require.NoError(t, json.Unmarshal(raw, &answer))
	return answer.Receipt, string(raw)
}

// token gives who a token of a new user with roles (or of an existing
// user, when email exists), agent or personal.
func (s *server) tokenFor(who, email string, agent bool, roles ...string) {
	s.t.Helper()
	ctx := context.Background()
	var exists bool
	require.NoError(s.t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM app_user WHERE email = $1)`, email).Scan(&exists))
	if !exists {
		pgtest.User(s.t, s.pool, pgtest.UserOpts{Email: email, Roles: roles})
	}
	secret, _, err := auth.CreateToken(ctx, s.pool, email, who, agent)
	require.NoError(s.t, err)
	s.token[who] = secret
}

// TestEffectCallIsItsUsersOwn: two users' agents begin the same
// operation (event, tool, target, args). Each gets a call of its own,
// with its own key: the second is performed by its own agent, never
// answered with the first user's receipt and raw answer, and reads only
// its own. A user's tokens share that user's calls. For a tool that
// requires approval, a person's approval of one user's request performs
// that user's call only: the other user's call waits for an approval of
// its own. The outside system counts one effect per call.
func TestEffectCallIsItsUsersOwn(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()
	outside := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(outside.Close)
	s.tokenFor("owner", "agent-owner@example.com", false)     // the agent's user, personally
	s.tokenFor("other-agent", "proposer@example.com", true)   // another user's agent
	s.tokenFor("other-agent-2", "proposer@example.com", true) // and that user's second agent
	args := map[string]any{"status": "gold"}

	first := s.begin("agent", "run-1", "crm.set_status", "customer-1", args)
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	receipt, raw := performAt(t, outside, first)
	require.Equal(t, http.StatusOK, s.settle("agent", first, "done", receipt, raw).status)

	second := s.begin("other-agent", "run-1", "crm.set_status", "customer-1", args)
	require.Equal(t, http.StatusCreated, second.status, "another user's identical operation is a call of its own: %s", second.raw)
	require.NotEqual(t, first.body["key"], second.body["key"])
	require.NotContains(t, second.raw, receipt, "never the first user's receipt")
	require.NotContains(t, second.body, "raw")
	otherReceipt, otherRaw := performAt(t, outside, second)
	require.Equal(t, http.StatusOK, s.settle("other-agent", second, "done", otherReceipt, otherRaw).status)

	// A user's tokens share that user's calls: a replay each.
	for who, want := range map[string]reply{"owner": first, "other-agent-2": second} {
		replay := s.begin(who, "run-1", "crm.set_status", "customer-1", args)
		require.Equal(t, http.StatusOK, replay.status, "%s: %s", who, replay.raw)
		require.Equal(t, want.body["key"], replay.body["key"], who)
	}
	firstKey, secondKey := first.body["key"].(string), second.body["key"].(string)
	require.Equal(t, receipt, s.do("owner", http.MethodGet, "/effects/"+firstKey, "", "").body["receipt"])
	require.Equal(t, http.StatusNotFound, s.do("other-agent", http.MethodGet, "/effects/"+firstKey, "", "").status)
	require.Equal(t, http.StatusNotFound, s.do("agent", http.MethodGet, "/effects/"+secondKey, "", "").status)
	require.Equal(t, map[string]int{firstKey: 1, secondKey: 1}, outside.CountByEffectID())

	// A tool that requires approval.
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "payment.send", ApprovalRequired: true,
		Description: "pays a vendor", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	var approverID int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id FROM app_user WHERE email = 'approver@example.com'`).Scan(&approverID))
	approver := auth.Actor{UserID: approverID, Email: "approver@example.com", Roles: []auth.Role{auth.RoleApprover}}
	pay := func(who string) reply {
		return s.begin(who, "invoice-42", "payment.send", "vendor-7", map[string]any{"cents": 5000})
	}
	mine := pay("agent")
	require.Equal(t, http.StatusAccepted, mine.status, mine.raw)
	theirs := pay("other-agent")
	require.Equal(t, http.StatusAccepted, theirs.status, theirs.raw)
	require.NotEqual(t, mine.body["key"], theirs.body["key"])
	require.NotEqual(t, mine.body["approval_url"], theirs.body["approval_url"], "a request of each user's own")
	require.NoError(t, s.decide(approver, mine.body["approval_url"].(string), mine.body["args_digest"].(string), true))

	stillWaiting := pay("other-agent")
	require.Equal(t, http.StatusAccepted, stillWaiting.status, "an approval of another user's request performs nothing of theirs: %s", stillWaiting.raw)
	require.Equal(t, "awaiting_approval", stillWaiting.body["state"])
	performing := pay("agent")
	require.Equal(t, http.StatusCreated, performing.status, performing.raw)
	payReceipt, payRaw := performAt(t, outside, performing)
	require.Equal(t, http.StatusOK, s.settle("agent", performing, "done", payReceipt, payRaw).status)
	theirsNow := s.do("other-agent", http.MethodGet, "/effects/"+theirs.body["key"].(string), "", "")
	require.Equal(t, "awaiting_approval", theirsNow.body["state"], theirsNow.raw)
	require.NotContains(t, theirsNow.raw, payReceipt)
	replay := pay("owner")
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, payReceipt, replay.body["receipt"])
	require.Equal(t, 1, outside.CountByEffectID()[mine.body["key"].(string)])
	require.Zero(t, outside.CountByEffectID()[theirs.body["key"].(string)], "nothing performed for the other user")
}

// TestEffectLeaseSecondsOutOfRange: a lease_seconds that no lease is — one
// that wrapped around into a 1 s lease once (18446744075 seconds overflow
// a duration), beyond an hour, negative, beyond any integer — is a 400
// naming lease_seconds in one sentence, at the begin and at the
// heartbeat, and records nothing: no tool registered, no call, no
// attempt, the lease as it was.
func TestEffectLeaseSecondsOutOfRange(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	counts := func() string {
		var out string
		require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM tool_policy) || '/' || (SELECT count(*) FROM tool_call)
			|| '/' || (SELECT count(*) FROM effect) || '/' || (SELECT count(*) FROM tool_attempt)`).Scan(&out))
		return out
	}
	requireRefused := func(r reply, given string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", given, r.raw)
		require.Equal(t, "invalid", r.errCode(), given)
		require.Equal(t, "lease_seconds", r.body["error"].(map[string]any)["field"], given)
		require.Contains(t, r.errMessage(), "lease_seconds", given)
		require.NotContains(t, r.errMessage(), "\n", given)
	}
	body := func(lease string) string {
		return `{"event":"run-1","tool":"crm.set_status","target":{"kind":"subject","value":"customer-1"},"args":{},"lease_seconds":` + lease + `}`
	}
	for _, given := range []string{"18446744075", "3601", "-1", "99999999999999999999"} {
		requireRefused(s.do("agent", http.MethodPost, "/effects", "application/json", body(given)), given)
		require.Equal(t, "0/0/0/0", counts(), "%s: nothing recorded", given)
	}
	require.Contains(t, s.do("agent", http.MethodPost, "/effects", "application/json", body("18446744075")).errMessage(),
		"from 1 to 3600", "the sentence says what a lease may be")

	r := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{}, map[string]any{"lease_seconds": 30})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	key := r.body["key"].(string)
	leaseUntil := func() time.Time {
		var at time.Time
		require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT lease_until FROM tool_attempt WHERE key = $1`, key).Scan(&at))
		return at
	}
	was := leaseUntil()
	for _, given := range []string{"18446744075", "3601", "-1", "99999999999999999999"} {
		hb := s.do("agent", http.MethodPost, "/effects/"+key+"/heartbeat", "application/json",
			fmt.Sprintf(`{"lease":%q,"lease_seconds":%s}`, r.body["lease"], given))
		requireRefused(hb, given)
		require.Equal(t, was, leaseUntil(), "%s: the lease as it was", given)
	}
}

// appPool is a pool of the application role on the server's database.
func appPool(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(pool.Config().ConnString())
	require.NoError(t, err)
	u.User = url.User(migrations.AppRole)
	return pgtest.NewPool(t, u.String())
}

// TestEffectFutureKeyHeldOutsideAnyPlan: an agent's call of a tool that
// requires approval waits for a person; its key is known (the answer says
// it) and nothing is written under it yet. The application role writes,
// under that key, an attempt outside any plan — pending, so that the
// agent is told "in flight" for ever, or done with a forged receipt to be
// replayed. PostgreSQL refuses both at every isolation level; once a
// person approves, the agent's begin performs the call itself, once, and
// replays its own receipt.
func TestEffectFutureKeyHeldOutsideAnyPlan(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()
	outside := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(outside.Close)
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "payment.send", ApprovalRequired: true,
		Description: "pays a vendor", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	pay := func() reply {
		return s.begin("agent", "invoice-7", "payment.send", "vendor-7", map[string]any{"cents": 700})
	}
	waiting := pay()
	require.Equal(t, http.StatusAccepted, waiting.status, waiting.raw)
	key := waiting.body["key"].(string)

	app := appPool(t, s.pool)
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		for name, stmts := range map[string][]string{
			"pending": {`INSERT INTO effect (key, owner) VALUES ($1, 'agent:mallory@example.com')`},
			"forged done": {`INSERT INTO effect (key, owner) VALUES ($1, 'agent:mallory@example.com')`,
				`INSERT INTO effect_response (effect_id, kind, body) SELECT id, 'send', '{"id":"forged"}' FROM effect WHERE key = $1`,
				`UPDATE effect SET state = 'done', receipt = 'forged' WHERE key = $1`},
		} {
			err := pgx.BeginTxFunc(ctx, app, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				for _, sql := range stmts {
					if _, err := tx.Exec(ctx, sql, key); err != nil {
						return err
					}
				}
				return nil
			})
			var pgErr *pgconn.PgError
			require.ErrorAsf(t, err, &pgErr, "%s at %s: want PostgreSQL to refuse", name, iso)
			require.Equal(t, "OP007", pgErr.Code, "%s at %s: %s", name, iso, pgErr.Message)
		}
	}
	var held int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE key = $1`, key).Scan(&held))
	require.Zero(t, held)

	var approverID int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id FROM app_user WHERE email = 'approver@example.com'`).Scan(&approverID))
	require.NoError(t, s.decide(auth.Actor{UserID: approverID, Email: "approver@example.com", Roles: []auth.Role{auth.RoleApprover}},
		waiting.body["approval_url"].(string), waiting.body["args_digest"].(string), true))
	go1 := pay()
	require.Equal(t, http.StatusCreated, go1.status, "the agent is not stuck: it performs its call: %s", go1.raw)
	receipt, raw := performAt(t, outside, go1)
	require.Equal(t, http.StatusOK, s.settle("agent", go1, "done", receipt, raw).status)
	replay := pay()
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, receipt, replay.body["receipt"], "its own receipt, never a forged one")
	require.Equal(t, 1, outside.CountByEffectID()[key])
}
