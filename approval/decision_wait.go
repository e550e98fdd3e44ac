package approval

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgnotify"
)

// DecisionWaitMax bounds how long one WaitDecision may wait: the API
// refuses a longer wait, and the MCP tool's timeout has the same bound.
// Long enough that an agent polls about once a minute; short enough for
// proxies' idle timeouts and clients' request timeouts.
const DecisionWaitMax = 60 * time.Second

// DecisionChannel is the PostgreSQL notification channel on which the
// transaction that records a decisive action names its campaign; the
// notification is delivered at its commit, never before, so a waiter that
// re-reads on it sees the decision.
const DecisionChannel = "onceplan_decision"

// notifyDecision tells the waiters of campaign id, at tx's commit, that
// action changed what its Decision may say.
func notifyDecision(ctx context.Context, tx pgx.Tx, id string, action auth.Action) error {
	if !slices.Contains(decisive, action) {
		return nil
	}
	return pgnotify.Notify(ctx, tx, DecisionChannel, id)
}

// WaitDecision answers campaign id's Decision as soon as it is final (not
// pending), or once wait has passed with the decision then. A wait of 0
// or less answers at once. When ctx ends first it answers the last
// decision read, with ctx's error. Waiting holds no pooled connection:
// every waiter of the process shares one listening connection
// (a pgnotify.Hub on DecisionChannel), and reads the decision only when
// notified (pgnotify.Wait).
func (s *Service) WaitDecision(ctx context.Context, id string, wait time.Duration) (Decision, error) {
	d, err := s.Decision(ctx, id)
	if err != nil || d.Final() || wait <= 0 {
		return d, err
	}
	err = pgnotify.Wait(ctx, s.decisions, id, wait, func(ctx context.Context) (bool, error) {
		next, err := s.Decision(ctx, id)
		if err != nil {
			return false, err
		}
		d = next
		return d.Final(), nil
	})
	return d, err
}
