package web

import (
	"context"
	"sync"
	"time"

	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// countsCache shares one plan's counts among the pages and live pollers
// that ask within a short while. Counting a million-target plan takes a
// good fraction of a second; a dozen browsers polling it must not take
// the database's whole time. An entry lives three times as long as it took
// to compute (at most maxCountsAge), so small plans are always fresh.
type countsCache struct {
	mu sync.Mutex
	m  map[int64]countsEntry
}

type countsEntry struct {
	at     time.Time
	maxAge time.Duration
	counts view.Counts
}

const maxCountsAge = 10 * time.Second

func newCountsCache() *countsCache { return &countsCache{m: map[int64]countsEntry{}} }

func (cc *countsCache) get(planID int64, now time.Time) (view.Counts, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e, ok := cc.m[planID]
	if !ok || now.Sub(e.at) > e.maxAge {
		return view.Counts{}, false
	}
	return e.counts, true
}

func (cc *countsCache) put(planID int64, c view.Counts, at time.Time, took time.Duration) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if len(cc.m) > 1000 {
		clear(cc.m)
	}
	cc.m[planID] = countsEntry{at: at, maxAge: min(3*took, maxCountsAge), counts: c}
}

// forget drops a plan's entry after an action changed its counts.
func (cc *countsCache) forget(planID int64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	delete(cc.m, planID)
}

// planCounts returns a plan's counts, from the cache when fresh.
func (s *Server) planCounts(ctx context.Context, p plan.Plan) (view.Counts, error) {
	if c, ok := s.counts.get(p.ID, time.Now()); ok {
		return c, nil
	}
	start := time.Now()
	c, err := queryCounts(ctx, s.cfg.Pool, p.ListID, p.TargetCount)
	if err != nil {
		return c, err
	}
	s.counts.put(p.ID, c, start, time.Since(start))
	return c, nil
}
