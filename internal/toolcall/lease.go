package toolcall

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// ErrLease: the settle's or heartbeat's lease is not the attempt's
// current one (409).
var ErrLease = fmt.Errorf("%w: not the current lease", onceplan.ErrConflict)

// leaseOrDefault is a begin's or heartbeat's lease: d, or DefaultLease
// for 0, within MinLease and MaxLease.
func leaseOrDefault(d time.Duration) (time.Duration, error) {
	if d == 0 {
		d = DefaultLease
	}
	if d < MinLease || d > MaxLease {
		return 0, leaseSecondsError(fmt.Sprint(d.Seconds()))
	}
	return d, nil
}

// LeaseOf is the lease a request's lease_seconds names (0: DefaultLease):
// every door that takes a lease as a number of seconds (the API's begin
// and heartbeat, MCP's effect_begin) converts it here, checking the
// number itself before it becomes a duration, so that no number wraps
// around into another lease. Out of range: a field error naming
// lease_seconds.
func LeaseOf(seconds int64) (time.Duration, error) {
	if seconds == 0 {
		return DefaultLease, nil
	}
	if seconds < int64(MinLease/time.Second) || seconds > int64(MaxLease/time.Second) {
		return 0, leaseSecondsError(strconv.FormatInt(seconds, 10))
	}
	return time.Duration(seconds) * time.Second, nil
}

// leaseSecondsError refuses a lease of given seconds.
func leaseSecondsError(given string) error {
	return &onceplan.FieldError{Field: "lease_seconds", Reason: fmt.Sprintf("must be a whole number of seconds from %d to %d (0 or absent: the default, %d), not %s",
		int(MinLease/time.Second), int(MaxLease/time.Second), int(DefaultLease/time.Second), given)}
}

// attemptRow is an attempt locked for a change.
type attemptRow struct {
	effectID   int64
	state      ledger.State
	takeovers  int
	policy     Policy
	tool       string
	event      string
	leaseUntil time.Time
	// leaseEnded: the lease ended (by the database's clock).
	leaseEnded bool
}

// lockAttempt locks the attempt of key whose lease is lease.
func lockAttempt(ctx context.Context, tx pgx.Tx, key ledger.Key, lease string) (attemptRow, error) {
	var r attemptRow
	var state string
	var policyID int64
	// The lock, then the read in a statement of its own (see lockDoubt).
	err := tx.QueryRow(ctx, `SELECT effect_id FROM tool_attempt WHERE key = $1 AND lease_id::text = $2 FOR UPDATE`,
		string(key), strings.TrimSpace(lease)).Scan(&r.effectID)
	if err == nil {
		err = tx.QueryRow(ctx, `
			SELECT e.state, a.takeovers, a.policy_id, c.tool, c.event, a.lease_until, a.lease_until < now()
			FROM tool_attempt a JOIN effect_attempt() e ON e.id = a.effect_id JOIN tool_call c ON c.key = a.key
			WHERE a.effect_id = $1`, r.effectID).
			Scan(&state, &r.takeovers, &policyID, &r.tool, &r.event, &r.leaseUntil, &r.leaseEnded)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: lease %s is not the current lease of key %s: it was never given, or it ended and another caller took the call over to perform it again with the same key; do not settle — begin again to learn the outcome",
			ErrLease, lease, key)
	}
	if err != nil {
		return r, err
	}
	r.state = ledger.State(state)
	r.policy, err = policyByID(ctx, tx, policyID)
	return r, err
}

// Heartbeat extends the lease of a call still in hand, to lease from now
// (0: DefaultLease); a lease already longer keeps its end (a lease only
// runs forward: migration 0026). A lease that ended is not revived: the
// call is in doubt, and its recovery decides.
func (s *Service) Heartbeat(ctx context.Context, a auth.Actor, key ledger.Key, lease string, d time.Duration) (Status, error) {
	if err := auth.Authorize(a, auth.ActionPerform); err != nil {
		return Status{}, err
	}
	d, err := leaseOrDefault(d)
	if err != nil {
		return Status{}, err
	}
	if strings.TrimSpace(lease) == "" {
		return Status{}, &onceplan.FieldError{Field: "lease", Reason: "is required: the lease the begin answered"}
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := lockAttempt(ctx, tx, key, lease)
		if err != nil {
			return err
		}
		switch {
		case r.state != ledger.StatePending:
			return fmt.Errorf("%w: the attempt for key %s is %s: there is no call in hand to extend (do not perform it; read its status)", onceplan.ErrConflict, key, r.state)
		case r.leaseEnded:
			return fmt.Errorf("%w: the lease of key %s ended at %s: the call is in doubt and no heartbeat revives it (do not start or continue it; begin again to learn its outcome)",
				onceplan.ErrConflict, key, r.leaseUntil.UTC().Format(time.RFC3339Nano))
		}
		_, err = tx.Exec(ctx, `UPDATE tool_attempt SET lease_until = greatest(lease_until, now() + make_interval(secs => $2)) WHERE effect_id = $1`, r.effectID, d.Seconds())
		return refusal(err)
	})
	if err != nil {
		return Status{}, err
	}
	return getStatus(ctx, s.pool, key, "")
}
