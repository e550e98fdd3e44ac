package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/api"
)

// begin is POST /effects as who, for tool on target with args.
func (s *server) begin(who, event, tool, target string, args any, extra ...map[string]any) reply {
	s.t.Helper()
	body := map[string]any{"event": event, "tool": tool, "target": map[string]any{"kind": "subject", "value": target}, "args": args}
	for _, e := range extra {
		for k, v := range e {
			body[k] = v
		}
	}
	return s.json(who, http.MethodPost, "/effects", body)
}

// settle is POST /effects/{key}/settle.
func (s *server) settle(who string, r reply, outcome, receipt, raw string) reply {
	s.t.Helper()
	body := map[string]any{"lease": r.body["lease"], "outcome": outcome, "raw": raw}
	if receipt != "" {
		body["receipt"] = receipt
	}
	if outcome != "done" {
		body["reason"] = "the system said " + raw
	}
	return s.json(who, http.MethodPost, "/effects/"+r.body["key"].(string)+"/settle", body)
}

// TestEffectBeginSettleReplay: the first begin may perform (201, with key,
// epoch, lease and lease_until); its settle records the raw answer; a
// begin after it answers 200 with the receipt and raw answer to replay,
// and a begin while it runs 409 pending. The first use registers the
// tool with no recovery and no approval, shown as such.
func TestEffectBeginSettleReplay(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.begin("agent", "run-1/step-1", "crm.set_status", "customer-17", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "pending", r.body["state"])
	require.Regexp(t, `^v1:[0-9a-f]{64}$`, r.body["key"])
	require.EqualValues(t, 0, r.body["epoch"])
	require.NotEmpty(t, r.body["lease"])
	require.NotEmpty(t, r.body["lease_until"])
	require.Equal(t, true, r.body["registered"])
	require.Equal(t, "none", r.body["recovery"])
	require.Equal(t, false, r.body["approval_required"])
	pol, err := toolcall.CurrentPolicy(t.Context(), s.pool, "crm.set_status")
	require.NoError(t, err)
	require.Equal(t, "no recovery, no approval (registered on first use)", pol.Summary())

	again := s.begin("agent", "run-1/step-1", "crm.set_status", "customer-17", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusConflict, again.status, again.raw)
	require.Equal(t, "pending", again.body["state"])
	require.Nil(t, again.body["lease"], "only the holder gets the lease")
	require.Equal(t, "in_doubt", again.errCode())
	require.Contains(t, again.body["next"], "do not call")

	done := s.settle("agent", r, "done", "crm-op-9", `{"ok":true,"id":"crm-op-9"}`)
	require.Equal(t, http.StatusOK, done.status, done.raw)
	require.Equal(t, "done", done.body["state"])

	replay := s.begin("agent", "run-1/step-1", "crm.set_status", "customer-17", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, "done", replay.body["state"])
	require.Equal(t, "crm-op-9", replay.body["receipt"])
	require.Equal(t, `{"ok":true,"id":"crm-op-9"}`, replay.body["raw"])

	// The settle repeated (its answer lost) answers the same, changes nothing.
	require.Equal(t, http.StatusOK, s.settle("agent", r, "done", "crm-op-9", `{"ok":true,"id":"crm-op-9"}`).status)
	got := s.do("operator", http.MethodGet, "/effects/"+r.body["key"].(string), "", "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	require.Equal(t, "done", got.body["state"])
	require.Equal(t, "customer-17", got.body["target"].(map[string]any)["value"])
}

// TestEffectSameKeyOtherArgs: set A, set B, restore A. With three event
// ids, three calls, each performed, final state A; with one event id, the
// changed args are refused with 422 showing the stored args' digest, and
// only the first is performed.
func TestEffectSameKeyOtherArgs(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	// The outside system: the account's setting, and each real effect.
	state, effects := "", 0
	perform := func(r reply, value string) {
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		state, effects = value, effects+1
		require.Equal(t, http.StatusOK, s.settle("agent", r, "done", fmt.Sprintf("set-%d", effects), "set to "+value).status)
	}
	seq := []string{"A", "B", "A"}
	for i, v := range seq {
		r := s.begin("agent", fmt.Sprintf("run-7/turn-%d", i), "settings.set", "acct-1", map[string]any{"value": v})
		perform(r, v)
	}
	require.Equal(t, "A", state)
	require.Equal(t, 3, effects)

	state, effects = "", 0
	first := s.begin("agent", "run-8", "settings.set", "acct-2", map[string]any{"value": "A"})
	perform(first, "A")
	for _, v := range seq[1:] {
		r := s.begin("agent", "run-8", "settings.set", "acct-2", map[string]any{"value": v})
		if v == "A" {
			require.Equal(t, http.StatusOK, r.status, "restoring A is the first call again: done")
			continue
		}
		require.Equal(t, http.StatusUnprocessableEntity, r.status, r.raw)
		require.Equal(t, "args_mismatch", r.errCode())
		require.Equal(t, first.body["args_digest"], r.body["stored_args_digest"])
		require.NotEqual(t, r.body["stored_args_digest"], r.body["args_digest"])
		require.Contains(t, r.errMessage(), first.body["args_digest"].(string))
	}
	require.Equal(t, 1, effects)
}

// TestEffectRace: 64 runtimes begin the same key at once: exactly one 201;
// every other answer is 409 (in flight) or 200 (done by then). Looped.
func TestEffectRace(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *api.Config) { c.RatePerToken = 100_000 })
	for round := range 5 {
		const n = 64
		var wg sync.WaitGroup
		replies := make([]reply, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replies[i] = s.begin("agent", fmt.Sprintf("race-%d", round), "payment.send", "acct-9", map[string]any{"cents": 500})
				if replies[i].status == http.StatusCreated {
					s.settle("agent", replies[i], "done", "pay-1", "ok")
				}
			}()
		}
		close(start)
		await.Group(t, &wg, time.Minute, "the round's 64 begins to be answered")
		counts := map[int]int{}
		for _, r := range replies {
			counts[r.status]++
		}
		require.Equal(t, 1, counts[http.StatusCreated], "round %d: %v", round, counts)
		require.Equal(t, n-1, counts[http.StatusConflict]+counts[http.StatusOK], "round %d: %v", round, counts)
	}
}

// toolCall begins a single effect as the world's author and returns it
// as a campaign of the matrix: its key, and its lease as the hash.
func (w *world) toolCall(t testing.TB) campaign {
	t.Helper()
	w.tools++
	res, err := toolcall.NewService(w.pool, toolcall.Options{}).Begin(w.ctx, w.author, toolcall.BeginParams{
		Identity: ledger.KeyInput{Event: fmt.Sprintf("world-%d", w.tools), Tool: "world.tool", Target: ledger.Target{Kind: ledger.TargetSubject, Value: "t"}},
		Args:     []byte(`{"n":1}`),
	})
	require.NoError(t, err)
	require.Equal(t, toolcall.Perform, res.Outcome)
	return campaign{key: string(res.Status.Key), hash: res.Status.LeaseID}
}

// decide decides the approval request of approvalURL as a
// person: the UI's action, through the same service.
func (s *server) decide(actor auth.Actor, approvalURL, digest string, approve bool) error {
	s.t.Helper()
	id, err := strconv.ParseInt(approvalURL[strings.LastIndex(approvalURL, "/")+1:], 10, 64)
	require.NoError(s.t, err)
	_, err = toolcall.NewService(s.pool, toolcall.Options{}).Decide(s.t.Context(), actor, id, digest, approve, "not this one")
	return err
}

// TestEffectApprovalOfExactArgs: a tool that requires approval performs
// nothing until a person approves the call's exact args; begun with
// changed args after the approval, it needs a new approval; an agent
// token, and the user the call was begun for, never approve.
func TestEffectApprovalOfExactArgs(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "payment.send", Recovery: toolcall.RecoveryNone,
		ApprovalRequired: true, Description: "pays a vendor", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	person := func(email string, agent bool, roles ...auth.Role) auth.Actor {
		var id int64
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT id FROM app_user WHERE email = $1`, email).Scan(&id))
		return auth.Actor{UserID: id, Email: email, Roles: roles, Agent: agent}
	}
	approver := person("approver@example.com", false, auth.RoleApprover)
	owner := person("agent-owner@example.com", false, auth.RoleProposer, auth.RoleApprover, auth.RoleOperator)
	agent := person("agent-owner@example.com", true, auth.RoleProposer, auth.RoleApprover, auth.RoleOperator)
	attempts := func(key string) int {
		var n int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE key = $1`, key).Scan(&n))
		return n
	}
	pay := func(cents int) reply {
		return s.begin("agent", "invoice-42", "payment.send", "vendor-7", map[string]any{"cents": cents}, map[string]any{"amount_minor": 5000})
	}

	a := pay(5000)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	require.Equal(t, "awaiting_approval", a.body["state"])
	require.Regexp(t, `^https://onceplan\.example/tool-calls/approvals/\d+$`, a.body["approval_url"])
	require.Contains(t, a.body["next"], a.body["args_digest"])
	key, digestA := a.body["key"].(string), a.body["args_digest"].(string)
	again := pay(5000)
	require.Equal(t, http.StatusAccepted, again.status)
	require.Equal(t, a.body["approval_url"], again.body["approval_url"], "one request per key and args")
	require.Zero(t, attempts(key), "nothing is performed, not even claimed, before a person approves")

	// Nobody but a person who did not begin it approves.
	require.ErrorIs(t, s.decide(agent, a.body["approval_url"].(string), digestA, true), onceplan.ErrForbidden)
	require.ErrorIs(t, s.decide(owner, a.body["approval_url"].(string), digestA, true), onceplan.ErrForbidden)
	require.ErrorIs(t, s.decide(approver, a.body["approval_url"].(string), strings.Repeat("0", 64), true), onceplan.ErrConflict,
		"the approval names the digest the person was shown")
	require.Equal(t, http.StatusAccepted, pay(5000).status)
	require.NoError(t, s.decide(approver, a.body["approval_url"].(string), digestA, true))

	// The args changed after the approval: a new approval, nothing performed.
	b := pay(9999)
	require.Equal(t, http.StatusAccepted, b.status, b.raw)
	require.NotEqual(t, a.body["approval_url"], b.body["approval_url"])
	require.NotEqual(t, digestA, b.body["args_digest"])
	require.Zero(t, attempts(key))
	// A person rejects those; they are never performed.
	require.NoError(t, s.decide(approver, b.body["approval_url"].(string), b.body["args_digest"].(string), false))
	rej := pay(9999)
	require.Equal(t, http.StatusConflict, rej.status, rej.raw)
	require.Equal(t, "rejected", rej.body["state"])
	require.Zero(t, attempts(key))

	// The approved args: performed once.
	go1 := pay(5000)
	require.Equal(t, http.StatusCreated, go1.status, go1.raw)
	require.Equal(t, "approver@example.com", go1.body["approved_by"])
	require.Equal(t, http.StatusOK, s.settle("agent", go1, "done", "pay-1", `{"id":"pay-1"}`).status)
	require.Equal(t, http.StatusOK, pay(5000).status)
	require.Equal(t, http.StatusUnprocessableEntity, pay(9999).status, "bound to the approved args for good")
	require.Equal(t, 1, attempts(key))
}

// TestEffectRefusedSettleChangesNothing: a call settled done with raw A,
// then settled failed with raw B and unknown with raw C by the same
// lease: both are refused (409) with nothing recorded, and every replay
// returns raw A, the answer of the settle that settled it.
func TestEffectRefusedSettleChangesNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.begin("agent", "run-3/step-1", "crm.set_status", "customer-5", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	key := r.body["key"].(string)
	require.Equal(t, http.StatusOK, s.settle("agent", r, "done", "crm-op-1", "raw A").status)

	var effectID int64
	require.NoError(t, s.pool.QueryRow(t.Context(), `SELECT id FROM effect WHERE key = $1`, key).Scan(&effectID))
	recorded := func() string {
		var out string
		require.NoError(t, s.pool.QueryRow(t.Context(), `
			SELECT (SELECT string_agg(kind || ':' || convert_from(body, 'UTF8'), ',' ORDER BY id) FROM effect_response WHERE effect_id = $1)
			    || ' | ' || (SELECT string_agg(action || ':' || coalesce(state::text, ''), ',' ORDER BY id) FROM tool_call_event WHERE key = $2)
			    || ' | ' || (SELECT state || ':' || coalesce(receipt, '') FROM effect WHERE id = $1)`, effectID, key).Scan(&out))
		return out
	}
	before := recorded()
	for _, late := range []struct{ outcome, raw string }{{"failed", "raw B"}, {"unknown", "raw C"}} {
		got := s.settle("agent", r, late.outcome, "", late.raw)
		require.Equal(t, http.StatusConflict, got.status, got.raw)
		require.Equal(t, "conflict", got.errCode())
		require.Contains(t, got.errMessage(), "already done")
		require.Equal(t, before, recorded(), "a refused settle changes nothing")
	}

	replay := s.begin("agent", "run-3/step-1", "crm.set_status", "customer-5", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, "raw A", replay.body["raw"], "the replay is the answer of the settle that settled it")
	require.Equal(t, "crm-op-1", replay.body["receipt"])
	got := s.do("operator", http.MethodGet, "/effects/"+key, "", "")
	require.Equal(t, "raw A", got.body["raw"])
}

// TestEffectBeginRacingRecovery: a begin that finds the call in doubt
// while recovery (or the holder's settle) changes it between the begin's
// read and its write. The test holds the attempt's lock, makes the change
// the other side makes, lets the begin reach the lock, and commits: the
// begin answers the call's status as it is now — never a bare conflict.
func TestEffectBeginRacingRecovery(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "crm.dedupe", Recovery: toolcall.RecoveryDedupe, RegisteredBy: "admin@example.com"})
	require.NoError(t, err)

	// race begins tool's call with a one-second lease, waits for the lease
	// to end, then holds the attempt's lock while change runs in the same
	// transaction, and answers the begin made meanwhile.
	race := func(tool, event string, change func(tx pgx.Tx, key string)) reply {
		first := s.begin("agent", event, tool, "acct-1", map[string]any{"v": 1}, map[string]any{"lease_seconds": 1})
		require.Equal(t, http.StatusCreated, first.status, first.raw)
		key := first.body["key"].(string)
		await.Until(t, 10*time.Second, "the lease to end by the database's clock", func() bool {
			var ended bool
			return s.pool.QueryRow(ctx, `SELECT lease_until < now() FROM tool_attempt WHERE key = $1`, key).Scan(&ended) == nil && ended
		})
		tx, err := s.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		var pid int
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		_, err = tx.Exec(ctx, `SELECT 1 FROM tool_attempt WHERE key = $1 FOR UPDATE`, key)
		require.NoError(t, err)
		change(tx, key)
		answer := make(chan reply, 1)
		go func() { answer <- s.begin("agent", event, tool, "acct-1", map[string]any{"v": 1}) }()
		await.Until(t, 10*time.Second, "the begin to reach the attempt's lock", func() bool {
			var waiting bool
			return s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting) == nil && waiting
		})
		require.NoError(t, tx.Commit(ctx))
		return await.Recv(t, answer, 10*time.Second, "the begin's answer")
	}
	effectOf := func(tx pgx.Tx, key string) int64 {
		var id int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM effect WHERE key = $1`, key).Scan(&id))
		return id
	}

	// No recovery: the server's recovery makes it unknown meanwhile.
	r := race("crm.none", "run-1", func(tx pgx.Tx, key string) {
		_, err := ledger.NewStore(tx).Settle(ctx, ledger.SettleParams{EffectID: effectOf(tx, key), State: ledger.StateUnknown, Reason: "recovery: the lease ended"})
		require.NoError(t, err)
	})
	require.Equal(t, http.StatusConflict, r.status, r.raw)
	require.Equal(t, "unknown", r.body["state"], r.raw)
	require.Equal(t, "in_doubt", r.errCode(), r.raw)
	require.Contains(t, r.body["next"], "a person resolves it")

	// Dedupe: the holder's settle lands meanwhile; the begin replays it.
	r = race("crm.dedupe", "run-2", func(tx pgx.Tx, key string) {
		store := ledger.NewStore(tx)
		id := effectOf(tx, key)
		_, err := store.RecordResponse(ctx, id, ledger.ResponseSend, []byte(`{"id":"op-2"}`))
		require.NoError(t, err)
		_, err = store.Settle(ctx, ledger.SettleParams{EffectID: id, State: ledger.StateDone, Receipt: "op-2"})
		require.NoError(t, err)
	})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, "done", r.body["state"])
	require.Equal(t, `{"id":"op-2"}`, r.body["raw"])
}

// TestEffectPastTheWindowIsUnknown: a dedupe tool whose outside system
// honours a key for 2 s, and a probe tool whose outside system keeps its
// records for 1 s, each performed at the outside system by an agent that
// then died. Past the window the next begin does not take the call over
// (the outside system forgot the key: a second effect) nor believe a
// probe's "not found": the call is unknown, for a person, with a reason
// naming the window, and the outside system counts exactly one effect.
func TestEffectPastTheWindowIsUnknown(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()
	dedupe := sink.NewWebhook(sink.WebhookOpts{Dedupe: true, Forget: 2 * time.Second})
	t.Cleanup(dedupe.Close)
	plain := sink.NewWebhook(sink.WebhookOpts{Forget: time.Second})
	t.Cleanup(plain.Close)
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "pay.dedupe", Recovery: toolcall.RecoveryDedupe,
		DedupeWindow: 2 * time.Second, RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	_, err = toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "mail.probe", Recovery: toolcall.RecoveryProbe,
		ProbeURL: plain.ProbeURL() + "/{key}", ProbeRetention: time.Second, RegisteredBy: "admin@example.com"})
	require.NoError(t, err)

	// perform is the agent's call to the outside system, with the key as
	// its idempotency key.
	perform := func(outside *sink.Webhook, key string) {
		req, err := http.NewRequest(http.MethodPost, outside.URL(), strings.NewReader(`{"target":"acct-1"}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
	for _, tc := range []struct {
		tool    string
		outside *sink.Webhook
		field   string
		seconds float64
		window  string
	}{
		{"pay.dedupe", dedupe, "dedupe_window_seconds", 2, "honours a key for 2s"},
		{"mail.probe", plain, "probe_retention_seconds", 1, "keeps its records for 1s"},
	} {
		first := s.begin("agent", "run-1", tc.tool, "acct-1", map[string]any{"cents": 500}, map[string]any{"lease_seconds": 1})
		require.Equal(t, http.StatusCreated, first.status, first.raw)
		require.EqualValues(t, tc.seconds, first.body[tc.field], "the policy's window is in the effect's status")
		key := first.body["key"].(string)
		perform(tc.outside, key)
		// The agent dies here, without a settle. Its lease ends, and the
		// outside system forgets the key.
		await.Until(t, 20*time.Second, tc.tool+": the lease to end and the outside system to forget the key", func() bool {
			var ended bool
			if s.pool.QueryRow(ctx, `SELECT lease_until < now() FROM tool_attempt WHERE key = $1`, key).Scan(&ended) != nil || !ended {
				return false
			}
			res, err := http.Get(tc.outside.ProbeURL() + "/" + key)
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusNotFound
		})

		again := s.begin("agent", "run-1", tc.tool, "acct-1", map[string]any{"cents": 500}, map[string]any{"lease_seconds": 1})
		if again.status == http.StatusCreated {
			perform(tc.outside, key) // what a runtime told to perform does
		}
		require.Equal(t, 1, tc.outside.CountByEffectID()[key], "%s: one effect at the outside system", tc.tool)
		require.Equal(t, http.StatusConflict, again.status, again.raw)
		require.Equal(t, "unknown", again.body["state"], again.raw)
		require.Contains(t, again.body["reason"], tc.window)
		require.Contains(t, again.body["next"], "a person resolves it")
		require.Contains(t, again.body["next"], tc.window)
	}
}

// TestEffectIdentityIsBounded: an event, a scope or a target value too
// long to index (the review's 3,000-character event answered 500) is a
// 400 naming the field, and nothing is recorded.
func TestEffectIdentityIsBounded(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		field string
		body  map[string]any
	}{
		{"event", map[string]any{"event": long, "tool": "crm.note", "target": map[string]any{"kind": "subject", "value": "c-1"}, "args": map[string]any{}}},
		{"scope", map[string]any{"event": "run-1", "tool": "crm.note", "scope": long, "target": map[string]any{"kind": "subject", "value": "c-1"}, "args": map[string]any{}}},
		{"target", map[string]any{"event": "run-1", "tool": "crm.note", "target": map[string]any{"kind": "subject", "value": long}, "args": map[string]any{}}},
	} {
		r := s.json("agent", http.MethodPost, "/effects", tc.body)
		require.Equal(t, http.StatusBadRequest, r.status, r.raw)
		require.Contains(t, r.errMessage(), tc.field, r.raw)
		require.Contains(t, r.errMessage(), "at most", r.raw)
	}
	var calls int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM tool_call`).Scan(&calls))
	require.Zero(t, calls)
}

// TestEffectKeyMayBePercentEncoded: a client that escapes the key's colon
// (v1%3A…, as JavaScript's encodeURIComponent and Python's quote do) names
// the same call: it reads it and settles it; a decoded string that is not a
// key is refused as one.
func TestEffectKeyMayBePercentEncoded(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.begin("agent", "run-7/step-1", "crm.set_status", "customer-7", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	key := r.body["key"].(string)
	escaped := strings.Replace(key, ":", "%3A", 1)

	got := s.do("operator", http.MethodGet, "/effects/"+escaped, "", "")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	require.Equal(t, key, got.body["key"])

	done := s.json("agent", http.MethodPost, "/effects/"+escaped+"/settle", map[string]any{"lease": r.body["lease"], "outcome": "done", "receipt": "op-7", "raw": "ok"})
	require.Equal(t, http.StatusOK, done.status, done.raw)
	require.Equal(t, "done", done.body["state"])

	bad := s.do("operator", http.MethodGet, "/effects/v1%3Azz", "", "")
	require.Equal(t, http.StatusBadRequest, bad.status, bad.raw)
}
