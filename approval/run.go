// Running an approved plan: starting it (by a person, or when it is due),
// pausing, resuming, cancelling or discarding, and the system's requeues,
// completion and alerts; and what a resume would queue now.

package approval

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Start begins executing the approved plan: the run record and one job per
// target, in one transaction. Starting a running campaign again enqueues
// nothing and is not an error.
func (s *Service) Start(ctx context.Context, a auth.Actor, id string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionStart, func(tx pgx.Tx, c *Campaign) error {
		// The table lets a start be pressed again once running (step.again):
		// nothing new is enqueued then.
		if c.State == StateApproved {
			p, err := plan.GetPlan(ctx, tx, c.PlanID)
			if err != nil {
				return err
			}
			if *c, err = s.start(ctx, tx, &a, *c, p); err != nil {
				return err
			}
		}
		var err error
		res, err = s.result(ctx, tx, *c)
		return err
	})
	return res, err
}

// start writes the run of plan p and its jobs for a locked, approved
// campaign c.
func (s *Service) start(ctx context.Context, tx pgx.Tx, a *auth.Actor, c Campaign, p plan.Plan) (Campaign, error) {
	n, err := s.enqueuer.EnqueueRemaining(ctx, tx, p)
	if err != nil {
		return c, err
	}
	var startedBy *int64
	if a != nil {
		startedBy = &a.UserID
	}
	if _, err := tx.Exec(ctx, `INSERT INTO run (campaign_id, plan_id, started_by, job_count) VALUES ($1, $2, $3, $4)`,
		c.ID, p.ID, startedBy, n); err != nil {
		return c, err
	}
	return c, s.move(ctx, tx, a, &c, auth.ActionStart, p.Hash, "", map[string]any{"plan_id": p.ID, "jobs": n})
}

// StartDue starts every approved campaign whose scheduled time has come,
// as the system. It returns the ids it started.
func (s *Service) StartDue(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM campaign WHERE state = 'approved' AND scheduled_at <= $1 ORDER BY scheduled_at`, s.Now())
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var started []string
	for _, id := range ids {
		// A campaign someone started or edited meanwhile is no longer
		// approved: the table refuses the start, and it is left alone.
		acted, err := s.actAsSystem(ctx, id, auth.ActionStart, func(tx pgx.Tx, c *Campaign) error {
			p, err := plan.GetPlan(ctx, tx, c.PlanID)
			if err != nil {
				return err
			}
			_, err = s.start(ctx, tx, nil, *c, p)
			return err
		})
		if err != nil {
			return started, fmt.Errorf("starting scheduled campaign %s: %w", id, err)
		}
		if acted {
			started = append(started, id)
		}
	}
	return started, nil
}

// Pause stops a running campaign's jobs from claiming new effects; calls
// already in flight finish and are recorded.
func (s *Service) Pause(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	return s.transition(ctx, a, id, auth.ActionPause, reason)
}

// Resume runs the remainder: the campaign runs again and every target with
// no blocking ledger row and no live job gets a job. Pressing it twice, or
// from two places at once, enqueues the remainder once (the campaign lock
// serialises the presses; the ledger decides every effect anyway). A
// completed campaign with nothing to queue stays completed (Remaining
// tells beforehand).
func (s *Service) Resume(ctx context.Context, a auth.Actor, id string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionResume, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		p, err := plan.GetPlan(ctx, tx, c.PlanID)
		if err != nil {
			return err
		}
		n, err := s.enqueuer.EnqueueRemaining(ctx, tx, p)
		if err != nil {
			return err
		}
		if n == 0 && c.State == StateCompleted {
			// Nothing to run: the campaign stays completed and the trail
			// records nothing (a no-op, not an error, so that a script or
			// a second press may resume safely). res.Campaign says so.
			res, err = s.result(ctx, tx, c)
			return err
		}
		if err := s.move(ctx, tx, &a, &c, auth.ActionResume, p.Hash, "", map[string]any{"jobs": n}); err != nil {
			return err
		}
		res, err = s.result(ctx, tx, c)
		return err
	})
	return res, err
}

// Remaining says what resuming campaign c's plan would queue now, and
// which of its targets a stopped worker holds (Remainder). A campaign
// without a plan has none.
func (s *Service) Remaining(ctx context.Context, c Campaign) (Remainder, error) {
	return s.remaining(ctx, c, true)
}

// Stalled is Remaining without Queue (which reads the whole list): only
// what a stopped worker holds.
func (s *Service) Stalled(ctx context.Context, c Campaign) (Remainder, error) {
	return s.remaining(ctx, c, false)
}

func (s *Service) remaining(ctx context.Context, c Campaign, queue bool) (Remainder, error) {
	if c.PlanID == 0 {
		return Remainder{}, nil
	}
	p, err := plan.GetPlan(ctx, s.pool, c.PlanID)
	if err != nil {
		return Remainder{}, err
	}
	return s.enqueuer.CountRemaining(ctx, s.pool, p, queue)
}

// NextTries says when each of the given targets of campaign c's plan is
// tried next by a live job (Enqueuer.NextTries); a target missing from
// the answer has no live job. A campaign without a plan has none.
func (s *Service) NextTries(ctx context.Context, c Campaign, ordinals []int) (map[int]time.Time, error) {
	if c.PlanID == 0 || len(ordinals) == 0 {
		return map[int]time.Time{}, nil
	}
	p, err := plan.GetPlan(ctx, s.pool, c.PlanID)
	if err != nil {
		return nil, err
	}
	return s.enqueuer.NextTries(ctx, s.pool, p, ordinals)
}

// LeftOutAtImport is how many rows the imports that made the current
// version's list left out because their address was suppressed: the
// import events' counts, from the newest back to the last import that
// replaced the list rather than appended to it.
func (s *Service) LeftOutAtImport(ctx context.Context, c Campaign) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		WITH imports AS (
		  SELECT id, coalesce((detail->>'suppressed')::int, 0) AS suppressed, coalesce((detail->>'append')::boolean, false) AS append
		  FROM campaign_event WHERE campaign_id = $1 AND version = $2 AND action = $3
		)
		SELECT coalesce(sum(suppressed), 0) FROM imports
		WHERE id >= coalesce((SELECT max(id) FROM imports WHERE NOT append), 0)`, c.ID, c.Version, string(auth.ActionImport)).Scan(&n)
	return n, err
}

// Cancel ends a campaign for good: its remaining jobs end without acting.
func (s *Service) Cancel(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	return s.transition(ctx, a, id, auth.ActionCancel, reason)
}

// Discard ends campaign id, never approved — a draft, or a version
// waiting for approval — at its proposer's (or an operator's) request:
// it is cancelled, so nothing of it can be submitted, approved or started
// again, and the trail keeps it (a cancel whose detail says it was
// discarded, with the reason). A campaign with an approved plan is not a
// draft to discard: an operator cancels it (Cancel).
func (s *Service) Discard(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionDiscard, func(tx pgx.Tx, c *Campaign) error {
		if c.PlanID != 0 {
			return fmt.Errorf("%w: campaign %s has an approved version, so it is not a draft to discard: an operator cancels it", onceplan.ErrConflict, c.ID)
		}
		h, err := s.result(ctx, tx, *c)
		if err != nil {
			return err
		}
		if err := s.move(ctx, tx, &a, c, auth.ActionCancel, h.PlanHash, reason, map[string]any{"discarded": true}); err != nil {
			return err
		}
		res, err = s.result(ctx, tx, *c)
		return err
	})
	return res, err
}

// ActionComplete is recorded when a running campaign has nothing left to run.
const ActionComplete auth.Action = "complete"

// RequeueRemainder enqueues, as the system, the remainder of a running
// campaign's plan (after a worker process died with jobs in hand). It
// returns how many jobs it enqueued; 0 when the campaign is not running.
func (s *Service) RequeueRemainder(ctx context.Context, id string, reason string) (int, error) {
	var n int
	_, err := s.actAsSystem(ctx, id, auth.ActionResume, func(tx pgx.Tx, c *Campaign) error {
		if c.State != StateRunning {
			// A paused campaign's jobs wait for its operator; a completed
			// one reopens only for what CompleteIfDone or a decision puts
			// back.
			return nil
		}
		p, err := plan.GetPlan(ctx, tx, c.PlanID)
		if err != nil {
			return err
		}
		if n, err = s.enqueuer.EnqueueRemaining(ctx, tx, p); err != nil || n == 0 {
			return err
		}
		return s.move(ctx, tx, nil, c, auth.ActionResume, p.Hash, reason, map[string]any{"jobs": n})
	})
	return n, err
}

// RequeueTarget enqueues one target of plan p again, as the system, after
// recovery freed its key, with the attempts it has left — whatever job is
// live for it (Enqueuer.EnqueueFreed). A campaign that completed in the
// meantime runs again — or its gate would turn the new job away and the
// target would be forgotten — and the trail says why.
func (s *Service) RequeueTarget(ctx context.Context, p plan.Plan, ordinal, attempts int) error {
	// Not an action on the campaign: the job is the target's (the ledger
	// decides its effect), and the campaign changes only when reopen
	// takes the resume the table allows.
	return s.locked(ctx, p.CampaignID, func(tx pgx.Tx, c *Campaign) error {
		if c.PlanID != p.ID {
			return nil // a newer version runs its own jobs
		}
		n, err := s.enqueuer.EnqueueFreed(ctx, tx, p, ordinal, attempts)
		if err != nil || n == 0 {
			return err
		}
		return s.reopen(ctx, tx, nil, c, "recovery found a target not sent and put it back on the queue", n)
	})
}

// ActionAlert is recorded when the system refused to act on something it
// found recorded, and left it to a person: recovery refusing to send again
// a batch call that its plan does not derive, or one whose answer does not
// match it. Package notify announces it to the operators, with the reason.
const ActionAlert auth.Action = "alert"

// Alert records, as the system, that something of campaign id needs a
// person, saying why (reason), and announces it — once per subject: an
// alert of a subject the campaign's trail already holds records nothing,
// and recorded is false. detail is kept with it.
func (s *Service) Alert(ctx context.Context, id, subject, reason string, detail map[string]any) (recorded bool, err error) {
	_, err = s.actAsSystem(ctx, id, ActionAlert, func(tx pgx.Tx, c *Campaign) error {
		var seen bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM campaign_event
			WHERE campaign_id = $1 AND action = $2 AND detail ->> 'subject' = $3)`, c.ID, string(ActionAlert), subject).Scan(&seen); err != nil || seen {
			return err
		}
		d := map[string]any{"subject": subject}
		maps.Copy(d, detail)
		recorded = true
		return s.move(ctx, tx, nil, c, ActionAlert, "", reason, d)
	})
	return recorded, err
}

// CompleteIfDone marks a running campaign completed when done (called with
// the campaign locked) says nothing is left to run. It reports whether it
// did.
//
// A target no job ever tried keeps the campaign running: it goes back on
// the queue, and the trail says so (untriedReason). Completing would leave
// it unsent without a word (only the audit would count it missing). After
// maxUntriedRequeues such rounds for one version the campaign completes
// anyway, so that a target that can never be tried does not keep the
// queue busy for ever; the audit then names what is missing.
func (s *Service) CompleteIfDone(ctx context.Context, id string, done func(ctx context.Context, tx pgx.Tx, c Campaign) (bool, error)) (bool, error) {
	var completed bool
	_, err := s.actAsSystem(ctx, id, ActionComplete, func(tx pgx.Tx, c *Campaign) error {
		ok, err := done(ctx, tx, *c)
		if err != nil || !ok {
			return err
		}
		p, err := plan.GetPlan(ctx, tx, c.PlanID)
		if err != nil {
			return err
		}
		var rounds int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM campaign_event ev
			WHERE ev.campaign_id = $1 AND ev.plan_hash = $2 AND ev.action = 'resume' AND ev.detail ? 'untried'`, c.ID, p.Hash).Scan(&rounds); err != nil {
			return err
		}
		if rounds < maxUntriedRequeues {
			n, err := s.enqueuer.EnqueueUntried(ctx, tx, p)
			if err != nil {
				return err
			}
			if n > 0 {
				return s.move(ctx, tx, nil, c, auth.ActionResume, p.Hash, fmt.Sprintf(untriedReason, n), map[string]any{"jobs": n, "untried": n})
			}
		}
		completed = true
		return s.move(ctx, tx, nil, c, ActionComplete, "", "", nil)
	})
	return completed, err
}

// untriedReason is the trail's reason when CompleteIfDone puts targets no
// job tried back on the queue (%d: how many).
const untriedReason = "%d targets were never tried though every job had finished; they are back on the queue"

// maxUntriedRequeues bounds CompleteIfDone's requeues of untried targets
// for one version of a campaign.
const maxUntriedRequeues = 3
