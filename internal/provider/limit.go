package provider

import (
	"context"
	"sync"

	"golang.org/x/time/rate"
)

// limiter is the rate limit and concurrency bound every kind shares.
//
// Acquire takes a concurrency slot first and then waits for a rate token, so
// that tokens go to callers that can use them at once: a waiter blocked on a
// slot does not hoard a token and burst later. The bucket's burst is 1, so
// "10/s" means one send every 100ms, never ten at once.
type limiter struct {
	rate  *rate.Limiter // nil: no rate limit
	slots chan struct{}
}

func newLimiter(perSecond float64, concurrency int) *limiter {
	l := &limiter{slots: make(chan struct{}, concurrency)}
	if perSecond > 0 {
		l.rate = rate.NewLimiter(rate.Limit(perSecond), 1)
	}
	return l
}

// Acquire waits for a slot and a token. It returns ctx's error when ctx ends
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
	if l.rate != nil {
		if err := l.rate.Wait(ctx); err != nil {
			release()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Wait also fails at once when ctx's deadline comes before the
			// token would; that is the caller's deadline expiring.
			return nil, context.DeadlineExceeded
		}
	}
	return release, nil
}

// Renew keeps a slot Acquire gave for one more call, when the rate limit
// has a token for it now; it never waits. The executor renews the slot of
// a job's target for the job's next target, so that target's claim can
// go into the same commit as this target's answer (docs/ARCHITECTURE.md, "A job
// of several targets"): false
// means release the slot and Acquire again, waiting, before claiming.
func (l *limiter) Renew() bool { return l.rate == nil || l.rate.Allow() }
