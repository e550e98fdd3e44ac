// Package keyedrate is a token-bucket rate limit per key — a client
// address, a user, an API token — with memory bounded by the number of
// keys it remembers: past MaxKeys it forgets them all and starts afresh
// (a flood of new keys then costs a burst each, never unbounded memory).
// The routes open without sign-in (webhooks, unsubscribe links), the API's
// tokens and the test sends each keep one.
package keyedrate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys is how many keys a Limiter remembers by default.
const DefaultMaxKeys = 100_000

// Limiter allows each key Limit events a second, in bursts of Burst.
type Limiter[K comparable] struct {
	limit   rate.Limit
	burst   int
	maxKeys int

	mu   sync.Mutex
	keys map[K]*rate.Limiter
}

// New returns a limiter of limit events a second and bursts of burst per
// key, remembering at most maxKeys keys (DefaultMaxKeys when 0 or less).
func New[K comparable](limit rate.Limit, burst, maxKeys int) *Limiter[K] {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &Limiter[K]{limit: limit, burst: burst, maxKeys: maxKeys, keys: map[K]*rate.Limiter{}}
}

func (l *Limiter[K]) of(k K) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[k]
	if b == nil {
		if len(l.keys) >= l.maxKeys {
			clear(l.keys)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.keys[k] = b
	}
	return b
}

// Allow takes one event for k now, and reports whether it was allowed.
func (l *Limiter[K]) Allow(k K) bool { return l.AllowAt(k, time.Now()) }

// AllowAt is Allow at time now.
func (l *Limiter[K]) AllowAt(k K, now time.Time) bool { return l.of(k).AllowN(now, 1) }

// Take takes one event for k when it is allowed now and returns 0; when it
// is not, it takes nothing (a refused request does not use up the
// allowance) and returns how long until it would be.
func (l *Limiter[K]) Take(k K) time.Duration {
	r := l.of(k).Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return d
	}
	return 0
}
