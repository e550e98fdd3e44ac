// The service: its dependencies, its transaction and its trail writer.
// Its actions are in the files named after what they do (create.go,
// edit.go, approve.go, run.go, effects.go); each enters through the
// lifecycle (lifecycle.go).

package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/plan"
)

// Enqueuer puts a plan's remaining targets on the queue inside the caller's
// transaction (package jobs implements it with River's InsertManyFastTx).
type Enqueuer interface {
	EnqueueRemaining(ctx context.Context, tx pgx.Tx, p plan.Plan) (int, error)
	// EnqueueUntried enqueues, inside tx, the targets of p (which has no
	// live job) that were never tried: no attempt at their key's current
	// epoch, not held, not suppressed.
	EnqueueUntried(ctx context.Context, tx pgx.Tx, p plan.Plan) (int, error)
	// EnqueueFreed enqueues target ordinal of p, whose key recovery
	// freed, with attempts attempts, whatever job is live for it, unless
	// the ledger holds its key.
	EnqueueFreed(ctx context.Context, tx pgx.Tx, p plan.Plan, ordinal, attempts int) (int, error)
	// CountRemaining says, without writing, what EnqueueRemaining would
	// enqueue for p now (with queue; a scan of the list) and what a
	// stopped worker still holds.
	CountRemaining(ctx context.Context, db onceplan.DB, p plan.Plan, queue bool) (Remainder, error)
	// ProviderWorkers counts the live worker processes whose heartbeat
	// says they serve provider, judged alive as the workers judge each
	// other (their owner timeout).
	ProviderWorkers(ctx context.Context, db onceplan.DB, provider string) (int, error)
	// NextTries says when each of the given targets of p is tried next:
	// the earliest time a live job carrying it is due (now, or past, for
	// one running or waiting for a worker). A target no live job carries
	// is not in the answer: nothing will try it by itself.
	NextTries(ctx context.Context, db onceplan.DB, p plan.Plan, ordinals []int) (map[int]time.Time, error)
}

// Announcer puts the announcement of a recorded trail entry on the queue
// inside the transaction that records it (package jobs implements it with
// one River job; package notify decides which entries are announced and
// to whom). A notification therefore exists exactly when its decision
// committed, and the decision never waits for a notifier.
type Announcer interface {
	Announce(ctx context.Context, tx pgx.Tx, e Event) error
}

// Remainder is what resuming a plan would queue now, and what maintenance
// will requeue by itself.
type Remainder struct {
	// Queue: targets with no blocking ledger row and no live job; a
	// resume queues each once.
	Queue int
	// Left: targets with no blocking ledger row, not suppressed, with a
	// live job or not — what running the campaign sends (a paused
	// campaign's resume sends these: its jobs wait, and Queue more are
	// queued). Counted with Queue.
	Left int
	// Stalled: targets held by running jobs of a worker process that
	// stopped heartbeating (SilentFor ago). Maintenance requeues them
	// once the process is past the owner timeout, RequeueIn from now, at
	// its next round; nobody needs to press anything.
	Stalled   int
	SilentFor time.Duration
	RequeueIn time.Duration
}

// Service runs the campaign workflow. Every action is one transaction that
// locks the campaign row first and asks the lifecycle table before it
// writes (lifecycle.go: act, actAsSystem), so decisions on one campaign
// never interleave and follow one state machine.
type Service struct {
	pool     *pgxpool.Pool
	enqueuer Enqueuer
	// MaxTargets and MaxBytes bound imports (defaults: plan's).
	MaxTargets int
	MaxBytes   int64
	// Providers are the names of the providers this deployment sends
	// through (the wiring sets them from the configured registry): Create
	// and Submit refuse a campaign on any other, which no worker would
	// ever serve. Empty: every name is accepted.
	Providers []string
	// Now is the clock (tests set it).
	Now func() time.Time
	// Announcer, when set, announces every trail entry the service
	// records (nil: nothing is announced).
	Announcer Announcer
	// decisions wakes WaitDecision's waiters (decision_wait.go).
	decisions *pgnotify.Hub
}

// NewService returns a Service on pool.
func NewService(pool *pgxpool.Pool, enqueuer Enqueuer) *Service {
	return &Service{pool: pool, enqueuer: enqueuer, Now: time.Now, decisions: pgnotify.New(pool, DecisionChannel)}
}

// knownProvider refuses a provider name this deployment does not send
// through, naming the ones it does.
func (s *Service) knownProvider(name string) error {
	configured := strings.Join(s.Providers, ", ")
	switch {
	case len(s.Providers) == 0 || slices.Contains(s.Providers, name):
		return nil
	case name == "":
		return &onceplan.FieldError{Field: "provider", Reason: "is required; the configured providers are " + configured}
	}
	return &onceplan.FieldError{Field: "provider", Reason: fmt.Sprintf(
		"%q is not a provider this server sends through; the configured providers are %s", name, configured)}
}

func (s *Service) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return frozenRuleErr(pgx.BeginFunc(ctx, s.pool, fn))
}

// frozenRuleErr words PostgreSQL's refusal of something that is not what
// was submitted or approved (SQLSTATE OP007, migration 0014) as a conflict.
// The service checks each rule before it writes, so this is the database's
// backstop speaking: a concurrent change, or a bug.
func frozenRuleErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "OP007" {
		return fmt.Errorf("%w: %s", onceplan.ErrConflict, pgErr.Message)
	}
	return err
}

func (s *Service) result(ctx context.Context, db onceplan.DB, c Campaign) (Result, error) {
	d, err := GetDraft(ctx, db, c.ID, c.Version)
	if err != nil {
		return Result{}, err
	}
	return Result{Campaign: c, Draft: d, PlanHash: d.Hash(c)}, nil
}

func (s *Service) event(ctx context.Context, tx pgx.Tx, a *auth.Actor, c Campaign, action auth.Action, hash, reason string, detail any) error {
	e := Event{CampaignID: c.ID, Action: string(action), Version: c.Version, PlanHash: hash, Reason: reason}
	if a != nil {
		e.ActorID, e.ViaAgent = a.UserID, a.Agent
	}
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		e.Detail = b
	}
	id, err := appendEvent(ctx, tx, e)
	if err != nil {
		return err
	}
	if s.Announcer != nil {
		e.ID = id
		if err := s.Announcer.Announce(ctx, tx, e); err != nil {
			return err
		}
	}
	return notifyDecision(ctx, tx, c.ID, action)
}

// Get reads a campaign with its current draft and plan hash.
func (s *Service) Get(ctx context.Context, id string) (Result, error) {
	c, err := GetCampaign(ctx, s.pool, id)
	if err != nil {
		return Result{}, err
	}
	return s.result(ctx, s.pool, c)
}
