package web

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testPassword = "correct horse battery staple"

// bundle is one test's server on its own database, with a signed-in
// client per role.
type bundle struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *Server
	svc  *approval.Service
	as   map[string]*client // by role name; "approver2" is a second approver
}

// setup starts a server (no workers: jobs are enqueued, never worked) and
// signs in one user per role.
func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, "")
}

// setupWith is setup with options on the outbox provider's URL
// ("rate=2/s").
func setupWith(t *testing.T, outboxOptions string) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	svc := approval.NewService(pool, jobs.NewEnqueuer(rc))
	u := "outbox=maildir://" + filepath.Join(t.TempDir(), "outbox")
	if outboxOptions != "" {
		u += "?" + outboxOptions
	}
	p, err := provider.ParseFlag(u)
	require.NoError(t, err)
	reg, err := provider.NewRegistry(p)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	b := &bundle{t: t, pool: pool, svc: svc, as: map[string]*client{}}
	b.srv = NewServer(Config{Pool: pool, Approval: svc, Providers: reg})
	for _, role := range []string{"admin", "proposer", "approver", "approver2", "operator", "viewer"} {
		r := strings.TrimSuffix(role, "2")
		b.as[role] = b.user(role+"@example.com", auth.Role(r))
	}
	return b
}

// user creates a user with roles and signs them in.
func (b *bundle) user(email string, roles ...auth.Role) *client {
	b.t.Helper()
	ctx := context.Background()
	_, err := auth.CreateUser(ctx, b.pool, auth.NewUser{Email: email, Roles: roles, Password: testPassword})
	require.NoError(b.t, err)
	token, u, err := auth.Login(ctx, b.pool, email, testPassword, auth.LoginMeta{})
	require.NoError(b.t, err)
	return &client{t: b.t, h: b.srv.Handler(), token: token, csrf: csrfFromSession(token), actor: u.Actor()}
}

// anon is a visitor who is not signed in.
func (b *bundle) anon() *client { return &client{t: b.t, h: b.srv.Handler()} }

// client sends requests as one signed-in user.
type client struct {
	t     *testing.T
	h     http.Handler
	token string
	csrf  string
	actor auth.Actor
}

func (c *client) do(req *http.Request) *httptest.ResponseRecorder {
	if c.token != "" {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: c.token})
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	return rec
}

func (c *client) get(path string) *httptest.ResponseRecorder {
	return c.do(httptest.NewRequest(http.MethodGet, path, nil))
}

// post sends a form with the session's CSRF token.
func (c *client) post(path string, form url.Values) *httptest.ResponseRecorder {
	if form == nil {
		form = url.Values{}
	}
	if !form.Has(csrfField) {
		form.Set(csrfField, c.csrf)
	}
	return c.postRaw(path, form)
}

// postRaw sends a form as given (no CSRF token added).
func (c *client) postRaw(path string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// upload posts a multipart form with one file field "targets".
func (c *client) upload(path string, fields map[string]string, csv string) *httptest.ResponseRecorder {
	var body strings.Builder
	w := multipart.NewWriter(&body)
	w.WriteField(csrfField, c.csrf)
	for k, v := range fields {
		w.WriteField(k, v)
	}
	if csv != "" {
		fw, err := w.CreateFormFile("targets", "targets.csv")
		require.NoError(c.t, err)
		io.WriteString(fw, csv)
	}
	require.NoError(c.t, w.Close())
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body.String()))
	req.Header.Set("Content-Type", w.FormDataContentType())
	return c.do(req)
}

func parse(t *testing.T, rec *httptest.ResponseRecorder) *goquery.Document {
	t.Helper()
	d, err := goquery.NewDocumentFromReader(strings.NewReader(rec.Body.String()))
	require.NoError(t, err)
	return d
}

// tid selects elements by data-testid.
func tid(d *goquery.Document, id string) *goquery.Selection {
	return d.Find(`[data-testid="` + id + `"]`)
}

// csvOf builds a target list of n addresses with a first_name column.
func csvOf(n int) string {
	var b strings.Builder
	b.WriteString("email,first_name\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "user%04d@example.com,Name %d\n", i, i)
	}
	return b.String()
}

// campaignOpts shape a test campaign.
type campaignOpts struct {
	Targets   string // CSV; default csvOf(5)
	Payload   plan.Payload
	Approvals int
}

func (o *campaignOpts) defaults() {
	if o.Targets == "" {
		o.Targets = csvOf(5)
	}
	if o.Payload.From == "" {
		o.Payload = plan.Payload{From: "Billing <billing@example.com>", Subject: "Hello {{.first_name}}", Text: "Hi {{.first_name}}", HTML: "<p>Hi {{.first_name}}</p>"}
	}
	if o.Approvals == 0 {
		o.Approvals = 1
	}
}

// draft creates a campaign in draft, proposed by the proposer.
func (b *bundle) draft(opts campaignOpts) approval.Campaign {
	b.t.Helper()
	opts.defaults()
	res, err := b.svc.Create(context.Background(), b.as["proposer"].actor, approval.CreateParams{
		Name: "Invoice reminder", Provider: "outbox", RequiredApprovals: opts.Approvals, Payload: opts.Payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(opts.Targets)},
	})
	require.NoError(b.t, err)
	return res.Campaign
}

// pending creates a campaign submitted for approval.
func (b *bundle) pending(opts campaignOpts) approval.Campaign {
	b.t.Helper()
	c := b.draft(opts)
	res, err := b.svc.Submit(context.Background(), b.as["proposer"].actor, c.ID)
	require.NoError(b.t, err)
	return res.Campaign
}

// started creates a campaign, approves and starts it; returns its plan.
func (b *bundle) started(opts campaignOpts) (approval.Campaign, plan.Plan) {
	b.t.Helper()
	ctx := context.Background()
	c := b.pending(opts)
	res, err := b.svc.Approve(ctx, b.as["approver"].actor, c.ID, b.hash(c))
	require.NoError(b.t, err)
	res, err = b.svc.Start(ctx, b.as["operator"].actor, c.ID)
	require.NoError(b.t, err)
	p, err := plan.GetPlan(ctx, b.pool, res.Campaign.PlanID)
	require.NoError(b.t, err)
	return res.Campaign, p
}

func (b *bundle) hash(c approval.Campaign) string {
	b.t.Helper()
	d, err := approval.GetDraft(context.Background(), b.pool, c.ID, c.Version)
	require.NoError(b.t, err)
	return d.Hash(c)
}

// effect records an attempt at a plan target in the ledger, as a worker
// would: claim, raw response, settle.
func (b *bundle) effect(p plan.Plan, ordinal int, state ledger.State, raw string) ledger.Effect {
	b.t.Helper()
	ctx := context.Background()
	var key string
	require.NoError(b.t, b.pool.QueryRow(ctx, `SELECT key FROM target WHERE list_id = $1 AND ordinal = $2`, p.ListID, ordinal).Scan(&key))
	store := ledger.NewStore(b.pool)
	cl, err := store.Claim(ctx, ledger.ClaimParams{Key: ledger.Key(key), Owner: "test/1", PlanID: p.ID, Ordinal: ordinal})
	require.NoError(b.t, err)
	require.Equal(b.t, ledger.ClaimWon, cl.Outcome)
	if state == ledger.StatePending {
		return cl.Effect
	}
	_, err = store.RecordResponse(ctx, cl.Effect.ID, ledger.ResponseSend, []byte(raw))
	require.NoError(b.t, err)
	sp := ledger.SettleParams{EffectID: cl.Effect.ID, State: state, Reason: "test says " + string(state)}
	if state == ledger.StateDone {
		sp.Receipt, sp.Reason = "receipt-"+fmt.Sprint(ordinal), ""
	}
	e, err := store.Settle(ctx, sp)
	require.NoError(b.t, err)
	return e
}

// keyOf returns a plan target's key.
func (b *bundle) keyOf(p plan.Plan, ordinal int) string {
	var key string
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT key FROM target WHERE list_id = $1 AND ordinal = $2`, p.ListID, ordinal).Scan(&key))
	return key
}

// campaign re-reads a campaign.
func (b *bundle) campaign(id string) approval.Campaign {
	b.t.Helper()
	c, err := approval.GetCampaign(context.Background(), b.pool, id)
	require.NoError(b.t, err)
	return c
}

type goquerySelection = goquery.Selection

func httpPost(path string, form url.Values) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

func httptestDo(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func httpGet(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
