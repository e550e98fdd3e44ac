package api_test

// Fuzz tests of the API's request decoding: any bytes in a JSON body, a
// target list, a query string or a path segment get an answer the
// document describes, never a 500; a 4xx has the error shape
// {"error": {"code", "message"}} with both set, and changes nothing.
// `make fuzz` runs each for a while; plain `go test` replays the seeds
// below and those saved under testdata/fuzz/.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/onceplan/onceplan/web/api"
)

// fuzzWorld is one world per fuzz process: its campaigns in each state
// and a single effect, made once; the inputs' requests then act on them.
type fuzzWorld struct {
	*world
	draft, pending, running, unknown, tool campaign
}

func newFuzzWorld(f *testing.F) *fuzzWorld {
	w := newWorld(f)
	fw := &fuzzWorld{world: w}
	fw.draft = w.campaignIn(f, "draft")
	fw.pending = w.campaignIn(f, "pending")
	fw.running = w.campaignIn(f, "running")
	fw.unknown = w.campaignIn(f, "unknown")
	fw.tool = w.campaignIn(f, "tool")
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO suppression (address, reason, source, actor) VALUES ('gone@example.com', 'manual', 'actor', 'admin@example.com')`); err != nil {
		f.Fatal(err)
	}
	return fw
}

// fingerprint sums up the rows a request could add or change, cheaply
// enough to take around every input.
func (fw *fuzzWorld) fingerprint(t *testing.T) string {
	t.Helper()
	var s string
	err := fw.pool.QueryRow(context.Background(), `SELECT concat_ws(' ',
		(SELECT count(*) FROM campaign), (SELECT max(updated_at) FROM campaign), (SELECT count(*) FROM campaign_event),
		(SELECT count(*) FROM draft), (SELECT count(*) FROM target_list), (SELECT count(*) FROM effect),
		(SELECT count(*) FROM effect_bump), (SELECT count(*) FROM suppression), (SELECT count(*) FROM suppression_removal),
		(SELECT count(*) FROM tool_call), (SELECT count(*) FROM tool_attempt), (SELECT count(*) FROM river_job))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// send makes one request of the API in process and checks the answer:
// never a 5xx; a 4xx in the error shape, with a code and a message, that
// changed nothing; every answer one the OpenAPI document describes. query
// is sent as the raw query string, as a client could write it.
func (fw *fuzzWorld) send(t *testing.T, who, method, path, query, contentType string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://onceplan.test"+api.Prefix+path, bytes.NewReader(body))
	if err != nil {
		t.Skip("not a request a client can send:", err)
	}
	req.URL.RawQuery = requestTargetSafe(query)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+fw.token[who])
	before := fw.fingerprint(t)
	rec := httptest.NewRecorder()
	fw.handler.ServeHTTP(rec, req)
	what := method + " " + req.URL.RequestURI() + " " + strings.ToValidUTF8(string(body[:min(len(body), 300)]), "?")
	if rec.Code >= 500 {
		t.Fatalf("%s: answered %d: %s", what, rec.Code, rec.Body.String())
	}
	if rec.Code >= 400 {
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s: a %d as %q, not JSON: %s", what, rec.Code, ct, rec.Body.String())
		}
		var e struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s: a %d not in the error shape with a code and a message: %s", what, rec.Code, rec.Body.String())
		}
		if after := fw.fingerprint(t); after != before {
			t.Fatalf("%s: refused with %d, but changed something (%s, then %s)", what, rec.Code, before, after)
		}
	}
	v, err := document()
	if err != nil {
		t.Fatal(err)
	}
	// The answer is judged by the route and the status: without the
	// query, whose oddities the validator would take for another path.
	check := req.Clone(context.Background())
	check.Body = http.NoBody
	check.URL.RawQuery = ""
	documentMu.Lock()
	ok, errs := v.ValidateHttpResponse(check, rec.Result())
	documentMu.Unlock()
	// A path the document has no route for (an empty segment, as in
	// /effects//resolve) is judged by the error shape above alone.
	if !ok && !(rec.Code >= 400 && noSuchRoute(errs)) {
		t.Fatalf("%s: answered %d, which the OpenAPI document does not describe: %s\n%s", what, rec.Code, describe(errs), rec.Body.String())
	}
}

// requestTargetSafe percent-encodes the bytes of q that cannot stand in
// an HTTP request line (controls, space, '#', non-ASCII), leaving the
// rest — '%', '&', '=', '+', ';' included — as the fuzzer wrote them.
func requestTargetSafe(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pick is route % n, for a fuzzed choice among n routes.
func pick(route uint8, n int) int { return int(route) % n }

// FuzzAPICampaignBodies: the JSON bodies of the campaign and suppression
// routes.
func FuzzAPICampaignBodies(f *testing.F) {
	for route, body := range []string{
		`{"name":"News","provider":"outbox","from":"a@example.com","subject":"Hi {{.first_name}}","text":"Hello","targets":[{"address":"ann@example.com","vars":{"first_name":"Ann"}}]}`,
		`{"subject":"Hi again"}`,
		`{"reason":"not this week"}`,
		`{"plan_hash":"0000"}`,
		`{"reason":"a break"}`,
		`{}`,
		`{"to":["proposer@example.com"],"ordinal":1}`,
		`{"address":"x@example.com","reason":"manual","note":"asked by phone"}`,
		`{"reason":"back"}`,
		``,
		`{"name":"a\u0000b"}`,
		`{"reason":"` + strings.Repeat("é", 3000) + `"}`,
		`[]`,
		`{"targets":{"x":1}}`,
		`{"scheduled_at":"2026-13-45T99:00:00Z"}`,
		`{"required_approvals":1e40}`,
	} {
		f.Add(uint8(route), []byte(body))
	}
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		routes := []struct{ who, method, path string }{
			{"proposer", http.MethodPost, "/campaigns"},
			{"proposer", http.MethodPatch, "/campaigns/" + fw.draft.id},
			{"approver", http.MethodPost, "/campaigns/" + fw.pending.id + "/reject"},
			{"approver", http.MethodPost, "/campaigns/" + fw.pending.id + "/approve"},
			{"operator", http.MethodPost, "/campaigns/" + fw.running.id + "/pause"},
			{"operator", http.MethodPost, "/campaigns/" + fw.running.id + "/cancel"},
			{"proposer", http.MethodPost, "/campaigns/" + fw.draft.id + "/test"},
			{"operator", http.MethodPost, "/suppressions"},
			{"admin", http.MethodPost, "/suppressions/gone@example.com/remove"},
			{"proposer", http.MethodPost, "/campaigns/" + fw.draft.id + "/submit"},
			{"operator", http.MethodPost, "/campaigns/" + fw.running.id + "/resume"},
			{"operator", http.MethodPost, "/campaigns/" + fw.running.id + "/start"},
		}
		r := routes[pick(route, len(routes))]
		fw.send(t, r.who, r.method, r.path, "", "application/json", body)
	})
}

// FuzzAPIEffectBodies: the JSON bodies of the effect routes, a campaign
// target's and a single effect's.
func FuzzAPIEffectBodies(f *testing.F) {
	for route, body := range []string{
		`{"event":"order-1","tool":"payment.send","target":{"kind":"subject","value":"cust-1"},"amount_minor":100,"args":{"n":1}}`,
		`{"lease":"x","outcome":"done","receipt":"r-1","raw":"ok"}`,
		`{"lease":"x","lease_seconds":30}`,
		`{"outcome":"delivered","reason":"seen at the provider"}`,
		`{"reason":"withdrawn"}`,
		`{"target":"new@example.com","reason":"moved"}`,
		`{"outcome":"not_delivered","reason":"never arrived"}`,
		`{"event":"e","tool":"t","target":{"kind":"subject","value":"v"},"args":{"a":"\u0000"}}`,
		`{"event":"e","tool":"t","target":{"kind":"email","value":"not an address"},"args":null}`,
		`{"lease_seconds":-1}`,
		`{"amount_minor":9223372036854775808}`,
		`{"outcome":"delivered","reason":"\ud800"}`,
	} {
		f.Add(uint8(route), []byte(body))
	}
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		routes := []struct{ who, method, path string }{
			{"agent", http.MethodPost, "/effects"},
			{"agent", http.MethodPost, "/effects/" + url.PathEscape(fw.tool.key) + "/settle"},
			{"agent", http.MethodPost, "/effects/" + url.PathEscape(fw.tool.key) + "/heartbeat"},
			{"operator", http.MethodPost, "/effects/" + url.PathEscape(fw.unknown.key) + "/resolve"},
			{"operator", http.MethodPost, "/effects/" + url.PathEscape(fw.unknown.key) + "/revoke"},
			{"approver", http.MethodPost, "/effects/" + url.PathEscape(fw.unknown.key) + "/supersede"},
			{"operator", http.MethodPost, "/effects/" + url.PathEscape(fw.tool.key) + "/resolve"},
			{"operator", http.MethodPost, "/effects/" + url.PathEscape(fw.tool.key) + "/revoke"},
		}
		r := routes[pick(route, len(routes))]
		fw.send(t, r.who, r.method, r.path, "", "application/json", body)
	})
}

// FuzzAPITargetImport: a draft's target list, as CSV or JSON, with the
// import's query parameters.
func FuzzAPITargetImport(f *testing.F) {
	f.Add(true, "", []byte("email,first_name\nann@example.com,Ann\n"))
	f.Add(true, "append=true&address_column=mail", []byte("mail\nbob@example.com\n"))
	f.Add(true, "append=maybe", []byte("email\n"))
	f.Add(true, "", []byte("email,x\n\"ann@example.com,\x00\n"))
	f.Add(false, "", []byte(`[{"address":"ann@example.com","vars":{"n":"1"}}]`))
	f.Add(false, "append=1", []byte(`[{"address":"a\u0000@example.com"}]`))
	f.Add(false, "", []byte(`{"address":"ann@example.com"}`))
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, csv bool, query string, body []byte) {
		ct := "application/json"
		if csv {
			ct = "text/csv"
		}
		fw.send(t, "proposer", http.MethodPost, "/campaigns/"+fw.draft.id+"/targets", query, ct, body)
	})
}

// FuzzAPIQueryParameters: the query strings of the listing routes.
func FuzzAPIQueryParameters(f *testing.F) {
	for route, q := range []string{
		"limit=10&after=", "q=ann&state=unknown&limit=5", "against=approved&rows=added&limit=2", "address=ann%40example.com&limit=1",
		"wait=0s", "after=%00", "limit=-1", "limit=99999999999999999999", "after=not-a-cursor", "q=%ff%fe", "state=%00",
		"against=v0&rows=%E2%80%AE", "wait=1h", "after=MTIz",
	} {
		f.Add(uint8(route), q)
	}
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, route uint8, query string) {
		paths := []string{
			"/campaigns", "/campaigns/" + fw.running.id + "/targets", "/campaigns/" + fw.running.id + "/diff",
			"/suppressions", "/campaigns/" + fw.running.id + "/decision",
		}
		fw.send(t, "viewer", http.MethodGet, paths[pick(route, len(paths))], query, "", nil)
	})
}

// FuzzAPIPathParameters: any text as a campaign id, an effect key or a
// suppressed address in the path.
func FuzzAPIPathParameters(f *testing.F) {
	for route, seg := range []string{
		"8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000", "not-a-uuid", "\x00", "a/b", "%00", "..", "gone@example.com",
		"v1:" + strings.Repeat("a", 64), "é\u202e", strings.Repeat("x", 5000),
	} {
		f.Add(uint8(route), seg)
	}
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, route uint8, seg string) {
		p := url.PathEscape(seg)
		routes := []struct{ who, method, path, body string }{
			{"viewer", http.MethodGet, "/campaigns/" + p, ""},
			{"viewer", http.MethodGet, "/campaigns/" + p + "/audit", ""},
			{"viewer", http.MethodGet, "/campaigns/" + p + "/targets", ""},
			{"viewer", http.MethodGet, "/effects/" + p, ""},
			{"operator", http.MethodPost, "/effects/" + p + "/resolve", `{"outcome":"delivered","reason":"seen"}`},
			{"operator", http.MethodPost, "/campaigns/" + p + "/pause", `{"reason":"a break"}`},
			{"admin", http.MethodPost, "/suppressions/" + p + "/remove", `{"reason":"back"}`},
		}
		r := routes[pick(route, len(routes))]
		ct := ""
		if r.body != "" {
			ct = "application/json"
		}
		fw.send(t, r.who, r.method, r.path, "", ct, []byte(r.body))
	})
}
