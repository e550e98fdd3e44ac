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
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/stretchr/testify/require"

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
	// A request carried out that the document does not allow.
	require.NotEmpty(t, exchange("POST", "/campaigns", `{"name":"x","provider":"outbox"}`, 201, `{"id":"8a9c2f38-0d6c-4f43-9a43-5b2f6b1f0000"}`))
	// A field the server requires that the document does not.
	require.Equal(t, []string{`the server refused the request for want of "html", which the document does not require`},
		exchange("POST", "/campaigns", create, 400, `{"error":{"code":"invalid","message":"html: is required","field":"html"}}`))
	// A route that does not exist is the route table's business.
	require.Empty(t, exchange("GET", "/nope", "", 404, `{"error":{"code":"not_found","message":"no such API route"}}`))
}
