package executor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/metrics"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Job is one planned target to execute (River's job, without River): the
// plan and the target's ordinal in it. The target's key is read from the
// frozen plan, never taken from the queue.
type Job struct {
	PlanID  int64
	Ordinal int
	// Count is how many consecutive targets the job carries, from Ordinal
	// on (PerformRange); 0 or 1 is one.
	Count int
	JobID int64
	// LastTry: the queue will not run this job again after a temporary
	// failure (its last attempt), so such a failure is final for the
	// target ("exhausted"), not one to retry.
	LastTry bool
}

// Action tells the queue what to do with the job after Perform.
type Action int

// Actions.
const (
	// Complete: nothing more to do for this job (settled, skipped, or left
	// to recovery or a human).
	Complete Action = iota + 1
	// Snooze: run the job again after Result.After (paused campaign,
	// provider busy or over quota).
	Snooze
	// Retry: a temporary failure; retry with backoff, bounded by the queue.
	Retry
)

// Result is Perform's verdict for the queue.
type Result struct {
	Action Action
	After  time.Duration // for Snooze
	Err    error         // for Retry: why
	// Outcome says what happened, for logs and tests.
	Outcome string
}

// QuotaPauser pauses a provider's queue until a time (package jobs does it
// with River's QueuePause, durably, for every process).
type QuotaPauser interface {
	PauseProvider(ctx context.Context, provider string, until time.Time) error
}

// Requeuer enqueues a job for one plan target again (after recovery freed
// its key).
type Requeuer interface {
	// RequeueTarget enqueues target ordinal of p again, with attempts
	// left, whatever job is live for it (see Executor.requeue).
	RequeueTarget(ctx context.Context, p plan.Plan, ordinal int, attempts int) error
}

// Alerter tells people that recovery refused to act on what it found
// recorded, and left attempts to a person (package jobs records the alert
// in the campaign's trail, which package notify announces to the
// operators, with the reason).
type Alerter interface {
	// Alert records a, once per campaign and subject: an alert of a
	// subject already recorded records nothing (recorded false).
	Alert(ctx context.Context, a Alert) (recorded bool, err error)
}

// Alert is what recovery refused, and why.
type Alert struct {
	CampaignID string
	// Subject names what was refused, the same every time recovery meets
	// it ("batch call 12"): a person is told once.
	Subject string
	// Reason says, in words, what was refused and why.
	Reason string
	// Effects are the attempts concerned.
	Effects []int64
}

// Defaults of Config.
const (
	// DefaultOwnerTimeout: a process silent this long is dead.
	DefaultOwnerTimeout = 30 * time.Second
	// DefaultPausedSnooze: how long a paused campaign's job waits before
	// it looks again.
	DefaultPausedSnooze = 5 * time.Second
)

// Config wires an Executor.
type Config struct {
	Pool      *pgxpool.Pool
	Providers *provider.Registry
	Logger    *slog.Logger
	// OwnerTimeout: a process that has not said it is alive for this long
	// is dead, and its pending attempts are recovered. Default
	// DefaultOwnerTimeout.
	OwnerTimeout time.Duration
	// PausedSnooze is how long a paused campaign's job waits before it
	// looks again. Default DefaultPausedSnooze.
	PausedSnooze time.Duration
	Pauser       QuotaPauser
	Requeuer     Requeuer
	// Alerter, when set, tells people what recovery refused (nil: the
	// log only).
	Alerter Alerter
	// QueueOf names a provider's queue, so a paused queue stops the jobs
	// already fetched from it too; nil means no such check.
	QueueOf func(provider string) string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// PublicURL is where the messages' unsubscribe links point (package
	// unsubscribe; suppression.ParsePublicURL's form). Default
	// suppression.DefaultPublicURL.
	PublicURL string
	// MaxAttempts bounds a target's attempts at its key and epoch that
	// failed or were in doubt (an "over quota" answer does not count):
	// recovery sends a freed target again only while it has attempts left,
	// and a job sent again carries the rest. Default DefaultMaxAttempts.
	MaxAttempts int
}

// DefaultMaxAttempts is Config.MaxAttempts' default.
const DefaultMaxAttempts = 8

// Executor performs effects for one process.
type Executor struct {
	cfg    Config
	links  *suppression.Links
	ledger *ledger.Store
	batch  *batcher
	owner  string
	crash  *crashPoint

	mu    sync.Mutex
	plans map[int64]*cachedPlan
	// refused are the batch calls this process's recovery refused, by id,
	// with why, once the campaigns were alerted: a stored call and its
	// plan never change, so neither does the verdict, and the next rounds
	// that meet its attempts skip deriving it again.
	refused map[int64]string
	// draining: the process is stopping (Drain); a job carrying several
	// targets starts no new one and hands the rest on.
	draining atomic.Bool
}

// Drain says this process is stopping: jobs that carry several targets
// finish the call in hand and hand the rest on (PerformRange), so a soft
// stop waits for one call per job, not for a whole range, and never has
// to cut a call short. Call it before stopping the queue.
func (e *Executor) Drain() { e.draining.Store(true) }

type cachedPlan struct {
	plan      plan.Plan
	templates *plan.Templates
}

// New returns an Executor with a fresh owner identity
// ("host/pid/random"): a restarted process is a new owner, so its
// predecessor's attempts are recognisably someone else's.
func New(cfg Config) (*Executor, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OwnerTimeout == 0 {
		cfg.OwnerTimeout = DefaultOwnerTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.PausedSnooze == 0 {
		cfg.PausedSnooze = DefaultPausedSnooze
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	e := &Executor{
		cfg:    cfg,
		links:  suppression.NewLinks(cfg.Pool, cfg.PublicURL),
		ledger: ledger.NewStore(cfg.Pool),
		batch:  newBatcher(cfg.Pool, gate, cfg.Logger),
		owner:  fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		plans:  map[int64]*cachedPlan{},

		refused: map[int64]string{},
	}
	var err error
	if e.crash, err = crashPointFromEnv(); err != nil {
		return nil, err
	}
	return e, nil
}

// gate is the claims' gate (docs/ARCHITECTURE.md, "The gate"): a plan target
// is claimed only while its campaign runs that plan and its provider's queue
// is not paused, and never while its address is suppressed (consent
// overrides the plan: the target is recorded as suppressed instead), all
// checked in the statement that claims it.
//
// Each rule is its owner's database function (migration 0027, inlined by
// PostgreSQL into the claim): campaign_running_plan (the campaign's),
// onceplan_paused_queue (River's queues) and target_suppression (the
// suppression list's, over the target's address).
var gate = ledger.Gate{
	Open: `EXISTS (SELECT 1 FROM campaign_running_plan() c WHERE c.campaign_id = r.campaign_id AND c.plan_id = r.plan_id)
	AND NOT EXISTS (SELECT 1 FROM onceplan_paused_queue() q WHERE q.name = r.queue)`,
	Suppressed: `(SELECT ts.suppression_id FROM target_suppression(r.plan_id, r.ordinal) ts)`,
}

func (e *Executor) queueOf(provider string) string {
	if e.cfg.QueueOf == nil {
		return ""
	}
	return e.cfg.QueueOf(provider)
}

// Owner is this process's identity in the ledger and in River.
func (e *Executor) Owner() string { return e.owner }

// OwnerTimeout is how long an owner may be silent before it counts as dead.
func (e *Executor) OwnerTimeout() time.Duration { return e.cfg.OwnerTimeout }

// Heartbeat records that this process is alive and which providers it
// serves (its registry's); call it every few seconds (well inside
// OwnerTimeout) for as long as the process performs effects. It then
// refreshes this process's gauge of live workers per provider
// (metrics.LiveWorkers) from the table, as every process sees it.
func (e *Executor) Heartbeat(ctx context.Context) error {
	host, _ := os.Hostname()
	served := e.cfg.Providers.Names()
	if served == nil {
		served = []string{}
	}
	if _, err := e.cfg.Pool.Exec(ctx, `
		INSERT INTO worker_process (owner, host, pid, providers) VALUES ($1, $2, $3, $4)
		ON CONFLICT (owner) DO UPDATE SET seen_at = now(), providers = excluded.providers`,
		e.owner, host, os.Getpid(), served); err != nil {
		return err
	}
	live, err := LiveWorkers(ctx, e.cfg.Pool, e.cfg.OwnerTimeout, served...)
	if err != nil {
		// The heartbeat itself is recorded: only the gauge is stale.
		e.cfg.Logger.Warn("counting live workers per provider", "err", err)
		return nil
	}
	metrics.SetLiveWorkers(live)
	return nil
}

// LiveWorkers counts, per provider, the worker processes alive now
// (worker_alive within ownerTimeout) whose heartbeat says they serve it.
// It counts every provider a process's heartbeat ever named, every
// provider a running campaign sends through and every provider named
// here: those no live process serves, at 0 — the targets of a campaign on
// such a provider wait for nothing.
func LiveWorkers(ctx context.Context, db onceplan.DB, ownerTimeout time.Duration, providers ...string) (map[string]int, error) {
	return liveWorkers(ctx, db, ownerTimeout, true, providers)
}

// liveWorkers is LiveWorkers; every says to count every provider known,
// not only those named.
func liveWorkers(ctx context.Context, db onceplan.DB, ownerTimeout time.Duration, every bool, providers []string) (map[string]int, error) {
	providers = slices.Clone(providers)
	if every {
		// The providers running campaigns send through: approval's to say.
		running, err := approval.RunningProviders(ctx, db)
		if err != nil {
			return nil, err
		}
		providers = append(providers, running...)
	}
	if providers == nil {
		providers = []string{}
	}
	rows, err := db.Query(ctx, `
		SELECT n.name, (SELECT count(*) FROM worker_process p
		                WHERE n.name = ANY (p.providers)
		                  AND EXISTS (SELECT 1 FROM worker_alive($1::interval) w WHERE w.owner = p.owner))
		FROM (SELECT unnest($2::text[])
		      UNION SELECT unnest(providers) FROM worker_process WHERE $3) n (name)`,
		ownerTimeout.String(), providers, every)
	if err != nil {
		return nil, err
	}
	live := map[string]int{}
	var (
		name string
		n    int
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		live[name] = n
		return nil
	})
	return live, err
}

// Serving is how many live worker processes serve a provider.
type Serving struct {
	Provider string
	Live     int
}

// ServingOf answers how many live worker processes (worker_alive within
// ownerTimeout) serve provider, as their heartbeats say: the workflow's
// approval.Service.Serving asks it, through the enqueuer that knows the
// workers' owner timeout.
func ServingOf(ctx context.Context, db onceplan.DB, ownerTimeout time.Duration, provider string) (Serving, error) {
	live, err := liveWorkers(ctx, db, ownerTimeout, false, []string{provider})
	return Serving{Provider: provider, Live: live[provider]}, err
}

// Close stops the group-commit loops, after answering what is queued. Call
// it when no Perform runs any more.
func (e *Executor) Close() { e.batch.close() }

// Retire says this process stops performing effects (a clean shutdown):
// its attempts, all settled by then, need no recovery wait.
func (e *Executor) Retire(ctx context.Context) error {
	_, err := e.cfg.Pool.Exec(ctx, `DELETE FROM worker_process WHERE owner = $1`, e.owner)
	return err
}

func (e *Executor) planFor(ctx context.Context, id int64) (*cachedPlan, error) {
	e.mu.Lock()
	cp := e.plans[id]
	e.mu.Unlock()
	if cp != nil {
		return cp, nil
	}
	p, err := plan.GetPlan(ctx, e.cfg.Pool, id)
	if err != nil {
		return nil, fmt.Errorf("plan %d: %w", id, err)
	}
	t, err := p.Payload.Compile()
	if err != nil {
		return nil, fmt.Errorf("plan %d no longer compiles: %w", id, err)
	}
	cp = &cachedPlan{plan: p, templates: t}
	e.mu.Lock()
	if len(e.plans) > 256 { // plans are immutable; the cache only bounds memory
		clear(e.plans)
	}
	e.plans[id] = cp
	e.mu.Unlock()
	return cp, nil
}

// campaignGate says whether a campaign's job may claim now.
//
// With a queue name it also says no while that queue is paused: River
// stops fetching from a paused queue, but jobs fetched before the pause
// (up to the queue's workers, in every process) would otherwise go on
// calling a provider that just answered "over quota".
//
// The campaign is approval's to read (approval.GetCampaign); the queue's
// pause is River's, asked through onceplan_paused_queue (migration 0027).
func (e *Executor) campaignGate(ctx context.Context, p plan.Plan, queue string) (Result, bool, error) {
	c, err := approval.GetCampaign(ctx, e.cfg.Pool, p.CampaignID)
	if errors.Is(err, onceplan.ErrNotFound) {
		return Result{Action: Complete, Outcome: "campaign gone"}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	switch {
	case c.PlanID != p.ID:
		// A newer version was approved: its own jobs carry on.
		return Result{Action: Complete, Outcome: "superseded"}, false, nil
	case c.State == approval.StateRunning:
		var queuePaused bool
		if err := e.cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM onceplan_paused_queue() q WHERE q.name = $1::text)`,
			queue).Scan(&queuePaused); err != nil {
			return Result{}, false, err
		}
		if queuePaused {
			return Result{Action: Snooze, After: e.cfg.PausedSnooze, Outcome: "provider paused"}, false, nil
		}
		return Result{}, true, nil
	case c.State == approval.StatePaused:
		return Result{Action: Snooze, After: e.cfg.PausedSnooze, Outcome: "paused"}, false, nil
	default:
		// Cancelled, or edited back into a draft: end without claiming.
		return Result{Action: Complete, Outcome: "campaign " + string(c.State)}, false, nil
	}
}

// Perform executes one planned target, in the order of
// docs/ARCHITECTURE.md, "Executing one effect".
func (e *Executor) Perform(ctx context.Context, j Job) (Result, error) {
	cp, prov, res, err := e.prepare(ctx, j)
	if err != nil || prov == nil {
		return res, err
	}
	req, key, err := e.request(ctx, cp, j.Ordinal, "", 0)
	if err != nil {
		return Result{}, err
	}
	return e.perform(ctx, j, cp, prov, req, key, nil, nil)
}

// handover is what a target's answer commit brought the job's next target
// (nextTarget): its pending row, committed in the same transaction, and
// the provider slot the answered call held, kept for it (Renew). That
// target is then called at once: nothing may come between its claim and
// its call.
type handover struct {
	eff     ledger.Effect
	release func()
}

// nextTarget is a job's next target, offered to call so that its claim can
// go into the commit of this target's answer (docs/ARCHITECTURE.md, "A job
// of several targets"): one commit and one wait per effect instead of two.
// call fills in got when it did.
//
// The claim is made only while the job is still inside the budget for
// starting targets (started, budget: PerformRange's): a call answered
// late, near the end of the job's time, must not claim a target whose
// own call would then have less than the rest of the job's time — the
// job's deadline could cut that call off before its request is written
// (a failed attempt for nothing) or after (an unknown for nothing).
type nextTarget struct {
	cr      ledger.ClaimRequest
	started time.Time
	budget  time.Duration
	got     *handover
}

// prepare finds a job's plan and provider. A provider this process does
// not serve is a Retry (nil provider): configuration, not the target, so
// fixing --provider resumes it.
func (e *Executor) prepare(ctx context.Context, j Job) (*cachedPlan, provider.Provider, Result, error) {
	cp, err := e.planFor(ctx, j.PlanID)
	if err != nil {
		return nil, nil, Result{}, err
	}
	prov, ok := e.cfg.Providers.Get(cp.plan.Provider)
	if !ok {
		return nil, nil, Result{Action: Retry, Err: fmt.Errorf("provider %q is not configured in this process", cp.plan.Provider)}, nil
	}
	return cp, prov, Result{}, nil
}

// claimRequest is the claim of job j's target (one target) under key.
func (e *Executor) claimRequest(j Job, cp *cachedPlan, prov provider.Provider, key ledger.Key) ledger.ClaimRequest {
	return ledger.ClaimRequest{
		ClaimParams: ledger.ClaimParams{Key: key, Owner: e.owner, JobID: j.JobID, PlanID: j.PlanID, Ordinal: j.Ordinal},
		Campaign:    cp.plan.CampaignID, Queue: e.queueOf(prov.Name()),
	}
}

// perform is Perform from the wait for the provider on, for a rendered
// request (req, for the target's key). With pre, the target was claimed in
// the previous target's answer commit and is called at once, in the slot
// that call kept; with next, this target's answer commit may carry the
// next target's claim (call).
func (e *Executor) perform(ctx context.Context, j Job, cp *cachedPlan, prov provider.Provider, req provider.Request, key ledger.Key, pre *handover, next *nextTarget) (Result, error) {
	// The slot goes to the next target when call hands it over.
	keep := func(release func()) {
		if next == nil || next.got == nil {
			release()
		}
	}
	if pre != nil {
		defer keep(pre.release)
		e.crash.at(pointAfterClaim)
		req.Epoch = pre.eff.Epoch
		e.logClaimed(ctx, cp.plan, j, pre.eff)
		return e.call(ctx, prov, req, pre.eff, ledger.ResponseSend, !j.LastTry, pre.release, next)
	}
	// Before the claim: everything that can wait. A crash here leaves no
	// ledger row; the job simply runs again.
	started := time.Now()
	release, ok, err := acquire(ctx, prov, started)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{Action: Snooze, After: busySnooze, Outcome: "provider busy"}, nil
	}
	defer keep(release)
	e.crash.at(pointBeforeClaim)

	// The common case: the campaign runs and the key is free. The claim
	// batch checks the campaign gate in the same statement.
	cr := e.claimRequest(j, cp, prov, key)
	if eff, won, err := e.batch.claim(ctx, cr); err != nil {
		return Result{}, err
	} else if won {
		e.crash.at(pointAfterClaim)
		req.Epoch = eff.Epoch
		e.logClaimed(ctx, cp.plan, j, eff)
		return e.call(ctx, prov, req, eff, ledger.ResponseSend, !j.LastTry, release, next)
	}

	// The batch did not claim: the same statement for this row alone,
	// gate included, says why.
	claim, err := e.ledger.ClaimOne(ctx, cr, gate)
	if err != nil {
		return Result{}, err
	}
	if claim.Outcome == ledger.ClaimSuppressed {
		e.cfg.Logger.InfoContext(ctx, "the target's address is suppressed; it is not sent",
			"campaign", cp.plan.CampaignID, "plan", j.PlanID, "ordinal", j.Ordinal, "key", string(key), "suppression", claim.SuppressionID)
		return Result{Action: Complete, Outcome: "suppressed"}, nil
	}
	if claim.Outcome == ledger.ClaimGateClosed {
		res, open, err := e.campaignGate(ctx, cp.plan, cr.Queue)
		if err == nil && open {
			// Reopened since the claim looked: look again soon.
			res = Result{Action: Snooze, After: time.Second, Outcome: "campaign gate changed"}
		}
		return res, err
	}
	if claim.Outcome != ledger.ClaimWon && !e.ownAttempt(ctx, cp.plan, claim.Effect) {
		// Never a second effect on the key; and this one is not the
		// target's, so the audit counts the target missing (outside the
		// plan) for a person to look at.
		e.cfg.Logger.WarnContext(ctx, "the target's key is held by a ledger row that is not the campaign's own; the target is not sent",
			"campaign", cp.plan.CampaignID, "plan", j.PlanID, "ordinal", j.Ordinal, "key", string(key),
			"effect", claim.Effect.ID, "state", claim.Effect.State, "effect_plan", claim.Effect.PlanID)
		return Result{Action: Complete, Outcome: "held outside the plan"}, nil
	}
	switch claim.Outcome {
	case ledger.ClaimDone:
		return Result{Action: Complete, Outcome: "already done"}, nil
	case ledger.ClaimStranded:
		return Result{Action: Complete, Outcome: "stranded"}, nil
	case ledger.ClaimInDoubt:
		// Recovery takes a slot of its own to send again: holding this
		// one meanwhile would wait on itself when the provider allows one
		// call at a time, until the job's deadline, on every retry.
		release()
		return e.inDoubt(ctx, j, prov, cp, claim.Effect)
	}
	e.crash.at(pointAfterClaim)
	req.Epoch = claim.Effect.Epoch
	e.logClaimed(ctx, cp.plan, j, claim.Effect)
	return e.call(ctx, prov, req, claim.Effect, ledger.ResponseSend, !j.LastTry, release, next)
}

// ownAttempt reports whether attempt eff was made for the campaign of p: by
// p, or by another version's plan of the same campaign (keys do not depend
// on the text). Rows made outside any plan, or for another campaign, never
// count as a target's effect (docs/ARCHITECTURE.md, "The guarantee against
// the server's own role").
func (e *Executor) ownAttempt(ctx context.Context, p plan.Plan, eff ledger.Effect) bool {
	if eff.PlanID == p.ID {
		return true
	}
	if eff.PlanID == 0 {
		return false
	}
	other, err := e.planFor(ctx, eff.PlanID)
	return err == nil && other.plan.CampaignID == p.CampaignID
}

// logClaimed logs a claim at debug level. The check comes first: this is
// the path of every effect, and building a logger with the job's
// attributes costs more than the rest of the Go side of a claim.
func (e *Executor) logClaimed(ctx context.Context, p plan.Plan, j Job, eff ledger.Effect) {
	if e.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		e.cfg.Logger.Debug("claimed", "campaign", p.CampaignID, "plan", j.PlanID, "ordinal", j.Ordinal, "key", string(eff.Key),
			"job", j.JobID, "effect", eff.ID, "epoch", eff.Epoch)
	}
}

// busySnooze is how long a job that could not get the provider in time
// waits before it tries again.
const busySnooze = time.Second

// acquire waits for the provider's rate limit and a concurrency slot, but
// for at most half of the time the job had when it started (at started):
// the other half is for the call and for recording its answer. Without
// that bound, a job that waited long behind a slow or rate-limited
// provider would claim with little time left, and its deadline would cut
// off a call the provider was answering — an effect made unknown for
// nothing (internal/faulttest, TestProviderSlow). When the wait runs out,
// ok is false and the job should snooze: a busy provider is not a failed
// attempt and must not use up the job's retries. Without a deadline (a
// maintenance round) it waits as long as ctx allows. release may be
// called more than once (call releases the slot early, the caller's defer
// again); only the first call releases.
func acquire(ctx context.Context, prov provider.Provider, started time.Time) (release func(), ok bool, err error) {
	wait := ctx
	if deadline, has := ctx.Deadline(); has {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, started.Add(deadline.Sub(started)/2))
		defer cancel()
	}
	release, err = prov.Acquire(wait)
	switch {
	case err == nil:
		return sync.OnceFunc(release), true, nil
	case ctx.Err() == nil:
		// Our share of the wait ran out (or the rate limit would not
		// have a token before it), not the job.
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// request renders the message for a plan target. The effect's key is key,
// or, when key is empty (a first attempt), the target's key in the frozen
// plan, which request returns.
func (e *Executor) request(ctx context.Context, cp *cachedPlan, ordinal int, key ledger.Key, epoch int) (provider.Request, ledger.Key, error) {
	ts, err := e.batch.targets(ctx, cp.plan.ListID, ordinal, 1)
	if err != nil {
		return provider.Request{}, "", fmt.Errorf("target %d of plan %d: %w", ordinal, cp.plan.ID, err)
	}
	return e.render(ctx, cp, ordinal, ts[0], key, epoch)
}

// render is request for a target already read (t, at ordinal).
func (e *Executor) render(ctx context.Context, cp *cachedPlan, ordinal int, t targetRes, key ledger.Key, epoch int) (provider.Request, ledger.Key, error) {
	if t.err != nil {
		return provider.Request{}, "", fmt.Errorf("target %d of plan %d: %w", ordinal, cp.plan.ID, t.err)
	}
	if key == "" {
		key = ledger.Key(t.key)
	}
	// The link is a function of the campaign and the address alone, so a
	// resend for recovery renders the same message.
	var link string
	if cp.plan.ListUnsubscribe {
		var err error
		if link, err = e.links.URL(ctx, cp.plan.CampaignID, t.to); err != nil {
			return provider.Request{}, "", fmt.Errorf("unsubscribe link of target %d of plan %d: %w", ordinal, cp.plan.ID, err)
		}
	}
	msg, err := cp.templates.RenderWithLink(t.to, t.vars, link)
	if err != nil {
		return provider.Request{}, "", fmt.Errorf("rendering target %d of plan %d: %w", ordinal, cp.plan.ID, err)
	}
	return provider.Request{Key: string(key), Epoch: epoch, Target: t.to, Message: msg}, key, nil
}

// call performs the provider call for a committed pending row and records
// and settles its answer.
//
// The provider slot (release) is held until the answer is committed, so that
// a crash never leaves more effects in doubt than the provider's
// concurrency: at most that many calls are out without a recorded answer;
// and, when the answer is "over quota", until the provider's queue is
// paused, so that no call of this process follows the answer that said stop.
// The raw answer and its settle are one commit (docs/ARCHITECTURE.md, "Group
// commit"): the answer is classified first, and a classification that fails
// still commits the raw bytes, with the row unknown for a person (classify).
//
// With next (a job's next target), when this target is finished and the
// provider lets the slot be kept for one more call now (Renew), the next
// target's claim goes into the same commit; if it is claimed, the slot is
// handed over (next.got) instead of released, and the caller calls that
// target at once. A crash before this commit is, for the next target, a
// crash before its claim, and for this one a crash after its send.
func (e *Executor) call(ctx context.Context, prov provider.Provider, req provider.Request, eff ledger.Effect, kind ledger.ResponseKind, retry bool, release func(), next *nextTarget) (Result, error) {
	sent := time.Now()
	raw, err := prov.Send(ctx, req)
	metrics.CallSeconds.WithLabelValues(prov.Name(), string(kind)).Observe(time.Since(sent).Seconds())
	if err != nil {
		// Nothing left the process: the pending row is ours to settle.
		release()
		raw = []byte("onceplan: not sent: " + err.Error())
		failure, reason := e.temporary(ctx, eff, retry, true, "not sent: "+err.Error())
		p := &ledger.SettleParams{EffectID: eff.ID, State: ledger.StateFailed, Reason: reason, Failure: failure}
		if _, err := e.batch.answer(eff.ID, kind, raw, p, nil); err != nil {
			return Result{}, err
		}
		return Result{Action: Retry, Err: err, Outcome: "not sent"}, nil
	}
	e.crash.at(pointAfterSend)
	// The answer is durable before anything acts on it. A cancelled job
	// context must not lose an answer the provider already gave.
	v := classify(prov, raw)
	p, res := e.judge(ctx, eff, v, retry)
	var nextClaim *ledger.ClaimRequest
	if next != nil && res.Action == Complete && ctx.Err() == nil && e.goOn(next.started, next.budget) && prov.Renew() {
		e.crash.at(pointBeforeClaim)
		nextClaim = &next.cr
	}
	claimed, err := e.batch.answer(eff.ID, kind, raw, p, nextClaim)
	if err != nil {
		release()
		return Result{}, err
	}
	e.crash.at(pointAfterRaw)
	e.settled(context.WithoutCancel(ctx), prov, p, v)
	if claimed.won {
		next.got = &handover{eff: claimed.eff, release: release}
		return res, nil
	}
	release()
	return res, nil
}

// classify is prov.Classify, made safe: an answer it cannot classify (it
// panics) is unknown, for a person to read in the recorded raw answer —
// never lost, never guessed.
func classify(prov provider.Provider, raw []byte) (v provider.Verdict) {
	defer func() {
		if r := recover(); r != nil {
			v = provider.Verdict{Outcome: provider.OutcomeUnknown,
				Reason: fmt.Sprintf("classifying %s's answer failed (%v); the raw answer is recorded for a person to read", prov.Name(), r)}
		}
	}()
	return prov.Classify(raw)
}

// settle commits a provider's verdict on a pending row whose answer is
// already recorded (recovery). A temporary failure puts the target back
// on the queue while it has attempts left (afterRecovery).
func (e *Executor) settle(ctx context.Context, prov provider.Provider, cp *cachedPlan, eff ledger.Effect, v provider.Verdict) (Result, error) {
	left, err := e.attemptsLeft(ctx, eff)
	if err != nil {
		return Result{}, err
	}
	p, res := e.judge(ctx, eff, v, left > 0)
	if p == nil {
		return res, nil
	}
	if err := e.batch.settle(*p); err != nil {
		return Result{}, err
	}
	e.settled(ctx, prov, p, v)
	return e.afterRecovery(ctx, cp, eff, res, left)
}

// attemptsLeft is how many more attempts target eff may have
// (Config.MaxAttempts, "over quota" answers not counted; eff included).
func (e *Executor) attemptsLeft(ctx context.Context, eff ledger.Effect) (int, error) {
	made, err := e.ledger.CountedAttempts(ctx, eff.Key, eff.Epoch)
	return max(e.cfg.MaxAttempts-made, 0), err
}

// afterRecovery is what a recovery that settled eff with res does next.
// Recovery runs outside the target's job (maintenance), or in a job that
// found the target in doubt; either way no job will try the target again
// on its own, so a temporary failure or an "over quota" answer requeues
// it, with the attempts it has left.
func (e *Executor) afterRecovery(ctx context.Context, cp *cachedPlan, eff ledger.Effect, res Result, left int) (Result, error) {
	switch {
	case res.Action == Retry && left > 0:
		return e.requeue(ctx, cp, eff, left)
	case res.Action == Snooze && res.Outcome == "quota":
		return e.requeue(ctx, cp, eff, max(left, 1))
	}
	return res, nil
}

// temporary is the failure and reason of a temporary failure of eff: one
// to try again when retry (the queue runs the target again), else final
// for the target, and the reason says after how many attempts. notSent
// says that this attempt never reached the provider (Verdict.NotSent): it
// is recorded (unsent), and on the last try, when no earlier attempt at
// the key and epoch reached the provider either, the target's ending is
// unreached — "never reached the provider" is said only where it is true
// of every attempt (docs/ARCHITECTURE.md, "Failures: final or not"; the
// database holds the same rule). When the earlier attempts cannot be read,
// the ending is exhausted, which is never false.
func (e *Executor) temporary(ctx context.Context, eff ledger.Effect, retry, notSent bool, reason string) (ledger.Failure, string) {
	switch {
	case retry && notSent:
		return ledger.FailureUnsent, reason
	case retry:
		return ledger.FailureRetry, reason
	}
	tries := plural(eff.Attempt, "attempt", "attempts")
	if notSent {
		only, err := e.ledger.OnlyUnsentBefore(context.WithoutCancel(ctx), eff.Key, eff.Epoch, eff.ID)
		if err == nil && only {
			return ledger.FailureUnreached, fmt.Sprintf("%s (never reached the provider; no retries left after %s)", reason, tries)
		}
		if err != nil {
			e.cfg.Logger.Warn("reading a target's earlier attempts; its ending is said as exhausted", "key", eff.Key, "epoch", eff.Epoch, "err", err)
		}
	}
	return ledger.FailureExhausted, fmt.Sprintf("%s (no retries left after %s)", reason, tries)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// judge turns a provider's verdict on a pending row into the settle to
// commit (nil: the row stays pending) and the queue's next step; retry
// says whether a temporary failure is tried again (temporary).
func (e *Executor) judge(ctx context.Context, eff ledger.Effect, v provider.Verdict, retry bool) (*ledger.SettleParams, Result) {
	p := ledger.SettleParams{EffectID: eff.ID, Receipt: v.Receipt, Reason: v.Reason}
	res := Result{Action: Complete, Outcome: string(v.Outcome)}
	switch v.Outcome {
	case provider.OutcomeDone:
		p.State = ledger.StateDone
		if p.Receipt == "" {
			p.Receipt = "accepted"
		}
	case provider.OutcomeStranded:
		p.State = ledger.StateStranded
	case provider.OutcomeUnknown:
		p.State = ledger.StateUnknown
	case provider.OutcomeFailed:
		p.State, p.Failure = ledger.StateFailed, ledger.FailureRejected
		if v.Retryable {
			p.Failure, p.Reason = e.temporary(ctx, eff, retry, v.NotSent, cmp.Or(v.Reason, string(v.Outcome)))
			res = Result{Action: Retry, Err: errors.New(v.Reason), Outcome: "failed (will retry)"}
		}
	case provider.OutcomeQuota:
		// Not the target's failure: the provider's queue pauses, and the
		// target is sent again after it, whatever its attempts.
		p.State, p.Failure = ledger.StateFailed, ledger.FailureQuota
		res = Result{Action: Snooze, After: v.RetryAfter, Outcome: "quota"}
	case provider.OutcomeRetryLater:
		// The provider is still working on this effect id: leave the row
		// pending and ask again later (recovery of our own pending row).
		return nil, Result{Action: Snooze, After: v.RetryAfter, Outcome: "retry later"}
	default:
		p.State = ledger.StateUnknown
		p.Reason = fmt.Sprintf("unclassified provider answer %q", v.Outcome)
	}
	if p.Reason == "" && p.State != ledger.StateDone {
		p.Reason = string(v.Outcome)
	}
	return &p, res
}

// settled is what follows a committed settle p (nil: none): the metric,
// and for "over quota" the pause of the provider's queue.
func (e *Executor) settled(ctx context.Context, prov provider.Provider, p *ledger.SettleParams, v provider.Verdict) {
	if p == nil {
		return
	}
	if v.Outcome == provider.OutcomeQuota && e.cfg.Pauser != nil {
		if err := e.cfg.Pauser.PauseProvider(ctx, prov.Name(), e.cfg.Now().Add(v.RetryAfter)); err != nil {
			e.cfg.Logger.Error("pausing provider queue", "provider", prov.Name(), "err", err)
		}
	}
	metrics.Settled.WithLabelValues(prov.Name(), string(p.State)).Inc()
}

// inDoubt handles a claim that found a pending or unknown row.
func (e *Executor) inDoubt(ctx context.Context, j Job, prov provider.Provider, cp *cachedPlan, eff ledger.Effect) (Result, error) {
	if eff.State == ledger.StatePending {
		mine := j.JobID != 0 && eff.JobID == j.JobID
		if !mine {
			alive, err := e.ownerAlive(ctx, eff.Owner)
			if err != nil {
				return Result{}, err
			}
			if alive {
				// Another live worker is on it: it settles, not us.
				return Result{Action: Complete, Outcome: "in flight elsewhere"}, nil
			}
		}
	}
	// A job's recovery waits for the provider's turn within the job's
	// time, as its own send would.
	r, err := e.recover(ctx, prov, cp, eff, true)
	if err != nil {
		return Result{}, err
	}
	return r, nil
}

// ownerAlive reports whether the worker process owner is alive: among the
// database's worker_alive(within) (migration 0029), the processes whose
// heartbeat in worker_process is younger than within, this executor's
// OwnerTimeout. An attempt or a running job whose owner is not alive is in
// doubt, and recovery takes it. Other packages' statements ask
// worker_alive too, as "EXISTS (SELECT 1 FROM worker_alive(...) w WHERE
// w.owner = ...)": PostgreSQL inlines it there, and an EXISTS whose
// condition on the outer row is in its WHERE can still become a join.
func (e *Executor) ownerAlive(ctx context.Context, owner string) (bool, error) {
	if owner == e.owner {
		return true, nil
	}
	var alive bool
	err := e.cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_alive($2::interval) w WHERE w.owner = $1)`, owner, e.cfg.OwnerTimeout.String()).Scan(&alive)
	return alive, err
}

// Recover settles an attempt left pending by a dead owner, or an unknown
// one, as far as the provider's capabilities allow (see the package doc).
// It is what maintenance calls for rows no job is looking at, and it never
// waits for the provider's turn (docs/ARCHITECTURE.md, "Executing one
// effect"): a recovery that would send again takes a turn only when one is
// free now, and otherwise answers Snooze ("provider busy") for the next
// round — so that no provider's schedule holds up a maintenance round, and
// the other providers' recoveries and campaigns with it.
func (e *Executor) Recover(ctx context.Context, eff ledger.Effect) (Result, error) {
	if eff.PlanID == 0 {
		return Result{Action: Complete, Outcome: "not a plan effect"}, nil
	}
	cp, err := e.planFor(ctx, eff.PlanID)
	if err != nil {
		return Result{}, err
	}
	prov, ok := e.cfg.Providers.Get(cp.plan.Provider)
	if !ok {
		return Result{}, fmt.Errorf("provider %q is not configured in this process", cp.plan.Provider)
	}
	return e.recover(ctx, prov, cp, eff, false)
}

// recover is Recover; mayWait says whether it may wait for the provider's
// turn before sending again (recoveryTurn).
func (e *Executor) recover(ctx context.Context, prov provider.Provider, cp *cachedPlan, eff ledger.Effect, mayWait bool) (Result, error) {
	// An attempt a batch call carried shares the call's fate: it is never
	// sent again on its own.
	c, pos, inCall, err := e.callOf(ctx, eff)
	if err != nil {
		return Result{}, err
	}
	if inCall {
		res, handled, err := e.recoverCall(ctx, prov, cp, eff, c, pos, mayWait)
		if handled || err != nil {
			return res, err
		}
	}
	caps := prov.Capabilities()
	log := e.cfg.Logger.With("key", string(eff.Key), "epoch", eff.Epoch, "effect", eff.ID, "state", string(eff.State), "provider", prov.Name())
	if eff.State == ledger.StatePending && !inCall {
		// The worker may have died after committing the provider's answer
		// but before settling: the answer is there, so settle from it.
		responses, err := e.ledger.Responses(ctx, eff.ID)
		if err != nil {
			return Result{}, err
		}
		if n := len(responses); n > 0 && responses[n-1].Kind != ledger.ResponseProbe {
			v := classify(prov, responses[n-1].Body)
			if v.Outcome != provider.OutcomeRetryLater {
				log.Info("recovering from the recorded provider answer", "outcome", string(v.Outcome))
				return e.settle(context.WithoutCancel(ctx), prov, cp, eff, v)
			}
		}
	}
	// A dedupe key, and a probe, hold only within the provider's window,
	// measured from the first call with the effect id (docs/ARCHITECTURE.md,
	// "What each provider guarantees after a crash"): past
	// it, a re-send could be a second effect and "not found" proves
	// nothing.
	first := eff.CreatedAt
	if eff.Attempt > 1 && (caps.DedupeWindow > 0 || caps.ProbeRetention > 0) {
		var err error
		if first, err = e.ledger.FirstAttemptAt(ctx, eff.Key, eff.Epoch); err != nil {
			return Result{}, err
		}
	}
	now := e.cfg.Now()
	// Recovery goes through the gate a first claim does (docs/
	// ARCHITECTURE.md, "The gate"): nothing is sent again while the
	// campaign is paused, and never once it no longer runs this plan or
	// the address was suppressed since. A probe sends nothing. The gate
	// is checked before the wait for the provider's turn (no turn is spent
	// on a closed gate) and again after it, with nothing left to wait for
	// between that check and the send.
	resend, closed := caps.CanResend(first, now) && !inCall, ""
	gateClosed := func() (Result, bool, error) {
		res, open, why, err := e.recoveryGate(ctx, prov, cp, eff)
		switch {
		case err != nil:
			return Result{}, true, err
		case !open && res.Action == Snooze:
			return res, true, nil
		case !open:
			resend, closed = false, why
		}
		return Result{}, false, nil
	}
	if resend {
		if res, stop, err := gateClosed(); stop {
			return res, err
		}
	}
	var req provider.Request
	var release func()
	if resend {
		if req, _, err = e.request(ctx, cp, eff.Ordinal, eff.Key, eff.Epoch); err != nil {
			return Result{}, err
		}
		var ok bool
		if release, ok, err = e.recoveryTurn(ctx, prov, mayWait); err != nil {
			return Result{}, err
		} else if !ok {
			return Result{Action: Snooze, After: busySnooze, Outcome: "provider busy"}, nil
		}
		defer release()
		if res, stop, err := gateClosed(); stop {
			return res, err
		}
		if !resend {
			release()
		}
	}
	switch {
	case resend:
		log.Info("recovering by sending again with the same effect id")
		if eff.State == ledger.StatePending {
			left, err := e.attemptsLeft(ctx, eff)
			if err != nil {
				return Result{}, err
			}
			res, err := e.call(ctx, prov, req, eff, ledger.ResponseResend, left > 0, release, nil)
			if err != nil {
				return res, err
			}
			return e.afterRecovery(context.WithoutCancel(ctx), cp, eff, res, left)
		}
		raw, err := prov.Send(ctx, req)
		if err != nil {
			return Result{Action: Retry, Err: err, Outcome: "recovery resend not sent"}, nil
		}
		if _, err := e.ledger.RecordResponse(context.WithoutCancel(ctx), eff.ID, ledger.ResponseResend, raw); err != nil {
			return Result{}, err
		}
		return e.resolveUnknown(context.WithoutCancel(ctx), cp, eff, classify(prov, raw), "recovery:resend")

	case caps.CanProbe(first, now):
		probed := time.Now()
		pr, err := prov.Probe(ctx, string(eff.Key), eff.Epoch)
		metrics.CallSeconds.WithLabelValues(prov.Name(), string(ledger.ResponseProbe)).Observe(time.Since(probed).Seconds())
		if err != nil {
			return Result{Action: Snooze, After: 10 * time.Second, Outcome: "probe failed: " + err.Error()}, nil
		}
		wctx := context.WithoutCancel(ctx)
		if _, err := e.ledger.RecordResponse(wctx, eff.ID, ledger.ResponseProbe, pr.Raw); err != nil {
			return Result{}, err
		}
		if pr.Found {
			receipt := pr.Receipt
			if receipt == "" {
				receipt = "found by probe"
			}
			v := provider.Verdict{Outcome: provider.OutcomeDone, Receipt: receipt}
			if n := pr.Count(); n > 1 {
				// Done all the same (sending again would make one more), but
				// the ledger keeps that the provider holds a duplicate.
				v.Reason = fmt.Sprintf("probe: %s holds %d messages with this effect id, a duplicate at the provider", prov.Name(), n)
			}
			log.Info("recovered by probe: the effect exists", "messages", pr.Count())
			return e.resolveVerdict(wctx, cp, eff, v, "probe:"+prov.Name())
		}
		if age := e.cfg.Now().Sub(eff.CreatedAt); age < caps.SettleWindow {
			return Result{Action: Snooze, After: caps.SettleWindow - age, Outcome: "probe: not found yet, inside the settle window"}, nil
		}
		log.Info("recovered by probe: no effect after the settle window; the target is sent again")
		return e.resolveVerdict(wctx, cp, eff, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "probe: not found after the settle window"}, "probe:"+prov.Name())

	default:
		if eff.State == ledger.StateUnknown {
			return Result{Action: Complete, Outcome: "unknown: waits for a human"}, nil
		}
		reason := fmt.Sprintf("the worker %s stopped during the call and %s (%s) can neither deduplicate nor be asked", eff.Owner, prov.Name(), prov.Kind())
		switch {
		case closed != "":
			reason = fmt.Sprintf("the worker %s stopped during the call, and %s since: sending it again under its key would go past that, so a person decides whether it was delivered",
				eff.Owner, closed)
		case caps.Dedupe || caps.Probe:
			reason = fmt.Sprintf("the worker %s stopped during the call, and %s's window to deduplicate or be asked about it, from the first call at %s, has closed: sending again could be a second message",
				eff.Owner, prov.Name(), first.UTC().Format(time.RFC3339))
		}
		log.Warn("in doubt: the worker died during a call this provider cannot confirm now; a human must resolve it", "reason", reason)
		_, err := e.ledger.Settle(context.WithoutCancel(ctx), ledger.SettleParams{EffectID: eff.ID, State: ledger.StateUnknown, Reason: reason})
		if err != nil {
			return Result{}, err
		}
		return Result{Action: Complete, Outcome: "unknown"}, nil
	}
}

// recoveryGate is the gate of a first claim, for recovery about to send
// eff again: the campaign runs the plan (cp: eff's, or the plan of the job
// that found eff, another version of the same campaign with eff's key;
// campaignGate: a pause or a paused provider is a Snooze, to look again
// later) and the target's address is not suppressed. When it is closed
// for good, why says what closed it.
func (e *Executor) recoveryGate(ctx context.Context, prov provider.Provider, cp *cachedPlan, eff ledger.Effect) (res Result, open bool, why string, err error) {
	if res, open, why, err = e.runsForRecovery(ctx, prov, cp); err != nil || !open {
		return res, open, why, err
	}
	res, open, why, _, err = e.notSuppressed(ctx, []ledger.Effect{eff})
	return res, open, why, err
}

// gateOf is the gate of a first claim for each of effs (a batch call's
// attempts), every one judged against its own plan — a call's attempts
// share one, but recovery reads no rule off a stored call: open only when
// every one's gate is; otherwise the first closed (a Snooze first: a
// paused campaign waits rather than closes), with why and the attempt it
// closed for.
func (e *Executor) gateOf(ctx context.Context, prov provider.Provider, effs []ledger.Effect) (res Result, open bool, why string, closed ledger.Effect, err error) {
	type verdict struct {
		res  Result
		open bool
		why  string
	}
	byPlan := map[int64]verdict{}
	var shut *ledger.Effect
	var shutBy verdict
	for i, eff := range effs {
		v, seen := byPlan[eff.PlanID]
		if !seen {
			if eff.PlanID == 0 {
				v = verdict{res: Result{Action: Complete, Outcome: "outside any plan"}, why: "its attempt was made outside any plan"}
			} else {
				cp, err := e.planFor(ctx, eff.PlanID)
				if err != nil {
					return Result{}, false, "", eff, err
				}
				if v.res, v.open, v.why, err = e.runsForRecovery(ctx, prov, cp); err != nil {
					return Result{}, false, "", eff, err
				}
			}
			byPlan[eff.PlanID] = v
		}
		switch {
		case !v.open && v.res.Action == Snooze:
			return v.res, false, "", eff, nil
		case !v.open && shut == nil:
			shut, shutBy = &effs[i], v
		}
	}
	if shut != nil {
		return shutBy.res, false, shutBy.why, *shut, nil
	}
	return e.notSuppressed(ctx, effs)
}

// runsForRecovery is campaignGate for recovery about to send an attempt
// of cp's plan again: a completed campaign has nothing left to start, but
// its attempts in doubt are still its own to settle. When it is closed for
// good, why says what closed it.
func (e *Executor) runsForRecovery(ctx context.Context, prov provider.Provider, cp *cachedPlan) (res Result, open bool, why string, err error) {
	res, open, err = e.campaignGate(ctx, cp.plan, e.queueOf(prov.Name()))
	switch {
	case err != nil:
		return res, false, "", err
	case open || res.Outcome == "campaign "+string(approval.StateCompleted):
		return Result{}, true, "", nil
	case res.Action == Snooze:
		return res, false, "", nil
	}
	return res, false, "the campaign's state changed (" + res.Outcome + ")", nil
}

// notSuppressed says whether none of effs' target addresses is suppressed
// now (target_suppression, the rule the claim applies): open, or the
// first suppressed, with why.
func (e *Executor) notSuppressed(ctx context.Context, effs []ledger.Effect) (res Result, open bool, why string, closed ledger.Effect, err error) {
	plans, ordinals := make([]int64, len(effs)), make([]int32, len(effs))
	for i, eff := range effs {
		plans[i], ordinals[i] = eff.PlanID, int32(eff.Ordinal)
	}
	var (
		at   int
		held int64
	)
	err = e.cfg.Pool.QueryRow(ctx, `
		SELECT r.i, ts.suppression_id FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS r(plan_id, ordinal, i)
		CROSS JOIN LATERAL target_suppression(r.plan_id, r.ordinal) ts
		WHERE ts.suppression_id IS NOT NULL ORDER BY r.i LIMIT 1`, plans, ordinals).Scan(&at, &held)
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{}, true, "", ledger.Effect{}, nil
	}
	if err != nil {
		return Result{}, false, "", ledger.Effect{}, err
	}
	return Result{Action: Complete, Outcome: "suppressed"}, false, fmt.Sprintf("the address was suppressed (entry %d)", held), effs[at-1], nil
}

// recoveryTurn is what recovery about to send again takes from the
// provider: a slot and a rate turn. With mayWait (a job's recovery) it
// waits as a send does (acquire); without (maintenance) it takes them only
// when they are free now (turnNow). ok false: none now; the recovery
// snoozes and a later round or job tries again.
func (e *Executor) recoveryTurn(ctx context.Context, prov provider.Provider, mayWait bool) (release func(), ok bool, err error) {
	if mayWait {
		return acquire(ctx, prov, time.Now())
	}
	return turnNow(ctx, prov)
}

// turnNowSlack is how long turnNow lets the provider take to hand over a
// slot and a turn that are free now (a query, for a schedule kept in the
// database): a turn further away than this is not taken.
const turnNowSlack = 250 * time.Millisecond

// turnNow is acquire for a caller that must not wait for the provider: a
// slot and a rate turn free now (within turnNowSlack), or nothing taken
// and ok false.
func turnNow(ctx context.Context, prov provider.Provider) (release func(), ok bool, err error) {
	wait, cancel := context.WithTimeout(ctx, turnNowSlack)
	defer cancel()
	release, err = prov.Acquire(wait)
	switch {
	case err == nil:
		return sync.OnceFunc(release), true, nil
	case ctx.Err() == nil:
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// alert tells people what recovery refused: through the Alerter when
// there is one, once per subject, and in the log.
func (e *Executor) alert(ctx context.Context, a Alert) error {
	recorded := true
	if e.cfg.Alerter != nil {
		var err error
		if recorded, err = e.cfg.Alerter.Alert(ctx, a); err != nil {
			return fmt.Errorf("alerting campaign %s of %s: %w", a.CampaignID, a.Subject, err)
		}
	}
	level := slog.LevelDebug // told before
	if recorded {
		level = slog.LevelWarn
	}
	e.cfg.Logger.Log(ctx, level, "recovery refused: a person must decide", "campaign", a.CampaignID, "subject", a.Subject, "effects", a.Effects, "reason", a.Reason)
	return nil
}

// resolveVerdict settles a pending row, or resolves an unknown one, from a
// recovery verdict; a freed key puts the target back on the queue while it
// has attempts left (retries).
func (e *Executor) resolveVerdict(ctx context.Context, cp *cachedPlan, eff ledger.Effect, v provider.Verdict, actor string) (Result, error) {
	if eff.State == ledger.StateUnknown {
		return e.resolveUnknown(ctx, cp, eff, v, actor)
	}
	if v.Outcome == provider.OutcomeDone {
		if _, err := e.ledger.Settle(ctx, ledger.SettleParams{EffectID: eff.ID, State: ledger.StateDone, Receipt: v.Receipt}); err != nil {
			return Result{}, err
		}
		return Result{Action: Complete, Outcome: "recovered done"}, nil
	}
	left, failure, reason, err := e.retries(ctx, eff, v)
	if err != nil {
		return Result{}, err
	}
	if _, err := e.ledger.Settle(ctx, ledger.SettleParams{EffectID: eff.ID, State: ledger.StateFailed, Reason: reason, Failure: failure}); err != nil {
		return Result{}, err
	}
	return e.requeue(ctx, cp, eff, left)
}

func (e *Executor) resolveUnknown(ctx context.Context, cp *cachedPlan, eff ledger.Effect, v provider.Verdict, actor string) (Result, error) {
	reason := v.Reason
	if reason == "" {
		reason = "provider answered " + string(v.Outcome) + " " + v.Receipt
	}
	rp := ledger.ResolveParams{Key: eff.Key, Actor: actor, Reason: reason}
	left := 0
	switch v.Outcome {
	case provider.OutcomeDone:
		rp.Outcome, rp.Receipt = ledger.Delivered, v.Receipt
	case provider.OutcomeFailed:
		var err error
		v.Reason = reason
		if left, rp.Failure, rp.Reason, err = e.retries(ctx, eff, v); err != nil {
			return Result{}, err
		}
		rp.Outcome = ledger.NotDelivered
	default:
		return Result{Action: Complete, Outcome: "still unknown: " + string(v.Outcome)}, nil
	}
	if _, err := e.ledger.Resolve(ctx, rp); err != nil {
		return Result{}, err
	}
	if rp.Outcome == ledger.NotDelivered {
		return e.requeue(ctx, cp, eff, left)
	}
	return Result{Action: Complete, Outcome: "recovered done"}, nil
}

// retries is what becomes of a target whose attempt eff recovery found
// not performed (v failed): a definitive rejection stays failed for good
// (no attempts left to use); otherwise, with attempts left
// (attemptsLeft), it is sent again (FailureRetry) with that many, and on
// the last it fails for good and the reason says so.
func (e *Executor) retries(ctx context.Context, eff ledger.Effect, v provider.Verdict) (left int, failure ledger.Failure, why string, err error) {
	if !v.Retryable {
		return 0, ledger.FailureRejected, v.Reason, nil
	}
	if left, err = e.attemptsLeft(ctx, eff); err != nil {
		return 0, "", "", err
	}
	failure, why = e.temporary(ctx, eff, left > 0, v.NotSent, v.Reason)
	return left, failure, why, nil
}

// requeue puts a target whose key recovery freed back on the queue with
// left attempts (none: it stays failed, exhausted). It is enqueued whatever
// job is live for it at this instant: that job may have passed it by while
// its key was held, and the ledger keeps a second job from a second effect.
func (e *Executor) requeue(ctx context.Context, cp *cachedPlan, eff ledger.Effect, left int) (Result, error) {
	if left <= 0 {
		return Result{Action: Complete, Outcome: "recovered failed; no attempts left"}, nil
	}
	if e.cfg.Requeuer != nil {
		if err := e.cfg.Requeuer.RequeueTarget(ctx, cp.plan, eff.Ordinal, left); err != nil {
			return Result{}, err
		}
	}
	return Result{Action: Complete, Outcome: "recovered failed; target requeued"}, nil
}

// crash points, for the crash tests: ONCEPLAN_CRASH_AT=<point>:<n> makes
// the process SIGKILL itself at that point of its n-th effect. A real
// SIGKILL at a precise point of the protocol; unset in production.
type crashPoint struct {
	point string
	nth   int
	mu    sync.Mutex
	seen  map[string]int
}

const (
	pointBeforeClaim = "before-claim"
	pointAfterClaim  = "after-claim"
	pointAfterSend   = "after-send"
	pointAfterRaw    = "after-raw"
	// pointAfterResolve is recovery's: after it resolved one unknown
	// attempt of a batch call from the call's answer, before the next.
	pointAfterResolve = "after-resolve"
)

func crashPointFromEnv() (*crashPoint, error) {
	v := os.Getenv("ONCEPLAN_CRASH_AT")
	if v == "" {
		return &crashPoint{}, nil
	}
	var cp *crashPoint
	point, n, ok := cutLast(v, ':')
	nth, err := strconv.Atoi(n)
	if !ok || err != nil || nth < 1 {
		return cp, fmt.Errorf("ONCEPLAN_CRASH_AT=%q: want POINT:N, e.g. after-claim:3", v)
	}
	switch point {
	case pointBeforeClaim, pointAfterClaim, pointAfterSend, pointAfterRaw, pointAfterResolve:
	default:
		return cp, fmt.Errorf("ONCEPLAN_CRASH_AT=%q: the point is one of before-claim, after-claim, after-send, after-raw, after-resolve", v)
	}
	return &crashPoint{point: point, nth: nth, seen: map[string]int{}}, nil
}

func (c *crashPoint) at(point string) {
	if c.point != point {
		return
	}
	c.mu.Lock()
	c.seen[point]++
	hit := c.seen[point] == c.nth
	c.mu.Unlock()
	if hit {
		fmt.Fprintf(os.Stderr, "onceplan: crash point %s reached: SIGKILL\n", point)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

func cutLast(s string, sep byte) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
