package api_test

// Every request the API tests make, and every answer, is checked against
// openapi.yaml by a maintained OpenAPI 3.1 validator (pb33f's
// libopenapi-validator; kin-openapi's openapi3filter handles 3.0, and 3.1
// only in part): the document says what the server does, not what someone
// once meant it to.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/onceplan/onceplan/web/api"
)

// document is the validator of api.OpenAPI(), built once; mu serialises
// its use (the tests run in parallel, and it keeps caches).
var (
	document = sync.OnceValues(func() (validator.Validator, error) {
		doc, err := libopenapi.NewDocument(api.OpenAPI())
		if err != nil {
			return nil, err
		}
		v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
		if len(errs) > 0 {
			return nil, fmt.Errorf("building the validator: %v", errs)
		}
		return v, nil
	})
	documentMu sync.Mutex
)

// TestOpenAPIDocumentIsValid: the document itself is a valid OpenAPI 3.1
// document.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	v, err := document()
	require.NoError(t, err)
	documentMu.Lock()
	ok, errs := v.ValidateDocument()
	documentMu.Unlock()
	require.True(t, ok, "%s", describe(errs))
}

// conforming serves h and fails t when an exchange under the API's prefix
// disagrees with the document (see disagreements).
func conforming(t *testing.T, h http.Handler) http.Handler {
	v, err := document()
	require.NoError(t, err)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		if !strings.HasPrefix(r.URL.Path, api.Prefix+"/") {
			return
		}
		for _, d := range disagreements(v, r, body, rec) {
			t.Errorf("%s %s (answered %d): the OpenAPI document disagrees with the server: %s", r.Method, r.URL.RequestURI(), rec.Code, d)
		}
	})
}

// disagreements compares one exchange with the document:
//   - every answer is one the document describes, status and body;
//   - a 4XX answer's status is one its operation lists by number, not
//     only under default: a generated client has a type for each;
//   - a request the server carried out (2xx) is one the document allows;
//   - a field the server refused as missing (400, error.field not in the
//     request) is one the document requires: a request without it must
//     not be valid by the document.
func disagreements(v validator.Validator, r *http.Request, body []byte, rec *httptest.ResponseRecorder) []string {
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	res := rec.Result()
	documentMu.Lock()
	reqOK, reqErrs := v.ValidateHttpRequestSync(req)
	req.Body = io.NopCloser(bytes.NewReader(body))
	resOK, resErrs := v.ValidateHttpResponse(req, res)
	documentMu.Unlock()

	var out []string
	if !resOK && !(rec.Code == http.StatusNotFound && noSuchRoute(resErrs)) {
		out = append(out, "the answer: "+describe(resErrs))
	}
	if op, ok := operationOf(r); ok && rec.Code/100 == 4 && rec.Code != statusClientGone && !op.lists(rec.Code) {
		out = append(out, fmt.Sprintf("%s answered %d, which its responses in the document do not list (only default covers it)", op.ID, rec.Code))
	}
	if rec.Code/100 == 2 && !reqOK {
		out = append(out, "the request was carried out, but the document does not allow it: "+describe(reqErrs))
	}
	if field := refusedField(rec); rec.Code == http.StatusBadRequest && field != "" && reqOK && !mentions(r, body, field) {
		out = append(out, fmt.Sprintf("the server refused the request for want of %q, which the document does not require", field))
	}
	return out
}

// noSuchRoute: the document has no such path or method, as the server's
// 404 says (TestOpenAPIDocumentsEveryRoute checks the routes themselves).
func noSuchRoute(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if !e.IsPathMissingError() && !e.IsOperationMissingError() {
			return false
		}
	}
	return true
}

// refusedField is the field an error answer names.
func refusedField(rec *httptest.ResponseRecorder) string {
	var e struct {
		Error struct {
			Field string `json:"field"`
		} `json:"error"`
	}
	json.Unmarshal(rec.Body.Bytes(), &e)
	return e.Error.Field
}

// mentions reports whether the request gives field: as a query parameter,
// as a key of its JSON object body (a nested field, "target.value" or
// "to[1]", by its first key), or in its path, when the path holds the
// NUL or the bytes that are not UTF-8 the field was refused for.
func mentions(r *http.Request, body []byte, field string) bool {
	if r.URL.Query().Has(field) || strings.ContainsRune(r.URL.Path, 0) || !utf8.ValidString(r.URL.Path) {
		return true
	}
	if i := strings.IndexAny(field, ".["); i > 0 {
		field = field[:i]
	}
	if media, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); media != "application/json" {
		return true // not a JSON object: the field is not the body's to give
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return true
	}
	_, ok := obj[field]
	return ok
}

func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		for _, f := range e.SchemaValidationErrors {
			s += "; " + f.Error()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// TestConformanceCheckFindsDisagreements: the check is not one that passes
// whatever the server does.
func TestConformanceCheckFindsDisagreements(t *testing.T) {
	t.Parallel()
	v, err := document()
	require.NoError(t, err)
	exchange := func(method, path, body string, status int, answer string) []string {
		r := httptest.NewRequest(method, api.Prefix+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer opp_x")
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(status)
		rec.WriteString(answer)
		return disagreements(v, r, []byte(body), rec)
	}
	const create = `{"name":"x","provider":"outbox","from":"a@example.com","subject":"Hi","text":"Hello"}`
	require.Empty(t, exchange("POST", "/campaigns", create, 201, `{"id":"8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000","state":"draft","warnings":[]}`))

	// An answer the document does not describe.
	require.NotEmpty(t, exchange("POST", "/campaigns", create, 201, `{"id": 7}`), "an id that is not a string")
	require.NotEmpty(t, exchange("GET", "/campaigns/8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000", "", 200, `{"warnings":[{"code":"x"}]}`), "a warning without its message")
	require.NotEmpty(t, exchange("GET", "/campaigns", "", 500, `{"oops": true}`), "an error not in the error shape")
	// A 4XX answer its operation lists only under default.
	require.Equal(t, []string{"listCampaigns answered 409, which its responses in the document do not list (only default covers it)"},
		exchange("GET", "/campaigns", "", 409, `{"error":{"code":"conflict","message":"no"}}`))
	require.Empty(t, exchange("GET", "/campaigns", "", 401, `{"error":{"code":"unauthenticated","message":"no"}}`))
	// A request carried out that the document does not allow.
	require.NotEmpty(t, exchange("POST", "/campaigns", `{"name":"x","provider":"outbox"}`, 201, `{"id":"8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000"}`))
	// A field the server requires that the document does not.
	require.Equal(t, []string{`the server refused the request for want of "html", which the document does not require`},
		exchange("POST", "/campaigns", create, 400, `{"error":{"code":"invalid","message":"html: is required","field":"html"}}`))
	// A route that does not exist is the route table's business.
	require.Empty(t, exchange("GET", "/nope", "", 404, `{"error":{"code":"not_found","message":"no such API route"}}`))
}

// statusClientGone is httperr's answer to a request whose client went
// away first (499): nobody reads it, so no operation lists it.
const statusClientGone = 499

// operation is one operation of the document.
type operation struct {
	Method, Path string // as the document writes them: "post", "/campaigns/{id}/submit"
	ID           string
	Statuses     []string // its responses' keys: "200", "409", "default"
	Body         bool     // it takes a request body
	Public       bool     // security: [], no token needed
	match        *regexp.Regexp
}

// lists reports whether the operation's responses name status itself.
func (o operation) lists(status int) bool {
	return slices.Contains(o.Statuses, strconv.Itoa(status))
}

// operations are the document's operations, in path and method order.
var operations = sync.OnceValues(func() ([]operation, error) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		return nil, err
	}
	var out []operation
	for path, item := range doc.Paths {
		pattern := regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), `[^/]+`)
		for method, node := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				ID          string         `yaml:"operationId"`
				Responses   map[string]any `yaml:"responses"`
				RequestBody any            `yaml:"requestBody"`
				Security    *[]any         `yaml:"security"`
			}
			if err := node.Decode(&op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			o := operation{Method: method, Path: path, ID: op.ID, Body: op.RequestBody != nil,
				Public: op.Security != nil && len(*op.Security) == 0, match: regexp.MustCompile("^" + pattern + "$")}
			for status := range op.Responses {
				o.Statuses = append(o.Statuses, status)
			}
			slices.Sort(o.Statuses)
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b operation) int { return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method) })
	return out, nil
})

// operationOf is the document's operation for r, if it has one.
func operationOf(r *http.Request) (operation, bool) {
	ops, err := operations()
	if err != nil {
		return operation{}, false // TestOpenAPIOperations reports it
	}
	path, ok := strings.CutPrefix(r.URL.EscapedPath(), api.Prefix)
	if !ok {
		return operation{}, false
	}
	for _, o := range ops {
		if strings.EqualFold(o.Method, r.Method) && o.match.MatchString(path) {
			return o, true
		}
	}
	return operation{}, false
}

// TestOpenAPIOperations: every operation has an operationId, the name a
// client generator (oapi-codegen, openapi-generator) gives its method —
// unique, lowerCamelCase — and lists the 4XX answers every route of its
// kind gives, each by number (an answer a test sees is checked by
// disagreements, whatever its route): the token check of every route but
// the document's own (api.authenticated: 400 for a NUL or bytes that are
// not UTF-8 in the path or query, 401, 429), the JSON decoder of every
// body (400, 413, 415), and the campaign of every /campaigns/{id} route
// (404).
func TestOpenAPIOperations(t *testing.T) {
	t.Parallel()
	ops, err := operations()
	require.NoError(t, err)
	require.Len(t, ops, len(api.Routes()), "one operation per route (TestOpenAPIDocumentsEveryRoute)")
	camel := regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	seen := map[string]string{}
	for _, o := range ops {
		name := strings.ToUpper(o.Method) + " " + o.Path
		switch other, taken := seen[o.ID]; {
		case o.ID == "":
			t.Errorf("%s: no operationId (a client generator names its method by it)", name)
		case !camel.MatchString(o.ID):
			t.Errorf("%s: operationId %q is not lowerCamelCase", name, o.ID)
		case taken:
			t.Errorf("%s: operationId %q is %s's too", name, o.ID, other)
		}
		seen[o.ID] = name
		var want []int
		if !o.Public {
			want = append(want, http.StatusBadRequest, http.StatusUnauthorized, http.StatusTooManyRequests)
		}
		if o.Body {
			want = append(want, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType)
		}
		if strings.HasPrefix(o.Path, "/campaigns/{id}") {
			want = append(want, http.StatusNotFound)
		}
		for _, status := range want {
			if !o.lists(status) {
				t.Errorf("%s (%s): its responses do not list %d", name, o.ID, status)
			}
		}
		if !slices.ContainsFunc(o.Statuses, func(s string) bool { return strings.HasPrefix(s, "4") }) {
			t.Errorf("%s (%s): its responses list no 4XX answer", name, o.ID)
		}
	}
}
