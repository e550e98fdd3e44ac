package toolcall

import (
	"context"
	"fmt"
	"time"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/ledger"
)

// WaitMax bounds how long one Wait may wait: the API refuses a longer
// wait. Long enough that a runtime asks about once a minute; short
// enough for proxies' idle timeouts and clients' request timeouts (the
// campaign decision's long poll has the same bound).
const WaitMax = 60 * time.Second

// ChangeChannel is the PostgreSQL notification channel on which every
// transaction that changes a call names its key; the notification is
// delivered at its commit, never before, so a waiter that reads again on
// it sees the change.
const ChangeChannel = "onceplan_tool_call"

// GetFor is key's status as a reads it: ErrNoEffect when no call was
// begun with it, and also when a may not read it (Status.MayRead), so
// that a token cannot learn which calls other users make.
func (s *Service) GetFor(ctx context.Context, a auth.Actor, key ledger.Key) (Status, error) {
	st, err := getStatus(ctx, s.pool, key, "")
	if err != nil {
		return Status{}, err
	}
	if !st.MayRead(a) {
		return Status{}, fmt.Errorf("%w has key %s", ErrNoEffect, key)
	}
	return st, nil
}

// Waits reports whether a call in st's state changes without the reader
// acting: a settle, recovery, a person's resolution or approval. Wait
// waits only then.
func (s Status) Waits() bool {
	switch s.State {
	case State(ledger.StatePending), State(ledger.StateUnknown), StateAwaitingApproval:
		return true
	}
	return false
}

// changedFrom reports whether st is another state of the call than was
// (a lease that ended counts: what the caller should do next changed).
func (s Status) changedFrom(was Status) bool {
	return s.State != was.State || s.Epoch != was.Epoch || s.EffectID != was.EffectID || s.LeaseExpired != was.LeaseExpired
}

// Wait is GetFor, answered as soon as the call's state changes (a settle,
// recovery, a person's resolution or approval: Status.Waits), or once
// wait has passed with it unchanged. A wait of 0 or less, or a state that
// does not change by itself, answers at once. When ctx ends first it
// answers the last status read, with ctx's error. Waiting holds no pooled
// connection: every waiter of the process shares one listening connection
// (package pgnotify), and reads the call again only when notified
// (pgnotify.Wait).
func (s *Service) Wait(ctx context.Context, a auth.Actor, key ledger.Key, wait time.Duration) (Status, error) {
	st, err := s.GetFor(ctx, a, key)
	if err != nil || wait <= 0 || !st.Waits() {
		return st, err
	}
	now := st
	err = pgnotify.Wait(ctx, s.changes, string(key), min(wait, WaitMax), func(ctx context.Context) (bool, error) {
		next, err := s.GetFor(ctx, a, key)
		if err != nil {
			return false, err
		}
		now = next
		return now.changedFrom(st), nil
	})
	if err != nil {
		return st, err
	}
	return now, nil
}
