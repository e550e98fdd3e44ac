package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web"
	"github.com/onceplan/onceplan/web/httperr"
)

// errorCase is an error a handler returns and what every client must be
// told of it.
type errorCase struct {
	name   string
	err    error
	status int
	code   string
	msg    string
	field  string
	line   int
	// internal: the detail is withheld, logged under the request id the
	// client is shown.
	internal bool
}

// codedErrors is every error the project defines with a code: the kinds
// of the vocabulary and each package's own refusals.
var codedErrors = []error{
	onceplan.ErrInvalid, onceplan.ErrNotFound, onceplan.ErrConflict, onceplan.ErrForbidden,
	onceplan.ErrUnauthenticated, onceplan.ErrUnavailable,
	auth.ErrBadCredentials, auth.ErrThrottled, auth.ErrDisabled,
	approval.ErrIdempotencyMismatch, approval.ErrTestSendRateLimited,
	toolcall.ErrArgsMismatch, audit.ErrNoPlan, suppression.ErrNotSuppressed,
	ledger.ErrIllegalTransition, ledger.ErrWriteOnce, ledger.ErrMissingEvidence, ledger.ErrInvalidTarget,
	inbound.ErrUnsigned,
}

// errorCases is every coded error (each wrapped, as handlers return them)
// classified by httperr's table — which must have a row for each error's
// code, and no row no error uses — then the errors classified otherwise.
func errorCases(t *testing.T) []errorCase {
	var cases []errorCase
	used := map[onceplan.Code]bool{}
	for _, sentinel := range codedErrors {
		code := onceplan.ErrorCode(sentinel)
		i := slices.IndexFunc(httperr.Table(), func(e httperr.Entry) bool { return e.Code == code })
		if i < 0 {
			t.Fatalf("httperr's table has no row for code %q (of %q)", code, sentinel)
		}
		e := httperr.Table()[i]
		used[code] = true
		err := fmt.Errorf("campaign c1: %w", sentinel)
		c := errorCase{name: sentinel.Error(), err: err, status: e.Status, code: string(e.Code), msg: e.Message, internal: e.Status >= 500}
		if c.msg == "" {
			c.msg = err.Error()
		}
		cases = append(cases, c)
	}
	for _, e := range httperr.Table() {
		if !used[e.Code] {
			t.Errorf("httperr's table has a row for code %q, which no error carries", e.Code)
		}
	}
	cases = append(cases,
		errorCase{name: "cancelled", err: fmt.Errorf("reading: %w", context.Canceled), status: 499, code: "cancelled", msg: "the request was cancelled"},
		errorCase{name: "deadline", err: fmt.Errorf("reading: %w", context.DeadlineExceeded), status: 503, code: "timeout", msg: "the database did not answer in time: try again", internal: true},
	)
	// What approval.frozenRuleErr makes of PostgreSQL's refusal.
	op007 := &pgconn.PgError{Code: "OP007", Message: "approval refused: version 2 with hash ab is not what was submitted for approval"}
	refused := fmt.Errorf("%w: %s", onceplan.ErrConflict, op007.Message)
	return append(cases,
		errorCase{name: "OP007 refusal", err: refused, status: 409, code: "conflict", msg: refused.Error()},
		errorCase{name: "field", err: &onceplan.FieldError{Field: "subject", Reason: "is required"}, status: 400, code: "invalid", msg: "subject: is required", field: "subject"},
		errorCase{name: "list", err: &plan.ListError{Line: 3, Reason: "bare quote"}, status: 400, code: "invalid_list", msg: "the target list was refused: line 3: bare quote", line: 3},
		errorCase{name: "list too large", err: &plan.ListError{Reason: "over 10 targets", TooLarge: true}, status: 413, code: "too_large", msg: "the target list was refused: over 10 targets"},
		errorCase{name: "status error", err: echo.NewHTTPError(http.StatusNotFound, "no such target"), status: 404, code: "not_found", msg: "no such target"},
		errorCase{name: "body", err: &bodyError{Status: 415, Code: "unsupported_media_type", Message: "this route takes application/json"}, status: 415, code: "unsupported_media_type", msg: "this route takes application/json"},
		errorCase{name: "unknown", err: errors.New(`ERROR: relation "secret_table" does not exist`), status: 500, code: "internal", msg: httperr.InternalMessage, internal: true},
	)
}

// TestErrorTableOneAnswerInUIAndAPI walks httperr's table: every error in
// it, returned by a UI handler (web's HTTPErrorHandler: a page, or JSON)
// and by an API handler (API.fail), gets the same status, code and
// message. Internal errors show no detail and are logged with the request
// id the client is shown.
func TestErrorTableOneAnswerInUIAndAPI(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	cases := errorCases(t)
	errAt := func(c echo.Context) error {
		i, _ := strconv.Atoi(c.Param("i"))
		return cases[i].err
	}
	a := &API{cfg: Config{Logger: logger}}
	srv := web.NewServer(web.Config{Logger: logger, Approval: approval.NewService(nil, nil), Mount: func(e *echo.Echo) {
		e.GET("/errors/:i", errAt) // answered by web's HTTPErrorHandler
		e.GET(Prefix+"/errors/:i", func(c echo.Context) error { return a.fail(c, errAt(c)) })
	}})
	get := func(path, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}

	for i, tc := range cases {
		path := "/errors/" + strconv.Itoa(i)
		page := get(path, "text/html")
		ui := get(path, "application/json")
		api := get(Prefix+path, "application/json")
		for who, rec := range map[string]*httptest.ResponseRecorder{"UI page": page, "UI JSON": ui, "API": api} {
			require.Equal(t, tc.status, rec.Code, "%s, %s: %s", tc.name, who, rec.Body)
			require.NotContains(t, rec.Body.String(), "secret_table", "%s, %s: no internals", tc.name, who)
		}

		d, err := goquery.NewDocumentFromReader(page.Body)
		require.NoError(t, err)
		require.Equal(t, tc.msg, d.Find(`[data-testid="error-message"]`).Text(), tc.name)
		if !tc.internal {
			require.Zero(t, d.Find(`[data-testid="request-id"]`).Length(), tc.name)
		} else {
			rid := page.Header().Get(echo.HeaderXRequestID)
			require.Equal(t, rid, d.Find(`[data-testid="request-id"]`).Text(), tc.name)
			require.Contains(t, logs.String(), "request_id="+rid, "%s: logged under the id shown", tc.name)
		}

		for who, rec := range map[string]*httptest.ResponseRecorder{"UI JSON": ui, "API": api} {
			var body struct {
				Error struct {
					Code, Message, Field string
					Line                 int
				}
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "%s, %s", tc.name, who)
			got := body.Error
			require.Equal(t, tc.code, got.Code, "%s, %s", tc.name, who)
			require.Equal(t, tc.field, got.Field, "%s, %s", tc.name, who)
			require.Equal(t, tc.line, got.Line, "%s, %s", tc.name, who)
			if !tc.internal {
				require.Equal(t, tc.msg, got.Message, "%s, %s", tc.name, who)
				continue
			}
			rid := rec.Header().Get(echo.HeaderXRequestID)
			require.Equal(t, tc.msg+" (request id "+rid+")", got.Message, "%s, %s", tc.name, who)
			require.Contains(t, logs.String(), "request_id="+rid, "%s, %s: logged under the id shown", tc.name, who)
		}
	}
}

// TestErrorTableKeepsTheAPIContract pins the statuses openapi.yaml
// promises for the errors the UI and the API once answered differently.
func TestErrorTableKeepsTheAPIContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
	}{
		{onceplan.ErrInvalid, http.StatusBadRequest},
		{ledger.ErrInvalidTarget, http.StatusBadRequest},
		{ledger.ErrMissingEvidence, http.StatusBadRequest},
		{approval.ErrIdempotencyMismatch, http.StatusUnprocessableEntity},
		{ledger.ErrWriteOnce, http.StatusConflict},
		{ledger.ErrIllegalTransition, http.StatusConflict},
		{onceplan.ErrConflict, http.StatusConflict},
		{&plan.ListError{Reason: "no header"}, http.StatusBadRequest},
	} {
		require.Equal(t, tc.status, httperr.Classify(fmt.Errorf("x: %w", tc.err)).Status, "%v", tc.err)
	}
}
