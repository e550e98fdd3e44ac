// Package onceplan is the vocabulary every other package shares: the kinds
// of refusal (an [Error] with a [Code]), a validation error naming its field
// ([FieldError]) and the one database handle every store takes ([DB]).
//
// It imports nothing of the project, so any package may use it; it holds
// no rule of its own. Which HTTP status a code answers is web/httperr's
// table; which code an error carries is decided where the error is made.
package onceplan

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what every store reads and writes through: a pool, a connection or
// a transaction (pgx.Tx's Begin opens a savepoint).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Code says what kind of refusal an error is, in the words the API answers
// with (the "code" of its error body).
type Code string

// The codes. A client can act on each: fix the input, look elsewhere,
// reload, ask someone with the role, sign in, wait.
const (
	CodeInvalid             Code = "invalid"              // the input is wrong; nothing was changed
	CodeNotFound            Code = "not_found"            // no such thing (or not visible to the caller)
	CodeConflict            Code = "conflict"             // a rule of the current state refuses it
	CodeForbidden           Code = "forbidden"            // the caller may not do this
	CodeUnauthenticated     Code = "unauthenticated"      // no valid credentials
	CodeBadCredentials      Code = "bad_credentials"      // a sign-in with a wrong email or password
	CodeDisabled            Code = "disabled"             // the right password for a disabled account
	CodeThrottled           Code = "throttled"            // too many failed sign-ins
	CodeRateLimited         Code = "rate_limited"         // too many requests of this kind lately
	CodeIdempotencyMismatch Code = "idempotency_mismatch" // an idempotency key reused for another request
	CodeArgsMismatch        Code = "args_mismatch"        // a single effect's key begun again with other args
	CodeNotApproved         Code = "not_approved"         // the campaign has no approved plan yet
	CodeNotSuppressed       Code = "not_suppressed"       // the address is not suppressed
	CodeUnavailable         Code = "unavailable"          // it cannot be checked or done now: retry later
)

// Error is an error of a kind: its Code says what a caller can do about
// it, its Message what happened. The sentinels below, and those a package
// defines for its own refusals (ledger.ErrWriteOnce), are *Error values;
// callers test them with errors.Is and read the code with [ErrorCode].
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrorCode implements the interface [ErrorCode] looks for.
func (e *Error) ErrorCode() Code { return e.Code }

// New returns a new sentinel of a kind.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// The kinds every package refuses with. Wrap them with a sentence:
// fmt.Errorf("%w: campaign %s is running", ErrConflict, id).
var (
	ErrInvalid         = New(CodeInvalid, "invalid")
	ErrNotFound        = New(CodeNotFound, "not found")
	ErrConflict        = New(CodeConflict, "conflict")
	ErrForbidden       = New(CodeForbidden, "forbidden")
	ErrUnauthenticated = New(CodeUnauthenticated, "not signed in")
	ErrUnavailable     = New(CodeUnavailable, "unavailable")
)

// Errorf returns an error that says format's sentence alone and that
// errors.Is matches against kind (whose code it carries).
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// ErrorCode returns the code of the first error in err's chain that has
// one, or "" when none has: an error no client can act on.
func ErrorCode(err error) Code {
	var coded interface{ ErrorCode() Code }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}

// FieldError is a validation error naming the input field at fault. It is
// an ErrInvalid.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// ErrorCode says a field error is invalid input.
func (e *FieldError) ErrorCode() Code { return CodeInvalid }

// FieldErrorf returns a FieldError for field with a formatted reason.
func FieldErrorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
