// Package keyedrate is a token-bucket rate limit per key — a client
// address, a user, an API token — with memory bounded by the number of
// keys it remembers: past MaxKeys it forgets them all and starts afresh
// (a flood of new keys then costs a burst each, never unbounded memory).
// The routes open without sign-in (webhooks, unsubscribe links), the API's
// tokens and the test sends each keep one.
//
// A client address is counted under ClientKey, the one statement of which
// addresses are one client: the limits per client (Clients) and the
// sign-in throttle (package auth) all ask it.
package keyedrate

import (
	"net/netip"
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

// ClientKey is the key a client address is counted under: an IPv4 address
// as it is (an IPv4-mapped IPv6 address is its IPv4 address), an IPv6
// address by its /64 network — one machine or one customer usually holds
// a whole /64, and would otherwise have 2^64 fresh addresses, each with a
// fresh allowance. Anything else (no address, or text that is not one) is
// counted as it is.
func ClientKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64) // never fails: 64 bits fit an IPv6 address
	return p.String()
}

// Clients is a Limiter per client address, each address counted under its
// ClientKey: the addresses of one IPv6 /64 share one allowance.
type Clients struct {
	l *Limiter[string]
}

// NewClients returns a limit of limit events a second and bursts of burst
// per client (ClientKey), remembering at most maxKeys clients
// (DefaultMaxKeys when 0 or less).
func NewClients(limit rate.Limit, burst, maxKeys int) *Clients {
	return &Clients{l: New[string](limit, burst, maxKeys)}
}

// Allow takes one event for the client at address ip now, and reports
// whether it was allowed.
func (c *Clients) Allow(ip string) bool { return c.l.Allow(ClientKey(ip)) }

// AllowAt is Allow at time now.
func (c *Clients) AllowAt(ip string, now time.Time) bool { return c.l.AllowAt(ClientKey(ip), now) }
