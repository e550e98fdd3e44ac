package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/onceplan/onceplan/plan"
)

// Errors callers test with errors.Is.
var (
	// ErrNotFound: no such user or token.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the change would break a rule (an email already taken,
	// the last admin demoted).
	ErrConflict = errors.New("conflict")
	// ErrBadCredentials: a sign-in with an unknown email or a wrong
	// password; which of the two is deliberately not said.
	ErrBadCredentials = errors.New("the email or password is wrong")
	// ErrThrottled: too many failed sign-ins; see [ThrottledError].
	ErrThrottled = errors.New("too many failed sign-in attempts")
	// ErrDisabled: the right password for a disabled account.
	ErrDisabled = errors.New("this account is disabled: ask an administrator")
	// ErrUnauthenticated: no valid session or token (unknown, expired,
	// revoked, or its user disabled).
	ErrUnauthenticated = errors.New("not signed in")
)

// kindError is an error with its own sentence that errors.Is matches
// against one of the sentinels above.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func fieldErr(field, format string, args ...any) error {
	return &plan.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ThrottledError refuses a sign-in until a time. It matches ErrThrottled.
type ThrottledError struct {
	// Until is when the next attempt may be made.
	Until time.Time
	// Wait is how long that was from the refusal.
	Wait time.Duration
	// Scope says which count refused: the account's failures from this
	// address, or the address's across accounts.
	Scope ThrottleScope
	// passwordChecked: the address's hold, for an account without
	// failures of its own from there, whose password is checked all the
	// same (throttle.go).
	passwordChecked bool
}

func (e *ThrottledError) Error() string {
	minutes := int(e.Wait.Round(time.Minute) / time.Minute)
	in := fmt.Sprintf("in %d minutes", minutes)
	switch {
	case minutes <= 0:
		in = "in less than a minute"
	case minutes == 1:
		in = "in 1 minute"
	}
	return fmt.Sprintf("too many failed sign-in attempts: try again %s (after %s)",
		in, e.Until.UTC().Format("15:04 UTC"))
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }
