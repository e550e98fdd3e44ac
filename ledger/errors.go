package ledger

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// Errors callers test with errors.Is. Each returned error wraps one of these
// and says in its message which effect and why.
var (
	// ErrIllegalTransition: the state change is not a legal one (rule 2 of
	// docs/ARCHITECTURE.md, "The ledger: exactly-once lives in PostgreSQL").
	ErrIllegalTransition = onceplan.New(onceplan.CodeConflict, "illegal transition")
	// ErrWriteOnce: an attempt to change or delete something recorded.
	ErrWriteOnce = onceplan.New(onceplan.CodeConflict, "write-once")
	// ErrMissingEvidence: a transition lacks what it must carry (a recorded
	// raw response, a receipt, a reason, a named resolver).
	ErrMissingEvidence = onceplan.New(onceplan.CodeInvalid, "missing evidence")
	// ErrNoBump: an epoch above 0 without a recorded bump behind it.
	ErrNoBump = errors.New("epoch not bumped")
	// ErrGateClosed: PostgreSQL refused an attempt at a plan's target (or
	// a suppressed outcome) because its gate is closed: the campaign does
	// not run that plan, the address is suppressed, the suppression cited
	// is not in force for it, or the transaction is not READ COMMITTED.
	ErrGateClosed = errors.New("gate closed")
)

// translate maps PostgreSQL's answers to the ledger's errors at the storage
// boundary, so no caller has to know SQLSTATEs.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return onceplan.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	var kind error
	switch pgErr.Code {
	case "23505", "OP005": // unique_violation; bump out of sequence
		kind = onceplan.ErrConflict
	case "OP002":
		kind = ErrIllegalTransition
	case "OP001", "OP003":
		kind = ErrWriteOnce
	case "OP008":
		kind = ErrGateClosed
	case "OP004", "23514": // our evidence checks; check_violation
		kind = ErrMissingEvidence
	case "23503": // foreign_key_violation
		if pgErr.ConstraintName == "effect_epoch_bumped" {
			kind = ErrNoBump
		} else {
			kind = onceplan.ErrNotFound
		}
	default:
		return err
	}
	return fmt.Errorf("%w: %s", kind, pgErr.Message)
}
