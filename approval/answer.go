// What an action answers: the campaign, and what its answer shows beside
// it, read in one snapshot.

package approval

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Result is a campaign after an action, with its current plan hash.
type Result struct {
	Campaign Campaign
	Draft    Draft
	// PlanHash is the hash of the campaign's current version: the draft's
	// while it is a draft, the frozen plan's once approved.
	PlanHash string
	// Import is set by actions that imported targets.
	Import *plan.ImportReport
	// Replayed: Create found its idempotency key already used for the same
	// request and returned that campaign instead of making another.
	Replayed bool
	// Check is set by Submit: what it found in the targets that does not
	// block a submission (Empty, EmptyCount: blank merge variables, a
	// warning for the proposer).
	Check *plan.CheckReport
	// Answer is what an answer shows beside the campaign, read in the
	// same snapshot: set by Approve (inside its transaction), else read
	// by [Service.Answer].
	Answer *Answer
}

// Answer is what a campaign's answer shows beside the campaign itself,
// read in one snapshot with it.
type Answer struct {
	Counts Counts
	// Approvals counts the distinct approvals of the current plan hash.
	Approvals int
	Decision  Decision
	Serving   Serving
}

// Answer reads what res's answer shows beside the campaign, all in one
// snapshot (a read-only REPEATABLE READ transaction): the campaign as it
// is now, its counts (from cache when cache is not nil and fresh), its
// approvals, its decision and whether a worker serves its provider. It
// returns res.Answer when an action already read it in its own
// transaction.
func (s *Service) Answer(ctx context.Context, res Result, cache *CountsCache) (Result, error) {
	if res.Answer != nil {
		return res, nil
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		c, err := GetCampaign(ctx, tx, res.Campaign.ID)
		if err != nil {
			return err
		}
		now, err := s.result(ctx, tx, c)
		if err != nil {
			return err
		}
		now.Import, now.Replayed, now.Check = res.Import, res.Replayed, res.Check
		res = now
		return s.answer(ctx, tx, &res, cache)
	})
	return res, err
}

// answer fills res.Answer from db, which is the snapshot res was read in.
func (s *Service) answer(ctx context.Context, db onceplan.DB, res *Result, cache *CountsCache) error {
	c := res.Campaign
	var (
		a   Answer
		err error
	)
	if cache != nil {
		a.Counts, err = cache.CampaignCounts(ctx, db, c)
	} else {
		a.Counts, err = CampaignCounts(ctx, db, c)
	}
	if err != nil {
		return err
	}
	if a.Approvals, err = approvals(ctx, db, c, res.PlanHash); err != nil {
		return err
	}
	if a.Decision, err = decisionOf(ctx, db, c.ID); err != nil {
		return err
	}
	if a.Serving, err = s.serving(ctx, db, c); err != nil {
		return err
	}
	res.Answer = &a
	return nil
}

// Serving is how many live worker processes serve a campaign's provider,
// and, when none does while the campaign waits for one, the sentence that
// says so and what to do: the run page, the API's campaign and the MCP
// status show it.
type Serving struct {
	Live    int
	Warning string
}

// Serving says whether a live worker process serves campaign c's
// provider. An approved, running or paused campaign waits for one: with
// none, nothing of it is sent, and Warning says so.
func (s *Service) Serving(ctx context.Context, c Campaign) (Serving, error) {
	return s.serving(ctx, s.pool, c)
}

func (s *Service) serving(ctx context.Context, db onceplan.DB, c Campaign) (Serving, error) {
	n, err := s.enqueuer.ProviderWorkers(ctx, db, c.Provider)
	if err != nil {
		return Serving{}, err
	}
	sv := Serving{Live: n}
	switch c.State {
	case StateApproved, StateRunning, StatePaused:
		if n == 0 {
			sv.Warning = fmt.Sprintf("No live worker process serves provider %q, so nothing of this campaign is sent: run onceplan serve or onceplan worker with --provider %s=URL.", c.Provider, c.Provider)
		}
	}
	return sv, nil
}
