// Package httperr owns the one table from domain errors to HTTP statuses
// and error codes, and the one classification of an error for a client
// (the right status, a code, one sentence: docs/ARCHITECTURE.md,
// "Errors at the edge"). The web UI (package
// web) and the JSON API (web/api) both present what [Classify] returns —
// the API and the UI's JSON routes as {"error": {"code", "message"}} with
// [JSON], the UI's pages as an error page — so the two cannot answer the
// same error differently.
//
// Internal errors (5xx) never show their detail: the client gets a plain
// sentence and the request id, the log gets the error ([Report]).
package httperr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Entry is one row of the table: an error whose [onceplan.ErrorCode] is
// Code is answered with Status.
type Entry struct {
	Code   onceplan.Code
	Status int
	// Message, when set, is shown instead of the error's own text (which,
	// for these errors, says nothing a client can act on).
	Message string
}

// table gives each code its status. The statuses are the API's contract
// (openapi.yaml): 400 invalid input, 409 a refusal by the campaign's or
// the ledger's rules (a stale hash, an illegal transition, a write-once
// record; also PostgreSQL's own refusal of what was not submitted or
// approved, SQLSTATE OP007), 422 only an idempotency key reused for a
// different request, or a single effect's key begun again with other args.
var table = []Entry{
	{Code: onceplan.CodeInvalid, Status: http.StatusBadRequest},
	{Code: onceplan.CodeNotFound, Status: http.StatusNotFound},
	{Code: onceplan.CodeConflict, Status: http.StatusConflict},
	{Code: onceplan.CodeForbidden, Status: http.StatusForbidden},
	{Code: onceplan.CodeUnauthenticated, Status: http.StatusUnauthorized},
	{Code: onceplan.CodeBadCredentials, Status: http.StatusUnauthorized},
	{Code: onceplan.CodeDisabled, Status: http.StatusForbidden},
	{Code: onceplan.CodeThrottled, Status: http.StatusTooManyRequests},
	{Code: onceplan.CodeRateLimited, Status: http.StatusTooManyRequests},
	{Code: onceplan.CodeIdempotencyMismatch, Status: http.StatusUnprocessableEntity},
	{Code: onceplan.CodeArgsMismatch, Status: http.StatusUnprocessableEntity},
	{Code: onceplan.CodeNotApproved, Status: http.StatusConflict},
	{Code: onceplan.CodeNotSuppressed, Status: http.StatusNotFound},
	{Code: onceplan.CodeUnavailable, Status: http.StatusServiceUnavailable, Message: "the request cannot be checked or done now: try again later"},
}

// contextTable answers a request whose context ended before it did; these
// errors carry no code.
var contextTable = []struct {
	err     error
	problem Problem
}{
	{context.Canceled, Problem{Status: 499, Code: "cancelled", Message: "the request was cancelled"}},
	{context.DeadlineExceeded, Problem{Status: http.StatusServiceUnavailable, Code: "timeout", Message: "the database did not answer in time: try again"}},
}

// Table returns a copy of the table.
func Table() []Entry { return slices.Clone(table) }

// InternalMessage is what a client is told of an error the table does not
// know: its detail is in the log, under the request id.
const InternalMessage = "an internal error occurred; it was logged"

// Problem is an error as a client is told it.
type Problem struct {
	Status int    `json:"-"`
	Code   string `json:"code"`
	// Message is one sentence, safe to show.
	Message string `json:"message"`
	// Field is the request field at fault, Line the target list's line,
	// when the problem is in one.
	Field string `json:"field,omitempty"`
	Line  int    `json:"line,omitempty"`
	// RequestID names the request in the log (set by Report).
	RequestID string `json:"-"`
}

// Internal reports whether the problem is the server's: its detail is
// logged, not shown.
func (p Problem) Internal() bool { return p.Status >= http.StatusInternalServerError }

// Error is an error that knows its own status and code, such as a request
// body that cannot be read as what the route takes.
type Error struct {
	Status  int
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Classify says what err means to a client: its status, code and message.
func Classify(err error) Problem {
	var (
		own    *Error
		he     *echo.HTTPError
		tooBig *http.MaxBytesError
		list   *plan.ListError
		field  *onceplan.FieldError
	)
	switch {
	case errors.As(err, &own):
		return Problem{Status: own.Status, Code: own.Code, Message: own.Message, Field: own.Field}
	case errors.As(err, &he):
		msg, _ := he.Message.(string)
		if msg == "" {
			msg = http.StatusText(he.Code)
		}
		return Problem{Status: he.Code, Code: codeFor(he.Code), Message: msg}
	case errors.As(err, &tooBig):
		return Problem{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
			Message: fmt.Sprintf("the request body is larger than the %d-byte limit", tooBig.Limit)}
	case errors.As(err, &list):
		p := Problem{Status: http.StatusBadRequest, Code: "invalid_list", Message: "the target list was refused: " + list.Error(), Line: list.Line}
		if list.TooLarge {
			p.Status, p.Code = http.StatusRequestEntityTooLarge, "too_large"
		}
		return p
	}
	if code := onceplan.ErrorCode(err); code != "" {
		for _, e := range table {
			if e.Code != code {
				continue
			}
			p := Problem{Status: e.Status, Code: string(e.Code), Message: e.Message}
			if p.Message == "" {
				p.Message = err.Error()
			}
			if errors.As(err, &field) {
				p.Field = field.Field
			}
			return p
		}
	}
	for _, e := range contextTable {
		if errors.Is(err, e.err) {
			return e.problem
		}
	}
	return Problem{Status: http.StatusInternalServerError, Code: "internal", Message: InternalMessage}
}

// Report classifies err for the request c and, when the problem is the
// server's, logs err with the request id the client is shown.
func Report(c echo.Context, logger *slog.Logger, err error) Problem {
	p := Classify(err)
	p.RequestID = c.Response().Header().Get(echo.HeaderXRequestID)
	if p.Internal() {
		logger.Error("request failed", "err", err, "request_id", p.RequestID,
			"method", c.Request().Method, "path", c.Request().URL.Path, "route", c.Path())
	}
	return p
}

// JSON writes p as the API's error body: {"error": {"code", "message"}},
// plus field or line when set; an internal error's message names the
// request id.
func JSON(c echo.Context, p Problem) error {
	if p.Internal() && p.RequestID != "" {
		p.Message += " (request id " + p.RequestID + ")"
	}
	return c.JSON(p.Status, struct {
		Error Problem `json:"error"`
	}{p})
}

// codeFor is the code of an error that carries only a status.
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusUnprocessableEntity:
		return "invalid"
	case http.StatusTooManyRequests:
		return "throttled"
	}
	if status >= http.StatusInternalServerError {
		return "internal"
	}
	return "error"
}
