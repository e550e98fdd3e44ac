package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// jobOwner is the SQL expression for the process that last ran River job
// j: River records each attempt's client in attempted_by, and the
// executor's owner identity is the client's id.
const jobOwner = `j.attempted_by[array_upper(j.attempted_by, 1)]`

// recoveryBatch bounds the rows one maintenance round recovers, so a round
// stays short; the next round takes the rest.
const recoveryBatch = 200

// Maintain runs one maintenance round (on a started runner: Start gives
// it the workflow). Every step is idempotent: two rounds at once (two
// processes) cannot make a second effect, because the ledger decides every
// claim and settle. No step waits on a provider: a recovery that would
// send again takes the provider's turn only when one is free now
// (executor.Executor.Recover), and otherwise waits for a later round or for
// the job that finds the attempt in doubt — so one provider's schedule
// never holds up the round, nor the other providers' starts and
// recoveries with it.
func (r *Runner) Maintain(ctx context.Context) error {
	if r.approval == nil {
		return errors.New("jobs: maintenance runs on a started runner")
	}
	var errs []error
	if started, err := r.approval.StartDue(ctx); err != nil {
		errs = append(errs, err)
	} else if len(started) > 0 {
		r.cfg.Logger.Info("started scheduled campaigns", "campaigns", started)
	}
	errs = append(errs, r.recoverDeadOwners(ctx), r.recoverUnknowns(ctx), r.recoverToolCalls(ctx),
		r.requeueDeadWorkersTargets(ctx), r.completeFinished(ctx), r.sweepProviders(ctx))
	return errors.Join(errs...)
}

// sweepProviders removes what a dead process left half done at a provider
// (a maildir's tmp/ files): only what no live process may still be
// writing (provider.Sweeper says how each decides).
func (r *Runner) sweepProviders(ctx context.Context) error {
	var errs []error
	for _, name := range r.cfg.Providers.Names() {
		p, _ := r.cfg.Providers.Get(name)
		sw, ok := p.(provider.Sweeper)
		if !ok {
			continue
		}
		removed, err := sw.Sweep(ctx, time.Now())
		if len(removed) > 0 {
			r.cfg.Logger.Info("removed files a dead process left half written", "provider", name, "files", removed)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) timeout() string { return r.cfg.OwnerTimeout.String() }

// recoverDeadOwners settles plan targets' pending rows whose owner stopped
// heartbeating. Single effects (outside any plan) have a lease instead of
// an owner's heartbeat: recoverToolCalls takes them.
func (r *Runner) recoverDeadOwners(ctx context.Context) error {
	effects, err := r.effects(ctx, `
		SELECT id FROM effect_attempt() e
		WHERE e.state = 'pending' AND e.plan_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM worker_alive($1::interval) w WHERE w.owner = e.owner)
		ORDER BY e.created_at LIMIT $2`, r.timeout(), recoveryBatch)
	if err != nil {
		return err
	}
	return r.recoverAll(ctx, effects)
}

// recoverUnknowns settles unknown rows of providers that can tell (dedupe
// or probe); the others wait for a human.
func (r *Runner) recoverUnknowns(ctx context.Context) error {
	var names []string
	for _, name := range r.cfg.Providers.Names() {
		p, _ := r.cfg.Providers.Get(name)
		if caps := p.Capabilities(); caps.Dedupe || caps.Probe {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	effects, err := r.effects(ctx, `
		SELECT e.id FROM effect_attempt() e JOIN frozen_plan() p ON p.id = e.plan_id
		WHERE e.state = 'unknown' AND p.provider = ANY($1)
		ORDER BY e.updated_at LIMIT $2`, names, recoveryBatch)
	if err != nil {
		return err
	}
	return r.recoverAll(ctx, effects)
}

// recoverToolCalls recovers single effects whose lease ended without a
// settle, by their tool's policy (package toolcall): unknown for a person,
// or settled from the tool's probe; a deduplicating tool's attempt waits
// for the next begin, which performs it again with the same key.
func (r *Runner) recoverToolCalls(ctx context.Context) error {
	n, err := r.tools.RecoverDue(ctx, recoveryBatch)
	if n > 0 {
		r.cfg.Logger.Info("recovered single effects in doubt", "changed", n)
	}
	return err
}

func (r *Runner) effects(ctx context.Context, sql string, args ...any) ([]ledger.Effect, error) {
	rows, err := r.cfg.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	store := ledger.NewStore(r.cfg.Pool)
	out := make([]ledger.Effect, 0, len(ids))
	for _, id := range ids {
		e, err := store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Alert records what recovery refused in the campaign's trail, once per
// subject, which the approval service announces to the operators
// (executor.Alerter; approval.Service.Alert).
func (r *Runner) Alert(ctx context.Context, a executor.Alert) (bool, error) {
	if r.approval == nil {
		return false, errors.New("jobs: alerts go through a started runner")
	}
	return r.approval.Alert(ctx, a.CampaignID, a.Subject, a.Reason, map[string]any{"effects": a.Effects})
}

func (r *Runner) recoverAll(ctx context.Context, effects []ledger.Effect) error {
	var errs []error
	for _, e := range effects {
		res, err := r.exec.Recover(ctx, e)
		if err != nil {
			errs = append(errs, fmt.Errorf("recovering effect %d (%s): %w", e.ID, e.Key, err))
			continue
		}
		r.cfg.Logger.Info("recovered", "key", string(e.Key), "epoch", e.Epoch, "effect", e.ID, "outcome", res.Outcome)
	}
	return errors.Join(errs...)
}

// requeueDeadWorkersTargets puts back on the queue the targets of running
// campaigns whose jobs a dead process held, without waiting for River's
// rescuer: the stuck jobs no longer count as live, so the remainder
// includes their targets. When River later rescues them, their claims find
// the ledger settled and do nothing.
func (r *Runner) requeueDeadWorkersTargets(ctx context.Context) error {
	rows, err := r.cfg.Pool.Query(ctx, `
		SELECT DISTINCT c.id FROM river_job j JOIN campaign_record() c ON c.plan_id = (j.args ->> 'plan_id')::bigint
		WHERE j.kind = 'onceplan_effect' AND j.state = 'running' AND c.state = 'running'
		  AND NOT EXISTS (SELECT 1 FROM worker_alive($1::interval) w WHERE w.owner = `+jobOwner+`)`, r.timeout())
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		n, err := r.approval.RequeueRemainder(ctx, id, "a worker process died; its targets are requeued")
		if err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			r.cfg.Logger.Warn("requeued a dead worker's targets", "campaign", id, "jobs", n)
		}
	}
	return errors.Join(errs...)
}

// completeCheckSQL is true while a campaign's plan still has work in hand,
// all in one snapshot (one now(), so a process dying between two checks
// cannot slip through):
//   - a live job;
//   - an attempt still pending (its worker, or recovery, will settle it —
//     and recovery may free the key and enqueue the target again);
//   - a "running" job of a dead process whose target has no blocking row:
//     maintenance requeues such targets, and until it has, the campaign is
//     not finished.
var completeCheckSQL = `
SELECT EXISTS (SELECT 1 FROM river_job j
               WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND ` + liveJob + `)
    OR EXISTS (SELECT 1 FROM effect_attempt() e JOIN frozen_plan() p ON p.id = @plan
               JOIN list_target() t ON t.list_id = p.list_id AND t.key = e.key
               WHERE e.state = 'pending')
    OR EXISTS (SELECT 1 FROM river_job j JOIN frozen_plan() p ON p.id = @plan
               JOIN list_target() t ON t.list_id = p.list_id AND t.ordinal >= ` + jobFirst + ` AND t.ordinal < ` + jobEnd + `
               WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND j.state = 'running'
                 AND ` + notBlocked + `)`

// completeFinished marks running campaigns completed once their plan has
// no work in hand (completeCheckSQL). Unknown and failed targets do not hold
// a campaign open: they wait for a human or a resume, and the audit says
// the campaign does not hold yet.
func (r *Runner) completeFinished(ctx context.Context) error {
	ids, err := approval.Running(ctx, r.cfg.Pool)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		done, err := r.approval.CompleteIfDone(ctx, id, func(ctx context.Context, tx pgx.Tx, c approval.Campaign) (bool, error) {
			var open bool
			err := tx.QueryRow(ctx, completeCheckSQL, pgx.NamedArgs{"plan": c.PlanID, "owner_timeout": r.timeout()}).Scan(&open)
			return !open, err
		})
		if err != nil {
			errs = append(errs, err)
		} else if done {
			r.cfg.Logger.Info("campaign completed", "campaign", id)
		}
	}
	return errors.Join(errs...)
}
