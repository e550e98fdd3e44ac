package api_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/web/api"
)

// outboxFiles reads the messages delivered to the server's outbox.
func (s *server) outboxFiles() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(s.outbox, "new"))
	if os.IsNotExist(err) {
		return out
	}
	require.NoError(s.t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(s.outbox, "new", e.Name()))
		require.NoError(s.t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func (s *server) count(table string) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// TestTestSendReachesReviewersAndNotTheLedger: a test send of a running
// campaign's second target lands in the outbox addressed to the reviewer,
// "[Test]" before the subject, and the campaign's counts, its effects and
// its targets' keys are what they were; the trail records it.
func TestTestSendReachesReviewersAndNotTheLedger(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "running")
	before := w.do("viewer", "GET", "/campaigns/"+c.id, "", "")
	require.Equal(t, http.StatusOK, before.status, before.raw)
	effects := w.count("effect")
	snap := snapshot(t, w.server)

	r := w.json("approver", "POST", "/campaigns/"+c.id+"/test", map[string]any{"to": []string{"Decider@Example.com", "operator@example.com"}, "ordinal": 2})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, "[Test] Hi Bob", r.body["subject"])
	require.Equal(t, "bob@example.com", r.body["target"])
	require.EqualValues(t, 2, r.body["ordinal"])
	deliveries := r.body["deliveries"].([]any)
	require.Len(t, deliveries, 2)
	keys := map[string]bool{}
	for _, d := range deliveries {
		d := d.(map[string]any)
		require.Equal(t, "done", d["outcome"], d)
		keys[d["key"].(string)] = true
	}
	require.Len(t, keys, 2, "each message its own key")

	files := w.outboxFiles()
	require.Len(t, files, 2)
	var to []string
	for _, m := range files {
		require.Contains(t, m, "Subject: [Test] Hi Bob")
		require.Contains(t, m, "Hello Bob")
		for _, line := range strings.Split(m, "\r\n") {
			if v, ok := strings.CutPrefix(line, "To: "); ok {
				to = append(to, v)
			}
		}
		require.NotContains(t, m, "bob@example.com", "the target is not mailed")
		// No working unsubscribe link: it would unsubscribe the target.
		require.Contains(t, m, "List-Unsubscribe: <https://onceplan.invalid/u/sample>")
		for _, rest := range strings.Split(m, "/u/")[1:] {
			require.True(t, strings.HasPrefix(rest, "sample"), "an unsubscribe link that is not the sample: /u/%.40s", rest)
		}
	}
	require.ElementsMatch(t, []string{"<decider@example.com>", "<operator@example.com>"}, to)

	// Nothing of the ledger moved: no effect, the same counts, no target
	// has a test message's key.
	require.Equal(t, effects, w.count("effect"))
	after := w.do("viewer", "GET", "/campaigns/"+c.id, "", "")
	require.Equal(t, before.body["counts"], after.body["counts"])
	var clash int
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT count(*) FROM target WHERE key = ANY($1)`, mapKeys(keys)).Scan(&clash))
	require.Zero(t, clash)
	for table, rows := range snapshot(t, w.server) {
		if table != "campaign_event" && table != "test_send_message" {
			require.Equal(t, snap[table], rows, "%s changed", table)
		}
	}
	require.Equal(t, 2, w.count("test_send_message"), "each message recorded before it was sent")

	// The trail says who, to whom, which ordinal and the answers.
	var actor, reason, detail string
	require.NoError(t, w.pool.QueryRow(context.Background(), `
		SELECT u.email, e.reason, e.detail::text FROM campaign_event e JOIN app_user u ON u.id = e.actor_id
		WHERE e.campaign_id = $1 AND e.action = 'test_send'`, c.id).Scan(&actor, &reason, &detail))
	require.Equal(t, "approver@example.com", actor)
	require.Equal(t, "test send of target 2 to decider@example.com, operator@example.com", reason)
	require.Contains(t, detail, `"ordinal": 2`)
	require.Contains(t, detail, "maildir: delivered")
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTestSendRefusals: a stranger's address, too many addresses, an
// agent, a viewer, an ordinal past the list and the rate limit are each
// refused in one sentence, and send and record nothing.
func TestTestSendRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.campaignIn(t, "pending")
	path := "/campaigns/" + c.id + "/test"
	body := func(to ...string) string {
		return `{"to":["` + strings.Join(to, `","`) + `"]}`
	}
	w.refused("proposer", "POST", path, "application/json", body("decider@example.com", "stranger@elsewhere.example"), 400, "invalid",
		"to[1]: stranger@elsewhere.example is not a user or an allowed test recipient")
	w.refused("proposer", "POST", path, "application/json", body("decider@example.com", "not an address"), 400, "invalid", "to[1]")
	// A disabled user is no longer a reviewer.
	pgtest.User(t, w.pool, pgtest.UserOpts{Email: "gone@example.com", Roles: []string{"viewer"}})
	_, err := auth.DisableUser(w.ctx, w.pool, "gone@example.com")
	require.NoError(t, err)
	w.refused("proposer", "POST", path, "application/json", body("gone@example.com"), 400, "invalid", "to[0]: gone@example.com is not a user")
	var eleven []string
	for range 11 {
		eleven = append(eleven, "decider@example.com")
	}
	w.refused("proposer", "POST", path, "application/json", body(eleven...), 400, "invalid", "at most 10")
	w.refused("proposer", "POST", path, "application/json", `{"to":[]}`, 400, "invalid", "to")
	w.refused("proposer", "POST", path, "application/json", `{"to":["decider@example.com"],"ordinal":4}`, 400, "invalid", "ordinal", "1 to 3")
	w.refused("agent", "POST", path, "application/json", body("decider@example.com"), 403, "forbidden", "agent")
	w.refused("viewer", "POST", path, "application/json", body("decider@example.com"), 403, "forbidden")
	require.Empty(t, w.outboxFiles())

	// Five in a row, then the sixth waits; another user has their own.
	for i := range 5 {
		r := w.json("proposer", "POST", path, map[string]any{"to": []string{"decider@example.com"}})
		require.Equal(t, http.StatusOK, r.status, "send %d: %s", i+1, r.raw)
	}
	limited := w.refused("proposer", "POST", path, "application/json", body("decider@example.com"), 429, "rate_limited", "try again in")
	require.NotEmpty(t, limited.header.Get("Retry-After"))
	require.Len(t, w.outboxFiles(), 5)
	var events int
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT count(*) FROM campaign_event WHERE campaign_id = $1 AND action = 'test_send'`, c.id).Scan(&events))
	require.Equal(t, 5, events)
	r := w.json("operator", "POST", path, map[string]any{"to": []string{"decider@example.com"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Len(t, w.outboxFiles(), 6)
}

// TestTestSendAllowList: an address on the allow-list (serve
// --test-recipients) may receive test sends without being a user.
func TestTestSendAllowList(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	s := newServer(t, func(c *api.Config) {
		p, err := provider.ParseFlag("outbox=maildir://" + dir)
		require.NoError(t, err)
		reg, err := provider.NewRegistry(p)
		require.NoError(t, err)
		c.TestSend, err = approval.NewTestSender(approval.TestSendConfig{DB: c.Pool, Providers: reg, AllowList: []string{"Reviewer@Agency.example"}})
		require.NoError(t, err)
	})
	s.outbox = dir
	created := s.json("proposer", "POST", "/campaigns", newCampaign(2))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	path := "/campaigns/" + created.body["id"].(string) + "/test"
	r := s.json("proposer", "POST", path, map[string]any{"to": []string{"reviewer@agency.example"}})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = s.json("proposer", "POST", path, map[string]any{"to": []string{"other@agency.example"}})
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Contains(t, r.errMessage(), "to[0]: other@agency.example is not a user or an allowed test recipient")
	files := s.outboxFiles()
	require.Len(t, files, 1)
	for _, m := range files {
		require.Contains(t, m, "Subject: [Test] Hello P0")
		require.Contains(t, m, "To: <reviewer@agency.example>")
	}
}

// TestTestSendNeverMailsASuppressedAddress: a reviewer the suppression
// list holds — an allowed test recipient who unsubscribed, a user an
// admin put on the list — gets no test message. The request is refused
// in one sentence naming the address and why, and sends and records
// nothing (counted at the maildir outbox); the others of the allow-list
// still get theirs. An address suppressed while a test send is under way
// (after its check, before its messages are recorded) is not mailed
// either: PostgreSQL refuses the message's row (migration 0039).
func TestTestSendNeverMailsASuppressedAddress(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	s := newServer(t, func(c *api.Config) {
		p, err := provider.ParseFlag("outbox=maildir://" + dir)
		require.NoError(t, err)
		reg, err := provider.NewRegistry(p)
		require.NoError(t, err)
		c.TestSend, err = approval.NewTestSender(approval.TestSendConfig{DB: c.Pool, Providers: reg,
			AllowList: []string{"reviewer@agency.example", "gone@agency.example", "late@agency.example"}})
		require.NoError(t, err)
	})
	s.outbox = dir
	ctx := context.Background()
	created := s.json("proposer", "POST", "/campaigns", newCampaign(2))
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	path := "/campaigns/" + id + "/test"
	_, _, err := suppression.Add(ctx, s.pool, suppression.AddParams{Address: "gone@agency.example", Reason: suppression.Unsubscribed,
		Source: suppression.FromUnsubscribe, CampaignID: id})
	require.NoError(t, err)
	_, _, err = suppression.Add(ctx, s.pool, suppression.AddParams{Address: "approver@example.com", Reason: suppression.Manual,
		Source: suppression.FromActor, Actor: "admin@example.com"})
	require.NoError(t, err)
	events := func() int {
		var n int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM campaign_event WHERE campaign_id = $1 AND action = 'test_send'`, id).Scan(&n))
		return n
	}

	r := s.refused("proposer", "POST", path, "application/json", `{"to":["reviewer@agency.example","Gone@Agency.example"]}`, 400, "invalid",
		"to[1]: gone@agency.example is on the suppression list (it unsubscribed on ", "a test send never mails a suppressed address", "nothing was sent")
	require.NotContains(t, r.errMessage(), "\n")
	s.refused("proposer", "POST", path, "application/json", `{"to":["approver@example.com"]}`, 400, "invalid",
		"to[0]: approver@example.com is on the suppression list (it was put on the list by admin@example.com on ")
	require.Empty(t, s.outboxFiles(), "no test message went anywhere")
	require.Zero(t, events())
	require.Zero(t, s.count("test_send_message"))

	ok := s.json("proposer", "POST", path, map[string]any{"to": []string{"reviewer@agency.example"}})
	require.Equal(t, http.StatusOK, ok.status, ok.raw)
	require.Len(t, s.outboxFiles(), 1)

	// Suppressed while the test send is under way: the unsubscribe holds
	// the address's lock, not yet committed, when the test send checks the
	// list (and finds nothing) and goes to record its message, which waits
	// for the lock; the unsubscribe commits; the message is refused.
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, _, err = suppression.Add(ctx, tx, suppression.AddParams{Address: "late@agency.example", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)
	answer := make(chan reply, 1)
	go func() {
		answer <- s.json("proposer", "POST", path, map[string]any{"to": []string{"late@agency.example"}})
	}()
	await.Until(t, time.Minute, "the test send waiting for the address's lock", func() bool {
		var waiting bool
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted)`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Commit(ctx))
	var late reply
	select {
	case late = <-answer:
	case <-time.After(time.Minute):
		require.Fail(t, "the test send did not answer within a minute of the unsubscribe's commit")
	}
	require.Equal(t, http.StatusBadRequest, late.status, late.raw)
	require.Contains(t, late.errMessage(), "late@agency.example is on the suppression list (it unsubscribed on ")
	require.Len(t, s.outboxFiles(), 1, "the address suppressed meanwhile got nothing")
	require.Equal(t, 1, events())
	require.Equal(t, 1, s.count("test_send_message"))
}
