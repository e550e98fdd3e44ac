package auth

import (
	"fmt"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Errors callers test with errors.Is.
var (
	// ErrBadCredentials: a sign-in with an unknown email or a wrong
	// password; which of the two is deliberately not said.
	ErrBadCredentials = onceplan.New(onceplan.CodeBadCredentials, "the email or password is wrong")
	// ErrThrottled: too many failed sign-ins; see [ThrottledError].
	ErrThrottled = onceplan.New(onceplan.CodeThrottled, "too many failed sign-in attempts")
	// ErrDisabled: the right password for a disabled account.
	ErrDisabled = onceplan.New(onceplan.CodeDisabled, "this account is disabled: ask an administrator")
)

func fieldErr(field, format string, args ...any) error {
	return &onceplan.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
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

// ErrorCode makes a throttled sign-in a [onceplan.CodeThrottled].
func (e *ThrottledError) ErrorCode() onceplan.Code { return onceplan.CodeThrottled }
