package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/internal/toolcall"
)

// What an agent runtime meets around a tool call beyond begin and settle
// (docs/ARCHITECTURE.md, "Single agent effects"): who resolves, what a
// resolution answers and replays, who reads, waiting for a change, and
// the timing fields.

// unknownCall begins a call as the agent and settles it unknown (a
// timeout): no recovery, so a person resolves it. It returns the key.
func (s *server) unknownCall(event string) string {
	s.t.Helper()
	r := s.begin("agent", event, "crm.set_status", "customer-9", map[string]any{"status": "gold"})
	require.Equal(s.t, http.StatusCreated, r.status, r.raw)
	u := s.settle("agent", r, "unknown", "", "")
	require.Equal(s.t, http.StatusOK, u.status, u.raw)
	require.Equal(s.t, "unknown", u.body["state"])
	return r.body["key"].(string)
}

// resolveCall is POST /effects/{key}/resolve as who.
func (s *server) resolveCall(who, key string, body map[string]any) reply {
	s.t.Helper()
	return s.json(who, http.MethodPost, "/effects/"+key+"/resolve", body)
}

// TestEffectResolveRefusalNamesToolCallAndRole: an agent token may not
// resolve a tool call, and the refusal says it is a tool call and who
// may (the operator role, or an admin) — not "a campaign"; so does the
// refusal of a person without the role.
func TestEffectResolveRefusalNamesToolCallAndRole(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	key := s.unknownCall("run-1")
	for _, who := range []string{"agent", "proposer"} {
		r := s.resolveCall(who, key, map[string]any{"outcome": "delivered", "reason": "I think it went through"})
		require.Equal(t, http.StatusForbidden, r.status, r.raw)
		require.Equal(t, "forbidden", r.errCode())
		msg := r.errMessage()
		require.Contains(t, msg, "tool call", who)
		require.NotContains(t, msg, "campaign", who)
		require.Contains(t, msg, "operator", who)
		require.Contains(t, msg, "admin", who)
	}
	require.Equal(t, "unknown", s.do("operator", http.MethodGet, "/effects/"+key, "", "").body["state"], "refused: nothing changed")
}

// TestEffectResolveAnswersTheCallsStatus: resolve answers the call's
// status as GET does (no campaign_id); not delivered reads failed with
// key_free and a next that says to begin again, and the next begin
// performs it; delivered with the person's receipt and raw evidence is
// replayed to the agent with raw_source person, and never changes.
func TestEffectResolveAnswersTheCallsStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)

	key := s.unknownCall("run-1")
	r := s.resolveCall("operator", key, map[string]any{"outcome": "not_delivered", "reason": "the CRM has no such change",
		"raw": "GET /changes?key=… → []"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.NotContains(t, r.body, "campaign_id")
	require.Equal(t, key, r.body["key"])
	require.Equal(t, "failed", r.body["state"])
	require.Equal(t, true, r.body["key_free"])
	require.Contains(t, r.body["next"], "begin again")
	require.Contains(t, r.body["next"], "key is free")
	require.Equal(t, map[string]any{"status": "gold"}, r.body["args"])
	require.Equal(t, "GET /changes?key=… → []", r.body["raw"])
	require.Equal(t, "person", r.body["raw_source"])
	again := s.begin("agent", "run-1", "crm.set_status", "customer-9", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, again.status, "not delivered frees the key: the next begin performs it: %s", again.raw)

	key = s.unknownCall("run-2")
	// The receipt is an effect's id: not delivered has none.
	bad := s.resolveCall("operator", key, map[string]any{"outcome": "not_delivered", "reason": "no", "receipt": "crm-1"})
	require.Equal(t, http.StatusBadRequest, bad.status, bad.raw)
	require.Contains(t, bad.errMessage(), "receipt")
	big := s.resolveCall("operator", key, map[string]any{"outcome": "delivered", "reason": "yes", "raw": strings.Repeat("x", toolcall.MaxRawBytes+1)})
	require.Equal(t, http.StatusBadRequest, big.status, big.raw[:min(len(big.raw), 300)])
	require.Contains(t, big.errMessage(), "raw")

	r = s.resolveCall("operator", key, map[string]any{"outcome": "delivered", "reason": "the CRM shows it",
		"receipt": "crm-77", "raw": `{"id":"crm-77","status":"gold"}`})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, "done", r.body["state"])
	require.Equal(t, false, r.body["key_free"])
	require.Equal(t, "crm-77", r.body["receipt"])
	require.Equal(t, "person", r.body["raw_source"])
	require.Equal(t, "user:operator@example.com", r.body["resolved_by"])

	replay := s.begin("agent", "run-2", "crm.set_status", "customer-9", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, "crm-77", replay.body["receipt"])
	require.Equal(t, `{"id":"crm-77","status":"gold"}`, replay.body["raw"])
	require.Equal(t, "person", replay.body["raw_source"])

	// Resolved once: a second verdict changes nothing.
	twice := s.resolveCall("operator", key, map[string]any{"outcome": "delivered", "reason": "again", "receipt": "crm-78", "raw": "other"})
	require.NotEqual(t, http.StatusOK, twice.status, twice.raw)
	got := s.do("agent", http.MethodGet, "/effects/"+key, "", "")
	require.Equal(t, "crm-77", got.body["receipt"])
	require.Equal(t, `{"id":"crm-77","status":"gold"}`, got.body["raw"])
}

// TestEffectRawSource: every answer that carries raw says whose it is —
// the settle's, or the probe's when recovery asked the tool's probe
// after the agent died, so a probed call's replay is not taken for the
// tool's own answer.
func TestEffectRawSource(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := t.Context()

	r := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.NotContains(t, r.body, "raw_source", "no raw, no source")
	done := s.settle("agent", r, "done", "op-1", `{"id":"op-1"}`)
	require.Equal(t, "settle", done.body["raw_source"], done.raw)
	replay := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusOK, replay.status, replay.raw)
	require.Equal(t, "settle", replay.body["raw_source"])

	outside := sink.NewWebhook(sink.WebhookOpts{})
	t.Cleanup(outside.Close)
	_, err := toolcall.Register(ctx, s.pool, toolcall.RegisterParams{Tool: "mail.probe", Recovery: toolcall.RecoveryProbe,
		ProbeURL: outside.ProbeURL() + "/{key}", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	first := s.begin("agent", "run-2", "mail.probe", "acct-1", map[string]any{"n": 1}, map[string]any{"lease_seconds": 1})
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	key := first.body["key"].(string)
	req, err := http.NewRequest(http.MethodPost, outside.URL(), strings.NewReader(`{"target":"acct-1"}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	// The agent dies without a settle; once its lease ends, the next
	// begin has recovery ask the probe, which finds it.
	var probed reply
	await.Until(t, 20*time.Second, "a begin after the lease to find the call done by the probe", func() bool {
		probed = s.begin("agent", "run-2", "mail.probe", "acct-1", map[string]any{"n": 1})
		return probed.status == http.StatusOK
	}, func() string { return probed.raw })
	require.Equal(t, "done", probed.body["state"])
	require.Equal(t, "probe", probed.body["raw_source"], probed.raw)
	require.Equal(t, 1, outside.CountByEffectID()[key])
}

// TestEffectReaders: GET /effects/{key} answers the call with its args
// to the user it was begun for (the agent token that began it, and the
// user's own token), operators and admins; to anyone else, an agent
// token acting for an operator included, it is a 404 like a key nobody
// began.
func TestEffectReaders(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := context.Background()
	token := func(name, email string, agent bool, roles ...string) {
		pgtest.User(t, s.pool, pgtest.UserOpts{Email: email, Roles: roles})
		secret, _, err := auth.CreateToken(ctx, s.pool, email, name, agent)
		require.NoError(t, err)
		s.token[name] = secret
	}
	owner, _, err := auth.CreateToken(ctx, s.pool, "agent-owner@example.com", "own", false)
	require.NoError(t, err)
	s.token["owner"] = owner
	token("admin", "boss@example.com", false, "admin")
	token("other-agent", "ops@example.com", true, "operator")

	r := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{"status": "gold", "note": "VIP"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	key := r.body["key"].(string)
	for _, who := range []string{"agent", "owner", "operator", "admin"} {
		got := s.do(who, http.MethodGet, "/effects/"+key, "", "")
		require.Equal(t, http.StatusOK, got.status, "%s reads it: %s", who, got.raw)
		require.Equal(t, map[string]any{"status": "gold", "note": "VIP"}, got.body["args"], who)
		require.Equal(t, "pending", got.body["state"])
		require.NotContains(t, got.body, "lease", "never the lease")
	}
	nobody := s.do("operator", http.MethodGet, "/effects/v1:"+strings.Repeat("0", 64), "", "")
	require.Equal(t, http.StatusNotFound, nobody.status, nobody.raw)
	for _, who := range []string{"viewer", "proposer", "approver", "other-agent"} {
		got := s.do(who, http.MethodGet, "/effects/"+key, "", "")
		require.Equal(t, http.StatusNotFound, got.status, "%s may not read it: %s", who, got.raw)
		require.Equal(t, "not_found", got.errCode())
		require.NotContains(t, got.raw, "VIP")
		require.Equal(t, strings.ReplaceAll(nobody.errMessage(), strings.Repeat("0", 64), key[3:]), got.errMessage(),
			"%s: the same answer as a key nobody began", who)
	}
}

// TestEffectWait: GET ?wait= answers as soon as the call's state
// changes (here the holder's settle, made once the poll listens), not
// when the wait ends; a state that does not change by itself answers at
// once; a bad wait is a 400 naming wait.
func TestEffectWait(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	key := r.body["key"].(string)

	for _, bad := range []string{"forever", "61s", "-1s", "90"} {
		got := s.do("agent", http.MethodGet, "/effects/"+key+"?wait="+bad, "", "")
		require.Equal(t, http.StatusBadRequest, got.status, "%s: %s", bad, got.raw)
		require.Contains(t, got.errMessage(), "wait", bad)
	}

	start := time.Now()
	answer := make(chan reply, 1)
	go func() { answer <- s.do("agent", http.MethodGet, "/effects/"+key+"?wait=50s", "", "") }()
	await.Until(t, 10*time.Second, "the long poll to listen for the call's changes", func() bool {
		return pgtest.Listeners(t, s.pool, "onceplan_tool_call") > 0
	})
	done := s.settle("agent", r, "done", "op-1", `{"id":"op-1"}`)
	require.Equal(t, http.StatusOK, done.status, done.raw)
	got := await.Recv(t, answer, 20*time.Second, "the long poll's answer after the settle")
	require.Equal(t, http.StatusOK, got.status, got.raw)
	require.Equal(t, "done", got.body["state"])
	require.Equal(t, "settle", got.body["raw_source"])
	require.Less(t, time.Since(start), 40*time.Second, "answered at the change, not at the end of the wait")

	start = time.Now()
	again := s.do("agent", http.MethodGet, "/effects/"+key+"?wait=50s", "", "")
	require.Equal(t, "done", again.body["state"])
	require.Less(t, time.Since(start), 20*time.Second, "done does not change by itself: answered at once")
}

// TestEffectTimingFields: lease_seconds beside lease_until, counted by
// the server's clock; a call only a person settles answers Retry-After
// (and retry_after) saying when to come back.
func TestEffectTimingFields(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.begin("agent", "run-1", "crm.set_status", "customer-1", map[string]any{"status": "gold"}, map[string]any{"lease_seconds": 30})
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	secs, ok := r.body["lease_seconds"].(float64)
	require.True(t, ok, "lease_seconds is a number: %s", r.raw)
	require.InDelta(t, 29, secs, 1.01, "the lease's seconds left, by the server's clock")
	hb := s.json("agent", http.MethodPost, "/effects/"+r.body["key"].(string)+"/heartbeat", map[string]any{"lease": r.body["lease"], "lease_seconds": 120})
	require.Equal(t, http.StatusOK, hb.status, hb.raw)
	require.InDelta(t, 119, hb.body["lease_seconds"], 1.01)

	key := s.unknownCall("run-2")
	in := s.begin("agent", "run-2", "crm.set_status", "customer-9", map[string]any{"status": "gold"})
	require.Equal(t, http.StatusConflict, in.status, in.raw)
	require.Equal(t, "unknown", in.body["state"])
	after, err := strconv.Atoi(in.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After on a call a person must resolve: %v", in.header)
	require.Positive(t, after)
	require.EqualValues(t, after, in.body["retry_after"])
	got := s.do("agent", http.MethodGet, "/effects/"+key, "", "")
	require.Equal(t, strconv.Itoa(after), got.header.Get("Retry-After"))
}
