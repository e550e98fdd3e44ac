package pgcluster

import (
	"errors"
	"fmt"
)

// ErrNoServerBinaries is matched (errors.Is) by the error Open returns when it finds
// no directory holding the PostgreSQL server binaries initdb, pg_ctl and postgres.
var ErrNoServerBinaries = errors.New("PostgreSQL server binaries not found")

// Error is the error type returned by Open and Close. Its message is one sentence
// meant for the person running onceplan: what is wrong and what to do about it.
// Err, when set, is the underlying cause and is reachable with errors.Is/As.
type Error struct {
	Msg string
	Err error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// errorf builds an *Error whose message is the formatted sentence; cause is kept for
// errors.Is/As but not repeated in the message (callers put it there when it helps).
func errorf(cause error, format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...), Err: cause}
}
