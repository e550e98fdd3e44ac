package provider

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// limiter is the rate limit and concurrency bound every kind shares.
//
// Acquire takes a concurrency slot first and then waits for a turn of the
// rate limit, so that turns go to callers that can use them at once: a
// waiter blocked on a slot does not hoard a turn and burst later. The
// limit's burst is 1, so "10/s" means one send every 100ms, never ten at
// once.
//
// The turns come from this process's own bucket, or, once the provider is
// paced through the database (Registry.PaceThrough, for the kinds whose
// limit is the account's), from one schedule in PostgreSQL that every
// process sending through the provider shares.
type limiter struct {
	perSecond float64 // 0: no rate limit
	scope     string  // RateScopeProcess or RateScopeAccount
	slots     chan struct{}

	mu   sync.Mutex
	pace pacer // nil: no rate limit
}

// Rate scopes: whose budget a provider's rate= is.
const (
	// RateScopeProcess: each process keeps the rate on its own.
	RateScopeProcess = "process"
	// RateScopeAccount: the rate is the service account's, shared by
	// every process sending through the provider (through the database).
	RateScopeAccount = "account"
)

// pacer hands out the rate limit's turns.
type pacer interface {
	// Wait takes the next turn and waits for it. When the turn lies past
	// ctx's deadline it takes nothing and fails at once.
	Wait(ctx context.Context) error
	// Allow takes a turn if one is due now, never waiting.
	Allow() bool
}

func newLimiter(perSecond float64, concurrency int, scope string) *limiter {
	l := &limiter{perSecond: perSecond, scope: scope, slots: make(chan struct{}, concurrency)}
	if perSecond > 0 {
		l.pace = rate.NewLimiter(rate.Limit(perSecond), 1)
	}
	return l
}

func (l *limiter) pacer() pacer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pace
}

// Acquire waits for a slot and a turn. It returns ctx's error when ctx ends
// first, holding nothing.
func (l *limiter) Acquire(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var once sync.Once
	release := func() { once.Do(func() { <-l.slots }) }
	if p := l.pacer(); p != nil {
		if err := p.Wait(ctx); err != nil {
			release()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var unavailable *paceError
			if errors.As(err, &unavailable) {
				return nil, err
			}
			// Wait also fails at once when ctx's deadline comes before the
			// turn would; that is the caller's deadline expiring.
			return nil, context.DeadlineExceeded
		}
	}
	return release, nil
}

// Renew keeps a slot Acquire gave for one more call, when the rate limit
// has a turn for it now; it never waits. The executor renews the slot of
// a job's target for the job's next target, so that target's claim can
// go into the same commit as this target's answer (docs/ARCHITECTURE.md, "A job
// of several targets"): false
// means release the slot and Acquire again, waiting, before claiming.
func (l *limiter) Renew() bool {
	p := l.pacer()
	return p == nil || p.Allow()
}

// RateScope is whose budget the provider's rate is (RateScopeProcess or
// RateScopeAccount).
func (l *limiter) RateScope() string { return l.scope }

// PerSecond is the provider's rate limit (0: none).
func (l *limiter) PerSecond() float64 { return l.perSecond }

// paceThrough makes the limiter take its turns from the shared schedule
// of the provider called name in db, when its rate is the account's.
func (l *limiter) paceThrough(db onceplan.DB, name string) {
	if l.perSecond <= 0 || l.scope != RateScopeAccount {
		return
	}
	// At most MaxRateInterval, which the database refuses to exceed:
	// Parse takes no slower rate, and the division may round a nanosecond
	// over it.
	every := min(time.Duration(math.Ceil(float64(time.Second)/l.perSecond)), MaxRateInterval)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pace = &sharedPacer{db: db, name: name, every: every}
}

// sharedPacer takes turns from provider_pace (migration 0031), through
// the database function provider_pace_take: one schedule per provider
// name for every process, on the database's clock. The function is the
// table's only writer for the server's role (migration 0038); it takes an
// interval of at most MaxRateInterval and a wait of at most MaxPaceWait,
// and a latest turn further ahead than a take ever gives (a row from an
// older database) is repaired by the next take: docs/ARCHITECTURE.md,
// "Rate limits shared across processes".
type sharedPacer struct {
	db    onceplan.DB
	name  string
	every time.Duration
}

// paceError is the database failing to give a turn: nothing was sent,
// and the caller tries again later.
type paceError struct{ err error }

func (e *paceError) Error() string { return "pacing through the database: " + e.err.Error() }
func (e *paceError) Unwrap() error { return e.err }

// MaxPaceWait bounds a wait without a deadline: a turn further away
// than this is not taken (the caller's Acquire fails as if its deadline
// had passed, and the job is tried again later). It is the pace's horizon
// in the database (provider_pace_horizon, migration 0038): no take gives a
// turn further ahead, and provider_pace_take refuses a longer wait.
const MaxPaceWait = time.Hour

// MaxRateInterval is the longest interval between two turns a rate= gives:
// one call an hour, the slowest rate Parse takes. It is the pace's horizon
// in the database too (provider_pace_horizon), the longest interval
// provider_pace_take accepts.
const MaxRateInterval = time.Hour

func (s *sharedPacer) take(ctx context.Context, maxWait time.Duration) (bool, time.Duration, error) {
	var (
		taken  bool
		waitUS int64
	)
	err := s.db.QueryRow(ctx, `SELECT taken, wait_us FROM provider_pace_take($1, $2, $3)`,
		s.name, s.every.Microseconds(), max(maxWait.Microseconds(), 0)).Scan(&taken, &waitUS)
	if err != nil {
		return false, 0, &paceError{fmt.Errorf("provider %q: %w", s.name, err)}
	}
	return taken, time.Duration(waitUS) * time.Microsecond, nil
}

func (s *sharedPacer) Wait(ctx context.Context) error {
	maxWait := MaxPaceWait
	if d, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(d))
	}
	taken, wait, err := s.take(ctx, maxWait)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if !taken {
		return context.DeadlineExceeded
	}
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		// The turn stays taken: the account's budget is spent, never
		// over-spent.
		return ctx.Err()
	}
}

func (s *sharedPacer) Allow() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	taken, _, err := s.take(ctx, 0)
	return err == nil && taken
}
