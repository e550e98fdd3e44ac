package approval

import (
	"context"
	"sync"
	"time"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// CountsCache shares one list's counts among the pages, API calls and live
// pollers that ask within a short while. Counting a million-target plan
// takes a good fraction of a second; a dozen browsers or agents polling it
// must not take the database's whole time. An entry lives three times as
// long as it took to compute (at most maxCountsAge), so small plans are
// always fresh. The zero value is not usable: use NewCountsCache.
type CountsCache struct {
	mu sync.Mutex
	m  map[int64]countsEntry
}

type countsEntry struct {
	at     time.Time
	maxAge time.Duration
	counts Counts
}

const maxCountsAge = 10 * time.Second

// NewCountsCache returns an empty cache.
func NewCountsCache() *CountsCache { return &CountsCache{m: map[int64]countsEntry{}} }

// ListCounts is audit.ListCounts, from the cache when fresh.
func (cc *CountsCache) ListCounts(ctx context.Context, db onceplan.DB, listID int64, planned int) (Counts, error) {
	if c, ok := cc.get(listID, time.Now()); ok {
		return c, nil
	}
	start := time.Now()
	c, err := audit.ListCounts(ctx, db, listID, planned)
	if err != nil {
		return c, err
	}
	cc.put(listID, c, start, time.Since(start))
	return c, nil
}

// CampaignCounts is CampaignCounts, from the cache when fresh.
func (cc *CountsCache) CampaignCounts(ctx context.Context, db onceplan.DB, c Campaign) (Counts, error) {
	listID, n, err := ListOf(ctx, db, c)
	if err != nil || listID == 0 {
		return Counts{}, err
	}
	if c.PlanID == 0 {
		return Counts{Planned: n, NotStarted: n}, nil
	}
	return cc.ListCounts(ctx, db, listID, n)
}

func (cc *CountsCache) get(listID int64, now time.Time) (Counts, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e, ok := cc.m[listID]
	if !ok || now.Sub(e.at) > e.maxAge {
		return Counts{}, false
	}
	return e.counts, true
}

func (cc *CountsCache) put(listID int64, c Counts, at time.Time, took time.Duration) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if len(cc.m) > 1000 {
		clear(cc.m)
	}
	cc.m[listID] = countsEntry{at: at, maxAge: min(3*took, maxCountsAge), counts: c}
}

// Forget drops a list's entry after an action changed its counts.
func (cc *CountsCache) Forget(listID int64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	delete(cc.m, listID)
}
