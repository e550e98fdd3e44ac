package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/web/api"
)

// poll is a GET as s.do makes it, for a goroutine other than the test's:
// a failure is in the reply (status 0, raw the error) instead of failing
// the test from there.
func (s *server) poll(who, path string) reply {
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		return reply{raw: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+s.token[who])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{raw: err.Error()}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{raw: err.Error()}
	}
	r := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		return reply{raw: err.Error() + ": " + string(raw)}
	}
	return r
}

// stepsOf is an answer's list of steps (next_steps, waiting_for).
func stepsOf(t *testing.T, v any) []map[string]any {
	t.Helper()
	list, ok := v.([]any)
	require.True(t, ok, "a list of steps: %v", v)
	out := make([]map[string]any, len(list))
	for i, s := range list {
		out[i] = s.(map[string]any)
	}
	return out
}

// TestDecisionAnswersWhatBecameOfTheSubmission: never submitted, pending
// with who must act, pending after the first of two approvals, approved
// after the second; and rejected with the rejecter's reason.
func TestDecisionAnswersWhatBecameOfTheSubmission(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	pgtest.User(t, s.pool, pgtest.UserOpts{Email: "second@example.com", Roles: []string{"approver"}})
	secret, _, err := auth.CreateToken(context.Background(), s.pool, "second@example.com", "t", false)
	require.NoError(t, err)
	s.token["second"] = secret

	body := newCampaign(3)
	body["required_approvals"] = 2
	created := s.json("agent", "POST", "/campaigns", body)
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	approvalURL := "https://onceplan.example/campaigns/" + id + "/approval"

	d := s.do("agent", "GET", "/campaigns/"+id+"/decision?wait=5s", "", "")
	require.Equal(t, http.StatusOK, d.status, d.raw)
	require.Equal(t, "not_submitted", d.body["decision"], "answered at once: nothing waits for a decision")
	require.EqualValues(t, 0, d.body["version"])
	waiting := stepsOf(t, d.body["waiting_for"])
	require.Len(t, waiting, 1)
	require.Equal(t, "proposer", waiting[0]["who"])
	require.Equal(t, "submit", waiting[0]["kind"])
	require.Equal(t, "https://onceplan.example/campaigns/"+id+"/draft", waiting[0]["url"])

	sub := s.do("agent", "POST", "/campaigns/"+id+"/submit", "", "")
	require.Equal(t, http.StatusOK, sub.status, sub.raw)
	hash := sub.body["plan_hash"].(string)
	next := stepsOf(t, sub.body["next_steps"])
	require.Len(t, next, 1)
	require.Equal(t, map[string]any{"who": "approver", "kind": "approve", "count": 2.0, "url": approvalURL, "what": next[0]["what"]}, next[0])

	d = s.do("agent", "GET", "/campaigns/"+id+"/decision", "", "")
	require.Equal(t, http.StatusOK, d.status, d.raw)
	require.Equal(t, "pending", d.body["decision"])
	require.EqualValues(t, 1, d.body["version"])
	require.Equal(t, hash, d.body["plan_hash"])
	require.Equal(t, map[string]any{"have": 0.0, "required": 2.0, "by": []any{}}, d.body["approvals"])
	waiting = stepsOf(t, d.body["waiting_for"])
	require.Len(t, waiting, 1)
	require.Equal(t, "approver", waiting[0]["who"])
	require.EqualValues(t, 2, waiting[0]["count"], "approvals missing")
	require.Equal(t, approvalURL, waiting[0]["url"])
	require.Equal(t, approvalURL, d.body["approval_url"])

	require.Equal(t, http.StatusOK, s.json("approver", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": hash}).status)
	d = s.do("agent", "GET", "/campaigns/"+id+"/decision?wait=0", "", "")
	require.Equal(t, "pending", d.body["decision"], "one approval of two")
	require.Equal(t, map[string]any{"have": 1.0, "required": 2.0, "by": []any{"approver@example.com"}}, d.body["approvals"])
	require.EqualValues(t, 1, stepsOf(t, d.body["waiting_for"])[0]["count"])
	require.Contains(t, d.body["message"], "1 more approval (1 of 2 so far)")

	// The second approval ends a wait that began before it.
	type answer struct {
		r  reply
		at time.Time
	}
	done := make(chan answer, 1)
	const wait = 20 * time.Second
	began := time.Now()
	go func() {
		r := s.poll("agent", "/campaigns/"+id+"/decision?wait=20s")
		done <- answer{r, time.Now()}
	}()
	await.Until(t, time.Minute, "the long poll waiting on the server", func() bool {
		return pgtest.Listeners(t, s.pool, approval.DecisionChannel) == 1
	})
	select {
	case a := <-done:
		t.Fatalf("answered before the decision: %s", a.r.raw)
	default:
	}
	approved := s.json("second", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": hash})
	require.Equal(t, http.StatusOK, approved.status, approved.raw)
	at := time.Now()
	var a answer
	select {
	case a = <-done:
	case <-time.After(wait):
		t.Fatal("the long poll did not answer")
	}
	require.Equal(t, http.StatusOK, a.r.status, a.r.raw)
	require.Equal(t, "approved", a.r.body["decision"])
	require.Less(t, a.at.Sub(began), wait, "answered before its wait ran out")
	require.Less(t, a.at.Sub(at), 5*time.Second, "answered on the approval")
	require.Equal(t, "second@example.com", a.r.body["decided_by"])
	require.NotEmpty(t, a.r.body["decided_at"])
	require.Equal(t, map[string]any{"have": 2.0, "required": 2.0, "by": []any{"approver@example.com", "second@example.com"}}, a.r.body["approvals"])
	require.Empty(t, a.r.body["waiting_for"])

	// GET /campaigns/{id}: the operator starts it next.
	c := s.do("agent", "GET", "/campaigns/"+id, "", "")
	next = stepsOf(t, c.body["next_steps"])
	require.Equal(t, "operator", next[0]["who"])
	require.Equal(t, "start", next[0]["kind"])
	require.Equal(t, "https://onceplan.example/campaigns/"+id+"/run", next[0]["url"])

	// Rejected, with the reason from the trail.
	other := s.json("agent", "POST", "/campaigns", newCampaign(2))
	rid := other.body["id"].(string)
	require.Equal(t, http.StatusOK, s.do("agent", "POST", "/campaigns/"+rid+"/submit", "", "").status)
	require.Equal(t, http.StatusOK, s.json("approver", "POST", "/campaigns/"+rid+"/reject", map[string]any{"reason": "say which newsletter"}).status)
	d = s.do("viewer", "GET", "/campaigns/"+rid+"/decision?wait=30s", "", "")
	require.Equal(t, http.StatusOK, d.status, d.raw)
	require.Equal(t, "rejected", d.body["decision"])
	require.Equal(t, "say which newsletter", d.body["reason"])
	require.Equal(t, "approver@example.com", d.body["decided_by"])
	waiting = stepsOf(t, d.body["waiting_for"])
	require.Equal(t, "proposer", waiting[0]["who"])
	require.Equal(t, "revise", waiting[0]["kind"])
}

// TestDecisionWaitIsBounded: a wait that is not a duration or a number of
// seconds, negative, or above the maximum is refused with one sentence
// naming wait; an unknown campaign is 404.
func TestDecisionWaitIsBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "pending")
	for _, bad := range []string{"soon", "1.5", "-1s", "61s", "2m", "61", "30%20s"} {
		w.refused("agent", "GET", "/campaigns/"+c.id+"/decision?wait="+bad, "", "", http.StatusBadRequest, "invalid", "wait", "60s")
	}
	for _, good := range []string{"0", "1", "500ms", "1s"} {
		r := w.do("agent", "GET", "/campaigns/"+c.id+"/decision?wait="+good, "", "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", good, r.raw)
		require.Equal(t, "pending", r.body["decision"])
	}
	w.refused("agent", "GET", "/campaigns/8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000/decision?wait=1s", "", "", http.StatusNotFound, "not_found")
}

// TestDecisionLongPollEndsWithTheServer: a server that begins to stop
// answers its waiters at once, with the decision as it stands.
func TestDecisionLongPollEndsWithTheServer(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	s := newServer(t, func(c *api.Config) { c.Stopping = stopping })
	id := s.json("agent", "POST", "/campaigns", newCampaign(2)).body["id"].(string)
	require.Equal(t, http.StatusOK, s.do("agent", "POST", "/campaigns/"+id+"/submit", "", "").status)
	done := make(chan reply, 1)
	go func() { done <- s.poll("agent", "/campaigns/"+id+"/decision?wait=60s") }()
	await.Until(t, time.Minute, "the long poll waiting on the server", func() bool {
		return pgtest.Listeners(t, s.pool, approval.DecisionChannel) == 1
	})
	close(stopping)
	select {
	case r := <-done:
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, "pending", r.body["decision"])
	case <-time.After(10 * time.Second):
		t.Fatal("a stopping server kept its waiter")
	}
}

// TestNextStepsSayWhatAPersonMustDo: unknown targets of a running
// campaign are an operator's to resolve, with the run page filtered to
// them.
func TestNextStepsSayWhatAPersonMustDo(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "unknown")
	r := w.do("agent", "GET", "/campaigns/"+c.id, "", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	var found map[string]any
	for _, s := range stepsOf(t, r.body["next_steps"]) {
		if s["kind"] == "resolve_unknowns" {
			found = s
		}
	}
	require.NotNil(t, found, "%v", r.body["next_steps"])
	require.Equal(t, "operator", found["who"])
	require.EqualValues(t, 1, found["count"])
	require.Equal(t, "https://onceplan.example/campaigns/"+c.id+"/run?state=unknown", found["url"])
	require.Contains(t, found["what"], "1 target is unknown")

	d := w.do("agent", "GET", "/campaigns/"+w.campaignIn(t, "draft").id, "", "")
	next := stepsOf(t, d.body["next_steps"])
	require.Len(t, next, 1)
	require.Equal(t, "submit", next[0]["kind"])
}
