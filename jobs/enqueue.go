package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// The statements of this package join River's tables, its own, to other
// packages' rows through the reads their owners publish in the schema
// (docs/ARCHITECTURE.md, "Where each rule lives"; migration 0030): the
// ledger's attempts (effect_attempt), the plan's targets and frozen plans
// (list_target, frozen_plan), the campaigns (campaign_record) and the
// workers' heartbeats (worker_heartbeat). PostgreSQL inlines each, so every
// statement keeps the plan it had with the tables named.

// unfinishedJob is the SQL condition for "job j is not finished": the
// predicate of the index river_job_onceplan_live (migration 0011), which
// only holds unfinished jobs. A query that looks jobs up by plan must say
// it, as written there, or the planner cannot use the index.
const unfinishedJob = `j.state NOT IN ('completed', 'cancelled', 'discarded')`

// liveJob is the SQL condition for "job j still stands for its target": not
// finished, and not a "running" job whose process is dead ($owner_timeout
// names the interval; worker_alive is the executor's rule, migration
// 0029). River will rescue such a job eventually; until it does, it must
// not stop the target from being enqueued again, nor keep its campaign
// from completing.
var liveJob = unfinishedJob + `
	AND (j.state <> 'running' OR EXISTS (SELECT 1 FROM worker_alive(@owner_timeout::interval) w WHERE w.owner = ` + jobOwner + `))`

// notBlocked is the SQL condition for "target t has no blocking ledger row
// at its key's current epoch, and was not recorded as suppressed for plan
// @plan" (a suppressed target is final for its plan: no job for it). Each
// rule is the ledger's, stated in the database (migrations 0027, 0029 and
// 0030): effect_attempt, effect_blocks, effect_current_epoch and
// target_suppressed_in.
const notBlocked = `NOT EXISTS (
	SELECT 1 FROM effect_attempt() f
	WHERE f.key = t.key AND effect_blocks(f.state)
	  AND f.epoch = (SELECT cur.epoch FROM effect_current_epoch(t.key) cur))
	AND NOT EXISTS (SELECT 1 FROM target_suppressed_in(@plan) ts WHERE ts.ordinal = t.ordinal)`

// DefaultEnqueueBatchSize is Enqueuer.BatchSize's default.
const DefaultEnqueueBatchSize = 10_000

// Enqueuer inserts a plan's jobs.
type Enqueuer struct {
	client *river.Client[pgx.Tx]
	// BatchSize bounds one InsertManyFastTx call (and the rows read per
	// round trip); a million-target plan goes in 100 batches. Default
	// DefaultEnqueueBatchSize.
	BatchSize int
	// OwnerTimeout: see Config.OwnerTimeout (a Runner's Enqueuer has its
	// Config's). Default executor.DefaultOwnerTimeout.
	OwnerTimeout time.Duration
	// WorkersPerQueue sizes the jobs' ranges (targetsPerJob): a Runner's
	// Enqueuer has its Config's. Default DefaultWorkersPerQueue.
	WorkersPerQueue int
}

// NewEnqueuer returns an Enqueuer on a River client (an insert-only client
// is enough).
func NewEnqueuer(client *river.Client[pgx.Tx]) *Enqueuer {
	return &Enqueuer{client: client, BatchSize: DefaultEnqueueBatchSize, OwnerTimeout: executor.DefaultOwnerTimeout, WorkersPerQueue: DefaultWorkersPerQueue}
}

// noLiveJob is the SQL condition for "target t has no live job of plan
// @plan".
var noLiveJob = `NOT EXISTS (
	SELECT 1 FROM river_job j
	WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND ` + jobCovers("t.ordinal") + `
	  AND ` + liveJob + `)`

func (e *Enqueuer) sql(cond string) string {
	return `
		SELECT t.ordinal FROM list_target() t
		WHERE t.list_id = @list AND ` + cond + ` AND ` + notBlocked + `
		  AND ` + noLiveJob + `
		ORDER BY t.ordinal LIMIT @limit`
}

// firstSQL is sql for a plan that has no live job (its first start, or a
// resume after its jobs finished): no live-job test to make. Besides being
// cheaper, it matters for speed at scale: within the start's one
// transaction, river_job's statistics do not know about the batches
// already inserted, and the planner probed it with a sequential scan per
// target — quadratic (100,000 targets took minutes).
func (e *Enqueuer) firstSQL(cond string) string {
	return `
		SELECT t.ordinal FROM list_target() t
		WHERE t.list_id = @list AND ` + cond + ` AND ` + notBlocked + `
		ORDER BY t.ordinal LIMIT @limit`
}

// untouchedSQL is the SQL condition that no target of plan @plan can be
// blocked (notBlocked holds for every one): no attempt exists at any key
// of its list, and none of its targets was recorded as suppressed. A
// list's keys are its campaign's (the key's event is the campaign: see
// package ledger), so an attempt at one was made by a plan of that
// campaign — found by effect_plan_target — or outside any plan, found by
// effect_outside_plan (few rows) and the list's unique index on key. A
// campaign's first start then reads its targets without probing the
// ledger for each: 1,000,000 probes were most of a million-target start.
const untouchedSQL = `
	NOT EXISTS (SELECT 1 FROM frozen_plan() q WHERE q.campaign_id = @campaign AND EXISTS (SELECT 1 FROM effect_attempt() f WHERE f.plan_id = q.id))
	AND NOT EXISTS (SELECT 1 FROM effect_attempt() f JOIN list_target() t ON t.list_id = @list AND t.key = f.key WHERE f.plan_id IS NULL)
	AND NOT EXISTS (SELECT 1 FROM target_suppressed_in(@plan) ts)`

// untouched reports untouchedSQL for p, in tx's view.
func untouched(ctx context.Context, db onceplan.DB, p plan.Plan) (bool, error) {
	var yes bool
	err := db.QueryRow(ctx, `SELECT `+untouchedSQL, pgx.NamedArgs{"campaign": p.CampaignID, "list": p.ListID, "plan": p.ID}).Scan(&yes)
	return yes, err
}

// hasLiveJobs reports whether plan p has a job that is not finished (in
// tx's view). Without one, no target can have a live job, and the
// live-job test can be left out.
func hasLiveJobs(ctx context.Context, db onceplan.DB, p plan.Plan) (bool, error) {
	var any bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job j
		WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = $1 AND `+unfinishedJob+`)`, p.ID).Scan(&any)
	return any, err
}

// EnqueueRemaining inserts, inside tx, a job for every target of p that
// has no blocking ledger row at its current epoch and no live job of p:
// targets already done (for instance under an earlier version of the
// campaign) get no job, and pressing resume twice enqueues nothing the
// second time. Consecutive targets share a job (ranges, MaxTargetsPerJob).
// It returns how many targets it enqueued. The ledger decides every effect
// regardless; this only keeps the queue free of no-op jobs.
func (e *Enqueuer) EnqueueRemaining(ctx context.Context, tx pgx.Tx, p plan.Plan) (int, error) {
	existing, err := hasLiveJobs(ctx, tx, p)
	if err != nil {
		return 0, err
	}
	query := e.firstSQL("t.ordinal > @after")
	if existing {
		query = e.sql("t.ordinal > @after")
	} else if fresh, err := untouched(ctx, tx, p); err != nil {
		return 0, err
	} else if fresh {
		query = `SELECT t.ordinal FROM list_target() t WHERE t.list_id = @list AND t.ordinal > @after ORDER BY t.ordinal LIMIT @limit`
	}
	return e.enqueueAll(ctx, tx, p, query)
}

// enqueueAll inserts jobs for the targets query selects (after @after, up
// to @limit at a time, in ordinal order), a batch at a time, and returns
// how many targets they carry.
func (e *Enqueuer) enqueueAll(ctx context.Context, tx pgx.Tx, p plan.Plan, query string) (int, error) {
	total, after := 0, 0
	for {
		params, last, err := e.collect(ctx, tx, p, query, pgx.NamedArgs{"after": after})
		if err != nil {
			return total, err
		}
		n, err := e.insert(ctx, tx, p, params)
		total += n
		if err != nil || n < e.BatchSize {
			return total, err
		}
		after = last
	}
}

// untriedSQL is the SQL condition that target t has no attempt at all at
// its key's current epoch: not claimed, not failed, not resolved — never
// tried. With a plan's jobs all finished and nothing pending, such a
// target (not held, not suppressed) was lost by the queue, never decided.
const untriedSQL = `NOT EXISTS (
	SELECT 1 FROM effect_attempt() f
	WHERE f.key = t.key AND f.epoch = (SELECT cur.epoch FROM effect_current_epoch(t.key) cur))`

// EnqueueUntried enqueues, inside tx, the targets of p that no job ever
// tried (untriedSQL) and that nothing holds (notBlocked), for a plan with
// no live job: what completing the campaign would otherwise leave unsent
// without a word. It returns how many it enqueued.
func (e *Enqueuer) EnqueueUntried(ctx context.Context, tx pgx.Tx, p plan.Plan) (int, error) {
	// Usually every target has an attempt of the campaign's: counted from
	// the plans' index (effect_plan_target), that is a short read even at
	// a million targets, where the walk of the list below is not.
	var tried bool
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT e.ordinal) >= $3 FROM effect_attempt() e
		WHERE e.plan_id IN (SELECT o.id FROM frozen_plan() o WHERE o.campaign_id = $1 AND o.list_id = $2)`,
		p.CampaignID, p.ListID, p.TargetCount).Scan(&tried); err != nil || tried {
		return 0, err
	}
	return e.enqueueAll(ctx, tx, p, e.firstSQL("t.ordinal > @after AND "+untriedSQL))
}

// stalledJobSQL is the SQL condition for "running job j belongs to a
// worker process that stopped heartbeating": silent for @silent, two
// heartbeats (a live process is never that late), whether or not it is
// past the owner timeout yet.
var stalledJobSQL = `j.state = 'running' AND NOT EXISTS (SELECT 1 FROM worker_alive(@silent::interval) w WHERE w.owner = ` + jobOwner + `)`

// CountRemaining counts, without writing, what EnqueueRemaining would
// enqueue for p now (Queue: the same conditions) and what running p sends
// (Left: with a live job or not), and the targets that
// running jobs of a stopped worker process still hold (Stalled): no live
// process will run those jobs, and maintenance requeues their targets by
// itself once the process has been silent for OwnerTimeout
// (requeueDeadWorkersTargets), RequeueIn from now; until then they count
// as live, so they are not in Queue. Queue reads the whole list; without
// queue it is left 0 and only the stalled jobs are read (the run page's
// live parts, polled every few seconds, show no button).
func (e *Enqueuer) CountRemaining(ctx context.Context, db onceplan.DB, p plan.Plan, queue bool) (approval.Remainder, error) {
	var r approval.Remainder
	existing, err := hasLiveJobs(ctx, db, p)
	if err != nil {
		return r, err
	}
	args := pgx.NamedArgs{
		"list": p.ListID, "plan": p.ID, "owner_timeout": e.OwnerTimeout.String(),
		"silent": (e.OwnerTimeout / HeartbeatsPerOwnerTimeout * 2).Round(time.Millisecond).String(),
	}
	if queue {
		query := `SELECT count(*), count(*) FROM list_target() t WHERE t.list_id = @list AND ` + notBlocked
		if existing {
			query = `SELECT count(*) FILTER (WHERE ` + noLiveJob + `), count(*) FROM list_target() t WHERE t.list_id = @list AND ` + notBlocked
		}
		if err := db.QueryRow(ctx, query, args).Scan(&r.Queue, &r.Left); err != nil {
			return r, err
		}
	}
	if !existing {
		return r, nil
	}
	// A stalled job whose target was requeued since (a newer unfinished
	// job) holds it no longer.
	var requeueIn, silentFor float64
	err = db.QueryRow(ctx, `
		WITH stalled AS (
		  SELECT j.id, `+jobFirst+` AS first, `+jobEnd+` AS "end", `+jobOwner+` AS owner FROM river_job j
		  WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND `+unfinishedJob+` AND `+stalledJobSQL+`)
		SELECT count(DISTINCT t.ordinal),
		       coalesce(extract(epoch FROM greatest(max(w.seen_at) + @owner_timeout::interval - now(), '0')), 0),
		       coalesce(extract(epoch FROM now() - max(w.seen_at)), 0)
		FROM stalled s
		JOIN list_target() t ON t.list_id = @list AND t.ordinal >= s.first AND t.ordinal < s."end"
		LEFT JOIN worker_heartbeat() w ON w.owner = s.owner
		WHERE `+notBlocked+`
		  AND NOT EXISTS (SELECT 1 FROM river_job j
		    WHERE j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND `+jobCovers("t.ordinal")+`
		      AND j.id > s.id AND `+unfinishedJob+`)`, args).Scan(&r.Stalled, &requeueIn, &silentFor)
	if r.Stalled > 0 {
		r.RequeueIn = time.Duration(requeueIn * float64(time.Second))
		r.SilentFor = time.Duration(silentFor * float64(time.Second))
	}
	return r, err
}

// failedForGoodSQL counts plan @plan's targets whose newest attempt at
// their key's current epoch failed and that no live job carries: nothing
// will retry them (their retries ran out, or the provider refused them
// for good) until a person resumes the campaign. It starts from the
// plan's failed attempts (effect_plan_target), so a plan without failures
// costs one short index range, not a walk of its list.
var failedForGoodSQL = `
	SELECT count(DISTINCT t.ordinal) FROM effect_attempt() e
	JOIN list_target() t ON t.list_id = @list AND t.ordinal = e.ordinal
	WHERE e.plan_id = @plan AND e.state = 'failed' AND e.epoch = (SELECT cur.epoch FROM effect_current_epoch(t.key) cur)
	  AND NOT EXISTS (SELECT 1 FROM effect_attempt() n WHERE n.key = e.key AND n.epoch = e.epoch AND n.id > e.id)
	  AND ` + notBlocked + ` AND ` + noLiveJob

// FailedForGood counts campaign c's targets (of its current plan) that
// failed and that no job will retry — a running job of a process silent
// for longer than this enqueuer's OwnerTimeout does not count as one: the
// "failed after their retries" that notifications tell operators about
// (notify.Config.FailedForGood).
func (e *Enqueuer) FailedForGood(ctx context.Context, db onceplan.DB, c approval.Campaign) (int, error) {
	if c.PlanID == 0 {
		return 0, nil
	}
	p, err := plan.GetPlan(ctx, db, c.PlanID)
	if err != nil {
		return 0, err
	}
	var n int
	err = db.QueryRow(ctx, failedForGoodSQL, pgx.NamedArgs{"list": p.ListID, "plan": p.ID, "owner_timeout": e.OwnerTimeout.String()}).Scan(&n)
	return n, err
}

// nextTriesSQL is, for each of @ordinals, the earliest time a live job of
// plan @plan carrying it is due (River's scheduled_at: a retry's time, a
// snooze's end; past for one waiting for a worker or running).
var nextTriesSQL = `
	SELECT o.ordinal, min(j.scheduled_at)
	FROM unnest(@ordinals::int[]) o(ordinal)
	JOIN river_job j ON j.kind = 'onceplan_effect' AND (j.args ->> 'plan_id')::bigint = @plan AND ` + jobCovers("o.ordinal") + `
	  AND ` + liveJob + `
	GROUP BY o.ordinal`

// NextTries says when each of ordinals of p is tried next by a live job
// (nextTriesSQL); a target no live job carries is left out: nothing will
// try it by itself until a resume. A running job of a process silent for
// longer than OwnerTimeout does not count (maintenance requeues its
// targets).
func (e *Enqueuer) NextTries(ctx context.Context, db onceplan.DB, p plan.Plan, ordinals []int) (map[int]time.Time, error) {
	out := make(map[int]time.Time, len(ordinals))
	if len(ordinals) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, nextTriesSQL, pgx.NamedArgs{"plan": p.ID, "ordinals": ordinals, "owner_timeout": e.OwnerTimeout.String()})
	if err != nil {
		return nil, err
	}
	var o int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&o, &at}, func() error {
		out[o] = at
		return nil
	})
	return out, err
}

// ProviderWorkers counts the live worker processes serving provider, alive
// within this enqueuer's OwnerTimeout (the workers').
func (e *Enqueuer) ProviderWorkers(ctx context.Context, db onceplan.DB, provider string) (int, error) {
	s, err := executor.ServingOf(ctx, db, e.OwnerTimeout, provider)
	return s.Live, err
}

// EnqueueFreed enqueues target ordinal of p, whose key recovery freed, as
// a job of its own with attempts River attempts, unless the ledger holds
// its key or it was recorded suppressed (notBlocked). It does so whatever
// job is live for the target: that job may have passed the target by while
// its key was held, and nothing else would send it; a job that reaches the
// target second finds it claimed, and the ledger keeps it to one effect.
func (e *Enqueuer) EnqueueFreed(ctx context.Context, tx pgx.Tx, p plan.Plan, ordinal, attempts int) (int, error) {
	params, _, err := e.collect(ctx, tx, p, e.firstSQL("t.ordinal = @ordinal"), pgx.NamedArgs{"ordinal": ordinal})
	if err != nil || len(params) == 0 {
		return 0, err
	}
	params[0].InsertOpts = &river.InsertOpts{MaxAttempts: max(attempts, 1)}
	return e.insert(ctx, tx, p, params)
}

func (e *Enqueuer) collect(ctx context.Context, tx pgx.Tx, p plan.Plan, sql string, args pgx.NamedArgs) ([]river.InsertManyParams, int, error) {
	args["list"], args["plan"], args["limit"] = p.ListID, p.ID, e.BatchSize
	args["owner_timeout"] = e.OwnerTimeout.String()
	rows, err := tx.Query(ctx, sql, args)
	if err != nil {
		return nil, 0, err
	}
	ordinals, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(ordinals) == 0 {
		return nil, 0, err
	}
	return ranges(p, ordinals, targetsPerJob(p.TargetCount, e.WorkersPerQueue)), ordinals[len(ordinals)-1], nil
}

// insert inserts the jobs and returns how many targets they carry.
func (e *Enqueuer) insert(ctx context.Context, tx pgx.Tx, p plan.Plan, params []river.InsertManyParams) (int, error) {
	if len(params) == 0 {
		return 0, nil
	}
	if _, err := e.client.InsertManyFastTx(ctx, tx, params); err != nil {
		return 0, fmt.Errorf("enqueueing plan %d: %w", p.ID, err)
	}
	targets := 0
	for _, j := range params {
		targets += max(j.Args.(EffectArgs).Count, 1)
	}
	return targets, nil
}
