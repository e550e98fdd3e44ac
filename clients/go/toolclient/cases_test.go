package toolclient_test

// The shared table of scripted server answers and the client outcome each
// must give (clients/testdata/README.md describes it; the Python and
// TypeScript clients' suites read the same file).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/clients/go/toolclient"
)

// tableCase is one case of clients/testdata/cases.json.
type tableCase struct {
	Name   string `json:"name"`
	About  string `json:"about"`
	Intent struct {
		Event        string            `json:"event"`
		Tool         string            `json:"tool"`
		Target       toolclient.Target `json:"target"`
		Args         json.RawMessage   `json:"args"`
		LeaseSeconds int               `json:"lease_seconds"`
	} `json:"intent"`
	Body struct {
		Raw            *string `json:"raw"`
		Receipt        string  `json:"receipt"`
		WaitHeartbeats int     `json:"wait_heartbeats"`
		WaitLeaseLost  bool    `json:"wait_lease_lost"`
		Error          *struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"body"`
	Server map[string][]scripted `json:"server"`
	Expect struct {
		Outcome          string          `json:"outcome"`
		Status           int             `json:"status"`
		BodyRuns         int             `json:"body_runs"`
		Requests         []string        `json:"requests"`
		MinHeartbeats    int             `json:"min_heartbeats"`
		Receipt          *string         `json:"receipt"`
		Raw              json.RawMessage `json:"raw"`
		Effect           map[string]any  `json:"effect"`
		ErrorContains    string          `json:"error_contains"`
		StoredArgsDigest string          `json:"stored_args_digest"`
		Sent             map[string]any  `json:"sent"`
	} `json:"expect"`
}

// scripted is one answer of the scripted server.
type scripted struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    any               `json:"body"`
	Text    *string           `json:"text"`
	Drop    bool              `json:"drop"`
}

func loadCases(t *testing.T) (string, []tableCase) {
	t.Helper()
	b, err := os.ReadFile("../../testdata/cases.json")
	require.NoError(t, err)
	var doc struct {
		Version int         `json:"version"`
		Token   string      `json:"token"`
		Cases   []tableCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, 1, doc.Version, "clients/testdata/cases.json: this test reads version 1 of the table")
	require.NotEmpty(t, doc.Cases)
	return doc.Token, doc.Cases
}

var nowTemplate = regexp.MustCompile(`^\{\{now([+-]\d+)s\}\}$`)

// fill replaces each "{{now±Ns}}" string of v with that time, RFC 3339.
func fill(v any) any {
	switch x := v.(type) {
	case string:
		if m := nowTemplate.FindStringSubmatch(x); m != nil {
			n, _ := strconv.Atoi(m[1])
			return time.Now().UTC().Add(time.Duration(n) * time.Second).Format(time.RFC3339Nano)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = fill(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fill(e)
		}
		return out
	}
	return v
}

// scriptedServer answers each route with the case's answers in order (the
// last one again once they run out) and records what the client sent.
type scriptedServer struct {
	token   string
	answers map[string][]scripted
	mu      sync.Mutex
	served  map[string]int
	routes  []string // every request's route but heartbeats, in order
	sent    map[string][]any
	beats   int
	beat    chan struct{} // a value per heartbeat answered
	errs    []string
}

var keyedRoute = regexp.MustCompile(`^/api/v1/effects/([^/]+)(/settle|/heartbeat)?$`)

func (s *scriptedServer) fail(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *scriptedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if got := r.Header.Get("Authorization"); got != "Bearer "+s.token {
		s.fail("%s %s: Authorization %q, want the bearer token", r.Method, r.URL.Path, got)
	}
	route, key := "", ""
	switch m := keyedRoute.FindStringSubmatch(r.URL.Path); {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/effects":
		route = "begin"
	case m != nil && r.Method == http.MethodPost && m[2] != "":
		route, key = strings.TrimPrefix(m[2], "/"), m[1]
	case m != nil && r.Method == http.MethodGet && m[2] == "":
		route, key = "get", m[1]
	default:
		s.fail("unexpected request %s %s", r.Method, r.URL.Path)
		http.Error(w, "no such route", http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	if key != "" {
		if want := s.beginKey(); key != want {
			s.errs = append(s.errs, fmt.Sprintf("%s of key %q, want the begin's key %q", route, key, want))
		}
	}
	if len(raw) > 0 {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			s.errs = append(s.errs, fmt.Sprintf("%s: the body is not JSON: %q", route, raw))
		}
		s.sent[route] = append(s.sent[route], v)
	}
	if route != "heartbeat" {
		s.routes = append(s.routes, route)
	}
	list := s.answers[route]
	n := s.served[route]
	s.served[route]++
	s.mu.Unlock()
	if len(list) == 0 {
		s.fail("the case scripts no answer to %s", route)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"code":"unscripted","message":"the case scripts no answer to %s"}}`, route)
		return
	}
	a := list[min(n, len(list)-1)]
	if a.Drop {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	if a.Text != nil {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(a.Status)
		io.WriteString(w, *a.Text)
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.Status)
		json.NewEncoder(w).Encode(fill(a.Body))
	}
	if route == "heartbeat" {
		s.mu.Lock()
		s.beats++
		s.mu.Unlock()
		s.beat <- struct{}{}
	}
}

// beginKey is the key the scripted begin answers name (s.mu held).
func (s *scriptedServer) beginKey() string {
	for _, a := range s.answers["begin"] {
		if m, ok := a.Body.(map[string]any); ok {
			if k, ok := m["key"].(string); ok {
				return k
			}
		}
	}
	return ""
}

// subset reports how got differs from want: each of want's keys must be
// got's (null: absent), a string "~x" is contained in got's string.
func subset(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %v, want an object", path, got)}
		}
		var diffs []string
		for k, wv := range w {
			gv, present := g[k]
			if wv == nil {
				if present && gv != nil {
					diffs = append(diffs, fmt.Sprintf("%s.%s: got %v, want it absent", path, k, gv))
				}
				continue
			}
			if !present {
				diffs = append(diffs, fmt.Sprintf("%s.%s: absent, want %v", path, k, wv))
				continue
			}
			diffs = append(diffs, subset(path+"."+k, wv, gv)...)
		}
		return diffs
	case string:
		if rest, ok := strings.CutPrefix(w, "~"); ok {
			if g, _ := got.(string); !strings.Contains(g, rest) {
				return []string{fmt.Sprintf("%s: %q does not contain %q", path, got, rest)}
			}
			return nil
		}
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if string(wb) != string(gb) {
		return []string{fmt.Sprintf("%s: got %s, want %s", path, gb, wb)}
	}
	return nil
}

// outcomeOf names what Do did in the table's words.
func outcomeOf(res toolclient.Result, err, bodyErr error, rejected bool) string {
	var np *toolclient.NotPerformedError
	var apiErr *toolclient.Error
	switch {
	case errors.As(err, &np):
		return map[error]string{toolclient.ErrInDoubt: "in_doubt", toolclient.ErrAwaitingApproval: "awaiting_approval",
			toolclient.ErrArgsMismatch: "args_mismatch"}[np.Kind]
	case errors.Is(err, toolclient.ErrInDoubt):
		return "in_doubt"
	case errors.As(err, &apiErr):
		return "api_error"
	case err != nil && bodyErr != nil && errors.Is(err, bodyErr) && rejected:
		return "rejected"
	case err != nil && bodyErr != nil && errors.Is(err, bodyErr):
		return "body_error"
	case err != nil:
		return "error: " + err.Error()
	case res.Replayed:
		return "replayed"
	}
	return "performed"
}

// TestSharedCases runs clients/testdata/cases.json against Do.
func TestSharedCases(t *testing.T) {
	t.Parallel()
	token, cases := loadCases(t)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			srv := &scriptedServer{token: token, answers: tc.Server, served: map[string]int{}, sent: map[string][]any{},
				beat: make(chan struct{}, 1024)}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			c, err := toolclient.New(ts.URL, token)
			require.NoError(t, err)

			in := toolclient.Intent{Event: tc.Intent.Event, Tool: tc.Intent.Tool, Target: tc.Intent.Target, Args: tc.Intent.Args,
				Lease: time.Duration(tc.Intent.LeaseSeconds) * time.Second}
			var bodyErr error
			if e := tc.Body.Error; e != nil {
				bodyErr = errors.New(e.Message)
			}
			runs := 0
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := c.Do(ctx, in, func(ctx context.Context, key string) ([]byte, string, error) {
				runs++
				if tc.Body.WaitLeaseLost {
					<-ctx.Done()
					bodyErr = context.Cause(ctx)
					return nil, "", bodyErr
				}
				for seen := 0; seen < tc.Body.WaitHeartbeats; seen++ {
					select {
					case <-srv.beat:
					case <-ctx.Done():
						return nil, "", context.Cause(ctx)
					}
				}
				var raw []byte
				if tc.Body.Raw != nil {
					raw = []byte(*tc.Body.Raw)
				}
				switch {
				case tc.Body.Error == nil:
					return raw, tc.Body.Receipt, nil
				case tc.Body.Error.Kind == "rejected":
					return raw, tc.Body.Receipt, toolclient.Rejected(bodyErr)
				}
				return raw, tc.Body.Receipt, bodyErr
			})
			ts.Close()

			want := tc.Expect
			rejected := tc.Body.Error != nil && tc.Body.Error.Kind == "rejected"
			require.Equal(t, want.Outcome, outcomeOf(res, err, bodyErr, rejected), "%s\nerr: %v", tc.About, err)
			require.Equal(t, want.BodyRuns, runs, "the body's runs")
			srv.mu.Lock()
			defer srv.mu.Unlock()
			require.Empty(t, srv.errs, "the requests")
			require.Equal(t, want.Requests, srv.routes, "the requests but heartbeats, in order")
			require.GreaterOrEqual(t, srv.beats, want.MinHeartbeats, "heartbeats")
			if want.Status != 0 {
				var apiErr *toolclient.Error
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, want.Status, apiErr.Status)
			}
			if want.ErrorContains != "" {
				require.ErrorContains(t, err, want.ErrorContains)
			}
			if want.StoredArgsDigest != "" {
				var np *toolclient.NotPerformedError
				require.ErrorAs(t, err, &np)
				require.Equal(t, want.StoredArgsDigest, np.API.StoredArgsDigest)
			}
			if want.Receipt != nil {
				require.Equal(t, *want.Receipt, res.Receipt, "the receipt")
			}
			if len(want.Raw) > 0 {
				if string(want.Raw) == "null" {
					require.Nil(t, res.Raw, "the raw answer")
				} else {
					var raw string
					require.NoError(t, json.Unmarshal(want.Raw, &raw))
					require.NotNil(t, res.Raw, "the raw answer")
					require.Equal(t, raw, string(res.Raw), "the raw answer")
				}
			}
			if want.Effect != nil {
				eff := res.Effect
				var np *toolclient.NotPerformedError
				if errors.As(err, &np) {
					eff = np.Effect
				}
				b, _ := json.Marshal(eff)
				var got any
				require.NoError(t, json.Unmarshal(b, &got))
				require.Empty(t, subset("effect", want.Effect, got))
			}
			for route, w := range want.Sent {
				require.NotEmpty(t, srv.sent[route], "no %s was sent", route)
				for _, got := range srv.sent[route] {
					require.Empty(t, subset(route, w, got))
				}
			}
		})
	}
}
