package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/api"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// server is a real HTTP server with the API on a test database, and a
// token for each kind of caller.
type server struct {
	t     testing.TB
	url   string
	pool  *pgxpool.Pool
	svc   *approval.Service
	token map[string]string // proposer, approver, operator, viewer, agent
	// outbox is the maildir of the "outbox" provider test sends go to.
	outbox string
	// handler is the API itself, without the HTTP server around it.
	handler http.Handler
}

func newServer(t testing.TB, tweak func(*api.Config)) *server {
	t.Helper()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(pool, jobs.NewEnqueuer(client))
	svc.Providers = []string{"outbox"} // as serve's wiring sets them: its configured providers
	outbox := filepath.Join(t.TempDir(), "outbox")
	prov, err := provider.ParseFlag("outbox=maildir://" + outbox)
	require.NoError(t, err)
	reg, err := provider.NewRegistry(prov)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	sender, err := approval.NewTestSender(approval.TestSendConfig{DB: pool, Providers: reg})
	require.NoError(t, err)
	cfg := api.Config{Pool: pool, Approval: svc, BaseURL: "https://onceplan.example", TestSend: sender}
	if tweak != nil {
		tweak(&cfg)
	}
	e := echo.New()
	api.Register(e, cfg)
	// Every exchange of a test is checked against the document; a fuzz
	// target checks its own (fuzz_test.go), with each input's t.
	var h http.Handler = e
	if tt, ok := t.(*testing.T); ok {
		h = conforming(tt, e)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	s := &server{t: t, url: ts.URL + api.Prefix, pool: pool, svc: svc, token: map[string]string{}, outbox: outbox, handler: e}
	for _, u := range []struct{ name, role string }{
		{"proposer", "proposer"}, {"approver", "approver"}, {"operator", "operator"}, {"viewer", "viewer"},
	} {
		email := u.name + "@example.com"
		pgtest.User(t, pool, pgtest.UserOpts{Email: email, Roles: []string{u.role}})
		secret, _, err := auth.CreateToken(context.Background(), pool, email, u.name+" token", false)
		require.NoError(t, err)
		s.token[u.name] = secret
	}
	// The agent's token belongs to a person with every role: the token
	// kind, not the roles, keeps it from deciding.
	pgtest.User(t, pool, pgtest.UserOpts{Email: "agent-owner@example.com", Roles: []string{"proposer", "approver", "operator"}})
	secret, _, err := auth.CreateToken(context.Background(), pool, "agent-owner@example.com", "assistant", true)
	require.NoError(t, err)
	s.token["agent"] = secret
	return s
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r reply) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r reply) errMessage() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["message"].(string)
	return c
}

func (s *server) do(who, method, path, contentType string, body string, headers ...string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(s.t, err)
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+s.token[who])
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	r := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		require.NoError(s.t, json.Unmarshal(raw, &r.body), "%s", raw)
	}
	return r
}

func (s *server) json(who, method, path string, body any, headers ...string) reply {
	s.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(s.t, err)
	return s.do(who, method, path, "application/json", string(b), headers...)
}

func newCampaign(n int) map[string]any {
	var targets []map[string]any
	for i := range n {
		targets = append(targets, map[string]any{"address": fmt.Sprintf("person%03d@example.com", i), "vars": map[string]any{"first_name": fmt.Sprintf("P%d", i)}})
	}
	return map[string]any{
		"name": "December newsletter", "provider": "outbox",
		"from": "news@example.com", "subject": "Hello {{.first_name}}", "text": "Hi {{.first_name}}",
		"targets": targets,
	}
}

// started is the id of a campaign of n targets (newCampaign) that the
// proposer created and submitted, the approver approved and the operator
// started.
func (s *server) started(n int) string {
	s.t.Helper()
	created := s.json("proposer", "POST", "/campaigns", newCampaign(n))
	require.Equal(s.t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	sub := s.do("proposer", "POST", "/campaigns/"+id+"/submit", "", "")
	s.json("approver", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": sub.body["plan_hash"]})
	s.do("operator", "POST", "/campaigns/"+id+"/start", "", "")
	return id
}

func TestAgentProposesAndHumansDecide(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)

	created := s.json("agent", "POST", "/campaigns", newCampaign(5), "Idempotency-Key", "job-42")
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	require.Equal(t, "draft", created.body["state"])
	require.Equal(t, api.Prefix+"/campaigns/"+id, created.header.Get("Location"))
	imp := created.body["import"].(map[string]any)
	require.EqualValues(t, 5, imp["accepted"])
	require.Equal(t, "https://onceplan.example/campaigns/"+id+"/approval", created.body["approval_url"])

	// The agent's retry after a timeout gets the same campaign.
	again := s.json("agent", "POST", "/campaigns", newCampaign(5), "Idempotency-Key", "job-42")
	require.Equal(t, http.StatusOK, again.status, again.raw)
	require.Equal(t, id, again.body["id"])
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	// The same key with another body is refused, and makes nothing.
	other := s.json("agent", "POST", "/campaigns", newCampaign(6), "Idempotency-Key", "job-42")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	require.Equal(t, "idempotency_mismatch", other.errCode())
	var campaigns int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM campaign`).Scan(&campaigns))
	require.Equal(t, 1, campaigns)

	edited := s.json("agent", "PATCH", "/campaigns/"+id, map[string]any{"subject": "Hi there, {{.first_name}}"})
	require.Equal(t, http.StatusOK, edited.status, edited.raw)
	require.Equal(t, "Hi there, {{.first_name}}", edited.body["payload"].(map[string]any)["subject"])
	require.Equal(t, "Hi {{.first_name}}", edited.body["payload"].(map[string]any)["text"], "fields not given stay")

	sub := s.do("agent", "POST", "/campaigns/"+id+"/submit", "", "")
	require.Equal(t, http.StatusOK, sub.status, sub.raw)
	require.Equal(t, "pending_approval", sub.body["state"])
	hash := sub.body["plan_hash"].(string)

	// An agent never decides, whatever its owner's roles.
	for _, action := range []string{"approve", "reject", "start", "pause", "resume", "cancel"} {
		body := map[string]any{}
		switch action {
		case "reject", "pause", "cancel":
			body = map[string]any{"reason": "because"}
		case "approve":
			body = map[string]any{"plan_hash": hash}
		}
		r := s.json("agent", "POST", "/campaigns/"+id+"/"+action, body)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", action, r.raw)
		require.Equal(t, "forbidden", r.errCode())
	}

	stale := s.json("approver", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": strings.Repeat("0", 64)})
	require.Equal(t, http.StatusConflict, stale.status, stale.raw)
	approved := s.json("approver", "POST", "/campaigns/"+id+"/approve", map[string]any{"plan_hash": hash})
	require.Equal(t, http.StatusOK, approved.status, approved.raw)
	require.Equal(t, "approved", approved.body["state"])
	require.EqualValues(t, 1, approved.body["approvals"])

	started := s.do("operator", "POST", "/campaigns/"+id+"/start", "", "")
	require.Equal(t, http.StatusOK, started.status, started.raw)
	require.Equal(t, "running", started.body["state"])
	counts := started.body["counts"].(map[string]any)
	require.EqualValues(t, 5, counts["planned"])
	require.EqualValues(t, 5, counts["not_started"])

	audit := s.do("viewer", "GET", "/campaigns/"+id+"/audit", "", "")
	require.Equal(t, http.StatusOK, audit.status, audit.raw)
	require.EqualValues(t, 5, audit.body["approved"])
	require.EqualValues(t, 5, audit.body["missing"])
	require.Equal(t, false, audit.body["holds"])

	// The viewer reads everything and decides nothing.
	require.Equal(t, http.StatusOK, s.do("viewer", "GET", "/campaigns/"+id, "", "").status)
	require.Equal(t, http.StatusForbidden, s.do("viewer", "POST", "/campaigns/"+id+"/pause", "", "").status)
}

func TestTargetsPageByCursorAndFilter(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	id := s.started(25)

	// Settle one target as done, through the ledger as a worker would.
	first := s.do("viewer", "GET", "/campaigns/"+id+"/targets?limit=10", "", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	items := first.body["items"].([]any)
	require.Len(t, items, 10)
	key := items[3].(map[string]any)["key"].(string)
	store := ledger.NewStore(s.pool)
	ctx := context.Background()
	c, err := store.Claim(ctx, workerClaim(t, s, id, items[3], "w"))
	require.NoError(t, err)
	_, err = store.RecordResponse(ctx, c.Effect.ID, ledger.ResponseSend, []byte("ok"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateDone, Receipt: "msg-1"})
	require.NoError(t, err)

	var seen []string
	next := ""
	for page := 0; ; page++ {
		path := "/campaigns/" + id + "/targets?limit=10"
		if next != "" {
			path += "&after=" + next
		}
		r := s.do("viewer", "GET", path, "", "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, it := range r.body["items"].([]any) {
			seen = append(seen, it.(map[string]any)["target"].(string))
		}
		if r.body["next"] == nil {
			break
		}
		next = r.body["next"].(string)
		require.Less(t, page, 5)
	}
	require.Len(t, seen, 25, "every target once across the pages")
	require.True(t, sort.StringsAreSorted(seen))

	done := s.do("viewer", "GET", "/campaigns/"+id+"/targets?state=done", "", "")
	require.Equal(t, http.StatusOK, done.status, done.raw)
	require.Len(t, done.body["items"].([]any), 1)
	row := done.body["items"].([]any)[0].(map[string]any)
	require.Equal(t, key, row["key"])
	require.Equal(t, "msg-1", row["receipt"])
	require.EqualValues(t, 1, row["attempts"])
	require.Nil(t, done.body["next"])

	search := s.do("viewer", "GET", "/campaigns/"+id+"/targets?q=PERSON01", "", "")
	require.Len(t, search.body["items"].([]any), 10, "person010–person019")

	// The settle went to the ledger directly, not through an API action
	// that drops the cached counts: they show it once the entry the start
	// cached has aged out (approval.CountsCache: at most three times what
	// the count took, so at once unless the machine is busy).
	var got reply
	await.Until(t, time.Minute, "the campaign's counts showing the settled target", func() bool {
		got = s.do("viewer", "GET", "/campaigns/"+id, "", "")
		return got.body["counts"].(map[string]any)["done"] == 1.0
	})
	require.EqualValues(t, 1, got.body["counts"].(map[string]any)["done"])
	require.EqualValues(t, 24, got.body["counts"].(map[string]any)["not_started"])

	// Campaign listing pages too.
	for range 2 {
		require.Equal(t, http.StatusCreated, s.json("proposer", "POST", "/campaigns", newCampaign(1)).status)
	}
	var ids []string
	next = ""
	for {
		path := "/campaigns?limit=2"
		if next != "" {
			path += "&after=" + next
		}
		r := s.do("viewer", "GET", path, "", "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, it := range r.body["items"].([]any) {
			ids = append(ids, it.(map[string]any)["id"].(string))
		}
		if r.body["next"] == nil {
			break
		}
		next = r.body["next"].(string)
	}
	require.Len(t, ids, 3)
	require.Equal(t, id, ids[2], "oldest last")
}

func TestBadRequestsGetOneClearErrorAndChangeNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *api.Config) { c.MaxJSONBytes = 64 << 10 })
	s.svc.MaxBytes = 4 << 10
	created := s.json("proposer", "POST", "/campaigns", newCampaign(2))
	require.Equal(t, http.StatusCreated, created.status)
	id := created.body["id"].(string)
	hash := created.body["plan_hash"].(string)

	cases := []struct {
		name, who, method, path, ctype, body string
		status                               int
		code, mentions                       string
	}{
		{"no token", "", "GET", "/campaigns", "", "", 401, "unauthenticated", "Bearer"},
		{"malformed JSON", "proposer", "POST", "/campaigns", "application/json", `{"name": "x",`, 400, "invalid_json", "ends"},
		{"unknown field", "proposer", "POST", "/campaigns", "application/json", `{"name":"x","provider":"outbox","colour":"red"}`, 400, "invalid", `"colour"`},
		{"wrong type", "proposer", "POST", "/campaigns", "application/json", `{"name":"x","required_approvals":"two"}`, 400, "invalid", "required_approvals"},
		{"huge number", "proposer", "POST", "/campaigns", "application/json", `{"name":"x","required_approvals":1e400}`, 400, "", ""},
		{"trailing data", "proposer", "POST", "/campaigns", "application/json", `{"name":"x"} {}`, 400, "invalid_json", "after"},
		{"empty name", "proposer", "POST", "/campaigns", "application/json", `{"name":" ","provider":"outbox"}`, 400, "invalid", "name"},
		{"bad provider name", "proposer", "POST", "/campaigns", "application/json", `{"name":"x","provider":"Out Box!"}`, 400, "invalid", "provider"},
		{"not JSON", "proposer", "POST", "/campaigns", "text/plain", `hello`, 415, "unsupported_media_type", "application/json"},
		{"negative limit", "viewer", "GET", "/campaigns/" + id + "/targets?limit=-1", "", "", 400, "invalid", "limit"},
		{"limit too big", "viewer", "GET", "/campaigns/" + id + "/targets?limit=100000", "", "", 400, "invalid", "limit"},
		{"bad cursor", "viewer", "GET", "/campaigns/" + id + "/targets?after=zzz", "", "", 400, "invalid", "cursor"},
		{"bad state", "viewer", "GET", "/campaigns/" + id + "/targets?state=sent", "", "", 400, "invalid", "state"},
		{"no such campaign", "viewer", "GET", "/campaigns/8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000", "", "", 404, "not_found", ""},
		{"not a campaign id", "viewer", "GET", "/campaigns/drop-table", "", "", 404, "not_found", ""},
		{"no such route", "viewer", "GET", "/nope", "", "", 404, "not_found", "/nope"},
		{"csv without header", "proposer", "POST", "/campaigns/" + id + "/targets", "text/csv", "", 400, "invalid_list", "empty"},
		{"list over the size limit", "proposer", "POST", "/campaigns/" + id + "/targets", "text/csv", "email\n" + strings.Repeat("someone@example.com\n", 400), 413, "too_large", "limit"},
		{"list as XML", "proposer", "POST", "/campaigns/" + id + "/targets", "application/xml", "<a/>", 415, "unsupported_media_type", "text/csv"},
		{"approve without hash", "approver", "POST", "/campaigns/" + id + "/approve", "application/json", `{}`, 400, "invalid", "plan_hash"},
		{"reject without reason", "approver", "POST", "/campaigns/" + id + "/reject", "application/json", `{"reason":" "}`, 400, "invalid", "reason"},
		{"resolve a key that is nobody's", "operator", "POST", "/effects/v1:" + strings.Repeat("a", 64) + "/resolve", "application/json", `{"outcome":"delivered","reason":"seen"}`, 404, "not_found", ""},
		{"resolve with a bad outcome", "operator", "POST", "/effects/v1:" + strings.Repeat("a", 64) + "/resolve", "application/json", `{"outcome":"maybe","reason":"seen"}`, 400, "invalid", "outcome"},
		{"resolve a malformed key", "operator", "POST", "/effects/nokey/resolve", "application/json", `{"outcome":"delivered","reason":"seen"}`, 400, "invalid", ""},
	}
	for _, tc := range cases {
		r := s.do(tc.who, tc.method, tc.path, tc.ctype, tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.raw)
		require.NotEmpty(t, r.errMessage(), "%s: a message", tc.name)
		require.NotContains(t, r.errMessage(), "\n", "%s: one line", tc.name)
		if tc.code != "" {
			require.Equal(t, tc.code, r.errCode(), "%s", tc.name)
		}
		require.Contains(t, r.errMessage(), tc.mentions, "%s", tc.name)
	}

	// A forged token and a revoked one.
	forged := s.do("", "GET", "/campaigns", "", "", "Authorization", "Bearer opp_"+strings.Repeat("x", 43))
	require.Equal(t, http.StatusUnauthorized, forged.status)
	tokens, err := auth.ListTokens(context.Background(), s.pool, "viewer@example.com")
	require.NoError(t, err)
	_, err = auth.RevokeToken(context.Background(), s.pool, tokens[0].ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, s.do("viewer", "GET", "/campaigns", "", "").status)

	// None of the failures changed the campaign.
	after := s.do("proposer", "GET", "/campaigns/"+id, "", "")
	require.Equal(t, hash, after.body["plan_hash"])
	require.Equal(t, "draft", after.body["state"])
	require.EqualValues(t, 2, after.body["counts"].(map[string]any)["planned"])
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM campaign`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestCSVImportReportsEveryLine(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	created := s.json("proposer", "POST", "/campaigns", map[string]any{
		"name": "Invoices", "provider": "outbox", "from": "billing@example.com", "subject": "Invoice", "text": "Hi {{.first_name}}",
	})
	require.Equal(t, http.StatusCreated, created.status, created.raw)
	id := created.body["id"].(string)
	csv := "\ufeffEmail;first_name\r\nada@example.com;Ada\r\nnot-an-address;X\r\nADA@Example.com;Ada again\r\nbob@example.com;Bob\r\n"
	r := s.do("proposer", "POST", "/campaigns/"+id+"/targets", "text/csv; charset=utf-8", csv)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	imp := r.body["import"].(map[string]any)
	require.EqualValues(t, 4, imp["rows"])
	require.EqualValues(t, 2, imp["accepted"])
	require.EqualValues(t, 1, imp["duplicate"])
	require.EqualValues(t, 1, imp["rejected_count"])
	rej := imp["rejected"].([]any)[0].(map[string]any)
	require.EqualValues(t, 3, rej["line"])
	dup := imp["duplicates"].([]any)[0].(map[string]any)
	require.EqualValues(t, 4, dup["line"])
	require.EqualValues(t, 2, dup["duplicate_of"])
	require.NotEqual(t, created.body["plan_hash"], r.body["plan_hash"], "the targets are part of the plan")

	appended := s.do("proposer", "POST", "/campaigns/"+id+"/targets?append=true", "application/json", `[{"address":"cy@example.com","vars":{"first_name":"Cy"}}]`)
	require.Equal(t, http.StatusOK, appended.status, appended.raw)
	require.EqualValues(t, 3, appended.body["counts"].(map[string]any)["planned"])
}

func TestEffectRoutes(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	id := s.started(2)
	page := s.do("viewer", "GET", "/campaigns/"+id+"/targets", "", "")
	row := page.body["items"].([]any)[0].(map[string]any)
	key, target := row["key"].(string), row["target"].(string)

	// A worker died mid-call on an SMTP relay: unknown.
	store := ledger.NewStore(s.pool)
	ctx := context.Background()
	c, err := store.Claim(ctx, workerClaim(t, s, id, row, "dead"))
	require.NoError(t, err)
	_, err = store.Settle(ctx, ledger.SettleParams{EffectID: c.Effect.ID, State: ledger.StateUnknown, Reason: "worker died"})
	require.NoError(t, err)

	body := map[string]any{"outcome": "delivered", "reason": "in the relay log"}
	require.Equal(t, http.StatusForbidden, s.json("agent", "POST", "/effects/"+key+"/resolve", body).status)
	require.Equal(t, http.StatusForbidden, s.json("viewer", "POST", "/effects/"+key+"/resolve", body).status)
	res := s.json("operator", "POST", "/effects/"+key+"/resolve", body)
	require.Equal(t, http.StatusOK, res.status, res.raw)
	require.Equal(t, "done", res.body["state"])
	require.Equal(t, id, res.body["campaign_id"])
	again := s.json("operator", "POST", "/effects/"+key+"/resolve", body)
	require.Equal(t, http.StatusConflict, again.status, "a done effect is not resolved twice: %s", again.raw)

	sup := map[string]any{"target": target, "reason": "the customer asked for it again"}
	require.Equal(t, http.StatusForbidden, s.json("operator", "POST", "/effects/"+key+"/supersede", sup).status, "superseding needs an approver")
	require.Equal(t, http.StatusForbidden, s.json("agent", "POST", "/effects/"+key+"/supersede", sup).status)
	wrong := s.json("approver", "POST", "/effects/"+key+"/supersede", map[string]any{"target": "x@example.com", "reason": "r"})
	require.Equal(t, http.StatusBadRequest, wrong.status)
	require.Equal(t, "target", wrong.body["error"].(map[string]any)["field"])
	ok := s.json("approver", "POST", "/effects/"+key+"/supersede", sup)
	require.Equal(t, http.StatusOK, ok.status, ok.raw)
	require.EqualValues(t, 1, ok.body["epoch"])

	require.Equal(t, http.StatusForbidden, s.json("agent", "POST", "/effects/"+key+"/revoke", map[string]any{"reason": "r"}).status)
	nothing := s.json("operator", "POST", "/effects/"+key+"/revoke", map[string]any{"reason": "reversed"})
	require.Equal(t, http.StatusNotFound, nothing.status, "no done effect at the new epoch: %s", nothing.raw)
}

func TestTooManyRequests(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *api.Config) { c.RatePerToken = rate.Limit(1) })
	var statuses []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			r := s.do("viewer", "GET", "/campaigns", "", "")
			mu.Lock()
			statuses = append(statuses, r.status)
			mu.Unlock()
			if r.status == http.StatusTooManyRequests {
				require.Equal(t, "1", r.header.Get("Retry-After"))
				require.Equal(t, "rate_limited", r.errCode())
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the burst of requests to be answered")
	require.Contains(t, statuses, http.StatusTooManyRequests)
	require.Contains(t, statuses, http.StatusOK)
	// Another token has its own allowance.
	require.Equal(t, http.StatusOK, s.do("operator", "GET", "/campaigns", "", "").status)
}

// TestOpenAPIDocumentsEveryRoute fails when a route exists that the
// document lacks, or the document names a route that does not exist.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Servers []struct{ URL string }    `yaml:"servers"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(api.OpenAPI(), &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.Equal(t, api.Prefix, doc.Servers[0].URL)
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+api.Prefix+path)
		}
	}
	routes := api.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	require.Equal(t, routes, documented)

	// And the server serves the document.
	s := newServer(t, nil)
	r := s.do("", "GET", "/openapi.yaml", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.True(t, bytes.Equal([]byte(r.raw), api.OpenAPI()))
}

// workerClaim is the claim a worker makes for a target of the campaign's
// plan (an item of its target list): the key, with the plan and the
// target's ordinal, as the executor claims.
func workerClaim(t *testing.T, s *server, campaignID string, item any, owner string) ledger.ClaimParams {
	t.Helper()
	it := item.(map[string]any)
	var planID int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT plan_id FROM campaign WHERE id = $1`, campaignID).Scan(&planID))
	return ledger.ClaimParams{Key: ledger.Key(it["key"].(string)), Owner: owner, PlanID: planID, Ordinal: int(it["ordinal"].(float64))}
}
