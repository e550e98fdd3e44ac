package web

import (
	"sync"
	"time"
)

// recent is a small in-memory map whose entries expire ttl after they were
// put, holding at most max (the oldest go first). It keeps what a POST's
// redirect needs on the page it leads to: the form tokens already used, an
// import report, a secret to show once. Safe for concurrent use.
type recent[V any] struct {
	mu  sync.Mutex
	ttl time.Duration
	max int
	m   map[string]recentEntry[V]
}

type recentEntry[V any] struct {
	at time.Time
	v  V
}

func newRecent[V any](ttl time.Duration, max int) *recent[V] {
	return &recent[V]{ttl: ttl, max: max, m: map[string]recentEntry[V]{}}
}

// getOrPut returns key's live value (found true), or puts mk()'s.
func (r *recent[V]) getOrPut(key string, now time.Time, mk func() V) (v V, found bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.m[key]; ok && now.Sub(e.at) < r.ttl {
		return e.v, true
	}
	r.prune(now)
	v = mk()
	r.m[key] = recentEntry[V]{at: now, v: v}
	return v, false
}

// get returns key's live value; take also removes it.
func (r *recent[V]) get(key string, now time.Time) (V, bool)  { return r.lookup(key, now, false) }
func (r *recent[V]) take(key string, now time.Time) (V, bool) { return r.lookup(key, now, true) }

func (r *recent[V]) lookup(key string, now time.Time, remove bool) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if remove {
		delete(r.m, key)
	}
	if !ok || now.Sub(e.at) >= r.ttl {
		var zero V
		return zero, false
	}
	return e.v, true
}

// prune makes room for one more entry: the expired ones go, then, while
// still full, the oldest (called with the lock held).
func (r *recent[V]) prune(now time.Time) {
	if len(r.m) < r.max {
		return
	}
	for k, e := range r.m {
		if now.Sub(e.at) >= r.ttl {
			delete(r.m, k)
		}
	}
	for len(r.m) >= r.max {
		oldest, at := "", now
		for k, e := range r.m {
			if !e.at.After(at) {
				oldest, at = k, e.at
			}
		}
		delete(r.m, oldest)
	}
}
