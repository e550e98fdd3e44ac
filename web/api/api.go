// Package api is Onceplan's JSON API under /api/v1: bearer
// tokens, JSON errors {"error": {"code", "message"}}, keyset pagination.
// Agent tokens may create, edit, import, submit and read — never decide:
// the approval package refuses them, and the route table says so too.
//
// The routes are described by openapi.yaml (served at
// /api/v1/openapi.yaml); a test fails when the two disagree.
package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/keyedrate"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/web/httperr"
)

// Prefix is where the API is mounted.
const Prefix = "/api/v1"

//go:embed openapi.yaml
var openAPI []byte

// Config is what the API needs.
type Config struct {
	Pool     *pgxpool.Pool
	Approval *approval.Service
	Logger   *slog.Logger
	// BaseURL is the server's public URL (serve's --public-url), the base
	// of every link to the UI an answer carries (the approval page an
	// agent hands to its human). Never taken from a request. Empty:
	// relative links.
	BaseURL string
	// MaxJSONBytes bounds a JSON request body (default 32 MiB; a target
	// list as JSON is bounded by the importer's own limit instead).
	MaxJSONBytes int64
	// Counts caches counts per list (share the UI's); nil: its own.
	Counts *approval.CountsCache
	// RatePerToken is the sustained requests per second one token may make
	// (default 50, burst 100); beyond it the API answers 429.
	RatePerToken rate.Limit
	// TestSend sends test messages (POST /campaigns/{id}/test); share
	// the UI's, so that one user's rate limit covers both. Nil: the route
	// answers 503.
	TestSend *approval.TestSender
	// Stopping is closed when the server begins to shut down: the
	// decision long polls answer at once with what they know, so that
	// shutdown does not wait out their waits. Nil: never.
	Stopping <-chan struct{}
	// ToolCalls serves the single effects (/effects); nil: one on Pool.
	ToolCalls *toolcall.Service
}

// API serves the routes.
type API struct {
	cfg    Config
	tokens *keyedrate.Limiter[int64] // per API token
	tools  *toolcall.Service
}

// route is one endpoint; the table is what the OpenAPI test walks.
type route struct {
	Method, Path string
	handler      func(*API, echo.Context, auth.Actor) error
}

func routes() []route {
	return []route{
		{http.MethodGet, "/campaigns", (*API).listCampaigns},
		{http.MethodPost, "/campaigns", (*API).createCampaign},
		{http.MethodGet, "/campaigns/{id}", (*API).getCampaign},
		{http.MethodPatch, "/campaigns/{id}", (*API).editCampaign},
		{http.MethodPost, "/campaigns/{id}/targets", (*API).importTargets},
		{http.MethodGet, "/campaigns/{id}/targets", (*API).listTargets},
		{http.MethodPost, "/campaigns/{id}/submit", (*API).submit},
		{http.MethodPost, "/campaigns/{id}/approve", (*API).approve},
		{http.MethodPost, "/campaigns/{id}/reject", (*API).reject},
		{http.MethodPost, "/campaigns/{id}/start", (*API).start},
		{http.MethodPost, "/campaigns/{id}/pause", (*API).pause},
		{http.MethodPost, "/campaigns/{id}/resume", (*API).resume},
		{http.MethodPost, "/campaigns/{id}/cancel", (*API).cancel},
		{http.MethodPost, "/campaigns/{id}/discard", (*API).discard},
		{http.MethodGet, "/campaigns/{id}/audit", (*API).audit},
		{http.MethodGet, "/campaigns/{id}/diff", (*API).diff},
		{http.MethodGet, "/campaigns/{id}/decision", (*API).decision},
		{http.MethodPost, "/effects", (*API).beginEffect},
		{http.MethodGet, "/effects/{key}", (*API).getEffect},
		{http.MethodPost, "/effects/{key}/settle", (*API).settleEffect},
		{http.MethodPost, "/effects/{key}/heartbeat", (*API).heartbeatEffect},
		{http.MethodPost, "/effects/{key}/resolve", (*API).resolve},
		{http.MethodPost, "/effects/{key}/supersede", (*API).supersede},
		{http.MethodPost, "/effects/{key}/revoke", (*API).revoke},
		{http.MethodPost, "/campaigns/{id}/test", (*API).testSend},
		{http.MethodGet, "/suppressions", (*API).listSuppressions},
		{http.MethodPost, "/suppressions", (*API).addSuppression},
		{http.MethodPost, "/suppressions/{address}/remove", (*API).removeSuppression},
	}
}

// Register mounts the API on e.
func Register(e *echo.Echo, cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxJSONBytes == 0 {
		cfg.MaxJSONBytes = 32 << 20
	}
	if cfg.RatePerToken == 0 {
		cfg.RatePerToken = 50
	}
	if cfg.Counts == nil {
		cfg.Counts = approval.NewCountsCache()
	}
	if cfg.ToolCalls == nil {
		cfg.ToolCalls = toolcall.NewService(cfg.Pool, toolcall.Options{Logger: cfg.Logger})
	}
	a := &API{cfg: cfg, tokens: keyedrate.New[int64](cfg.RatePerToken, int(2*cfg.RatePerToken), 0), tools: cfg.ToolCalls}
	g := e.Group(Prefix)
	g.GET("/openapi.yaml", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/yaml", openAPI)
	})
	for _, r := range routes() {
		path := strings.NewReplacer("{id}", ":id", "{key}", ":key", "{address}", ":address").Replace(r.Path)
		g.Add(r.Method, path, a.authenticated(r.handler))
	}
	// Anything else under the prefix is a JSON 404 or 405, not HTML.
	g.Any("/*", func(c echo.Context) error {
		return writeError(c, http.StatusNotFound, "not_found", "no such API route: "+c.Request().Method+" "+c.Request().URL.Path)
	})
	return a
}

// authenticated resolves the bearer token, rate-limits per token, and
// calls h with the actor.
func (a *API) authenticated(h func(*API, echo.Context, auth.Actor) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-store")
		// A NUL or bytes that are not UTF-8 in the path or query are
		// refused before anything reads them, the token's lookup included
		// (httperr.BadTextInRequest).
		if err := httperr.BadTextInRequest(c); err != nil {
			return a.fail(c, err)
		}
		header := c.Request().Header.Get("Authorization")
		scheme, secret, ok := strings.Cut(header, " ")
		ok = ok && strings.EqualFold(scheme, "Bearer") // the scheme is case-insensitive (RFC 7235)
		if !ok || strings.TrimSpace(secret) == "" {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="onceplan"`)
			return writeError(c, http.StatusUnauthorized, "unauthenticated", "send an API token as \"Authorization: Bearer <token>\" (create one with `onceplan token create`)")
		}
		actor, tok, err := auth.TokenActor(c.Request().Context(), a.cfg.Pool, strings.TrimSpace(secret))
		if err != nil {
			if errors.Is(err, onceplan.ErrUnauthenticated) {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="onceplan", error="invalid_token"`)
				return writeError(c, http.StatusUnauthorized, "unauthenticated", err.Error())
			}
			return a.fail(c, err)
		}
		if !a.tokens.Allow(tok.ID) {
			c.Response().Header().Set("Retry-After", "1")
			return writeError(c, http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("this token may make %v requests per second; retry after a second", a.cfg.RatePerToken))
		}
		return h(a, c, actor)
	}
}

// writeError answers an error the route itself names, in the API's one
// error shape.
func writeError(c echo.Context, status int, code, msg string) error {
	return httperr.JSON(c, httperr.Problem{Status: status, Code: code, Message: msg})
}

// fail answers err by the one table of domain errors (package httperr,
// which the UI answers by too); internal errors are logged with the
// request id and shown as a plain sentence.
func (a *API) fail(c echo.Context, err error) error {
	return httperr.JSON(c, httperr.Report(c, a.cfg.Logger, err))
}

// bodyError is a request that could not be read as what the route takes.
type bodyError = httperr.Error

// decode reads one JSON object into v, refusing unknown fields, wrong
// types, trailing data, oversized bodies and a NUL in any string (which
// PostgreSQL cannot store: httperr.BadTextInJSON), each with one sentence.
func (a *API) decode(c echo.Context, v any) error {
	r := c.Request()
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &bodyError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("this route takes application/json, not %s", ct)}
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), r.Body, a.cfg.MaxJSONBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body has data after its JSON object"}
	}
	return httperr.BadTextInJSON(v)
}

func jsonError(err error) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		tooBig *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is empty; send a JSON object"}
	case errors.As(err, &tooBig):
		return &bodyError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: fmt.Sprintf("the body is larger than the %d-byte limit", tooBig.Limit)}
	case errors.As(err, &syntax):
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid_json", Message: fmt.Sprintf("the body is not valid JSON at byte %d: %v", syntax.Offset, syntax)}
	case errors.As(err, &typ):
		field := typ.Field
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid", Field: field,
			Message: fmt.Sprintf("field %q must be %s, not a JSON %s", field, jsonType(typ.Type.Kind().String()), typ.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid", Field: name, Message: fmt.Sprintf("unknown field %q", name)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &bodyError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body ends before its JSON object does"}
	}
	return &bodyError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is not valid JSON: " + err.Error()}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "a " + kind
}

// timeout bounds one request's database work.
func ctxOf(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), 5*time.Minute)
}
