package web

import (
	"context"

	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// planCounts returns a plan's counts, from the cache when fresh.
func (s *Server) planCounts(ctx context.Context, p plan.Plan) (view.Counts, error) {
	return s.counts.ListCounts(ctx, s.cfg.Pool, p.ListID, p.TargetCount)
}
