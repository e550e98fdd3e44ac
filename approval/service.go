package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
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

// Service runs the campaign workflow. Every method is one transaction that
// locks the campaign row first, so decisions on one campaign never
// interleave.
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

// TargetsParams is an uploaded target list.
type TargetsParams struct {
	Format        plan.Format
	Body          io.Reader
	AddressColumn string
	// Encoding is the CSV's declared encoding ("": UTF-8).
	Encoding plan.Encoding
	Append   bool
}

// CreateParams is a new campaign with its first draft.
type CreateParams struct {
	Name              string
	Provider          string
	ScheduledAt       *time.Time
	StartOnApproval   bool
	RequiredApprovals int
	// Transactional: the messages carry no one-click unsubscribe link
	// (NewCampaign.Transactional); covered by the plan hash.
	Transactional bool
	Payload       plan.Payload
	Targets       *TargetsParams // optional
	// CopyListOf, when set and Targets is not, names a campaign whose
	// current version's target list the new draft starts from (a clone):
	// imported as an upload is, the suppression list applied.
	CopyListOf string
	// IdempotencyKey, when set, makes Create safe to retry: the same actor
	// with the same key gets the campaign the first call made (Result.Replayed),
	// provided RequestHash matches; a different RequestHash is refused with
	// ErrIdempotencyMismatch. RequestHash identifies the request's content.
	IdempotencyKey string
	RequestHash    string
}

// ErrIdempotencyMismatch: an idempotency key was reused for a different
// request.
var ErrIdempotencyMismatch = onceplan.New(onceplan.CodeIdempotencyMismatch, "idempotency key reused with a different request")

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
	id, err := AppendEvent(ctx, tx, e)
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

// Create makes a campaign and its first draft, and imports its targets
// when given. A failed import creates nothing.
func (s *Service) Create(ctx context.Context, a auth.Actor, p CreateParams) (Result, error) {
	if err := auth.Authorize(a, auth.ActionCreate); err != nil {
		return Result{}, err
	}
	if err := s.knownProvider(p.Provider); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if p.IdempotencyKey != "" {
			// A concurrent request with the same key waits here on the
			// primary key until this transaction ends, then finds its row.
			var existing, hash string
			err := tx.QueryRow(ctx, `SELECT campaign_id, request_hash FROM api_idempotency WHERE user_id = $1 AND key = $2`,
				a.UserID, p.IdempotencyKey).Scan(&existing, &hash)
			switch {
			case err == nil && hash != p.RequestHash:
				return fmt.Errorf("%w: the Idempotency-Key %q was first used for a different request", ErrIdempotencyMismatch, p.IdempotencyKey)
			case err == nil:
				c, err := GetCampaign(ctx, tx, existing)
				if err != nil {
					return err
				}
				res, err = s.result(ctx, tx, c)
				res.Replayed = true
				return err
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		c, err := CreateCampaign(ctx, tx, NewCampaign{
			Name: p.Name, Provider: p.Provider, ScheduledAt: p.ScheduledAt, StartOnApproval: p.StartOnApproval,
			RequiredApprovals: p.RequiredApprovals, Payload: p.Payload, CreatedBy: a.UserID, ViaAgent: a.Agent,
			Transactional: p.Transactional,
		})
		if err != nil {
			return err
		}
		var (
			from   Draft
			detail any
		)
		if p.Targets == nil && p.CopyListOf != "" {
			src, err := GetCampaign(ctx, tx, p.CopyListOf)
			if err != nil {
				return fmt.Errorf("%w: there is no campaign %s to copy the list of", onceplan.ErrNotFound, p.CopyListOf)
			}
			if from, err = GetDraft(ctx, tx, src.ID, src.Version); err != nil {
				return err
			}
			detail = copyDetail{Of: src.ID, Name: src.Name, Version: src.Version}
		}
		if err := s.event(ctx, tx, &a, c, auth.ActionCreate, "", "", detail); err != nil {
			return err
		}
		if p.IdempotencyKey != "" {
			tag, err := tx.Exec(ctx, `INSERT INTO api_idempotency (user_id, key, request_hash, campaign_id) VALUES ($1, $2, $3, $4)
				ON CONFLICT DO NOTHING`, a.UserID, p.IdempotencyKey, p.RequestHash, c.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				// Another request with this key committed first: retry
				// once, and the lookup above answers with its campaign.
				return errIdempotencyRace
			}
		}
		var report *plan.ImportReport
		switch {
		case p.Targets != nil:
			r, err := s.importInto(ctx, tx, a, c, *p.Targets)
			if err != nil {
				return err
			}
			report = &r
		case from.ListID != 0:
			r, err := s.importCopy(ctx, tx, a, c, from.ListID)
			if err != nil {
				return err
			}
			report = &r
		}
		res, err = s.result(ctx, tx, c)
		res.Import = report
		return err
	})
	if errors.Is(err, errIdempotencyRace) {
		return s.Create(ctx, a, p)
	}
	return res, err
}

var errIdempotencyRace = errors.New("idempotency key taken concurrently")

// editable locks the campaign and returns the draft version to change: the
// current one while drafting, or a new version (which needs a new approval)
// once the campaign was approved. Either way the campaign is back in draft.
func (s *Service) editable(ctx context.Context, tx pgx.Tx, a auth.Actor, id string, action auth.Action) (Campaign, error) {
	if err := auth.Authorize(a, action); err != nil {
		return Campaign{}, err
	}
	c, err := LockCampaign(ctx, tx, id)
	if err != nil {
		return c, err
	}
	if err := stateAllows(c, action); err != nil {
		if c.ArchivedAt != nil {
			return c, err
		}
		return c, fmt.Errorf("%w: campaign %s is %s and can no longer be edited", onceplan.ErrConflict, c.ID, label(c.State))
	}
	switch c.State {
	case StateDraft:
		return c, nil
	case StatePendingApproval:
		// Approvals given so far were for the old hash: they no longer count.
	default:
		// Approved or started: the edit is a new version, which needs a
		// new approval.
		if c.Version, err = NewVersion(ctx, tx, c.ID, c.Version, a.UserID); err != nil {
			return c, err
		}
	}
	// The caller records the edit or import, with what it changed.
	return c, s.shift(ctx, tx, &c, action)
}

// Edit replaces the draft's payload.
func (s *Service) Edit(ctx context.Context, a auth.Actor, id string, p plan.Payload) (Result, error) {
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := s.editable(ctx, tx, a, id, auth.ActionEdit)
		if err != nil {
			return err
		}
		if err := UpdatePayload(ctx, tx, c.ID, c.Version, p, a.UserID); err != nil {
			return err
		}
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		return s.event(ctx, tx, &a, c, auth.ActionEdit, res.PlanHash, "", nil)
	})
	return res, err
}

// ImportTargets replaces (or with Append extends) the draft's target list.
func (s *Service) ImportTargets(ctx context.Context, a auth.Actor, id string, t TargetsParams) (Result, error) {
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := s.editable(ctx, tx, a, id, auth.ActionImport)
		if err != nil {
			return err
		}
		report, err := s.importInto(ctx, tx, a, c, t)
		if err != nil {
			return err
		}
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		res.Import = &report
		return nil
	})
	return res, err
}

func (s *Service) importInto(ctx context.Context, tx pgx.Tx, a auth.Actor, c Campaign, t TargetsParams) (plan.ImportReport, error) {
	// The report lists blank merge variables of the ones the draft reads.
	d, err := GetDraft(ctx, tx, c.ID, c.Version)
	if err != nil {
		return plan.ImportReport{}, err
	}
	tpl, err := d.Payload.Compile()
	if err != nil {
		return plan.ImportReport{}, err
	}
	// Suppressed addresses are left out of the list, and reported.
	suppressed, err := suppression.ActiveSet(ctx, tx)
	if err != nil {
		return plan.ImportReport{}, err
	}
	// The draft's row is locked for the import: one list at a time.
	var current *int64
	if err := tx.QueryRow(ctx, `SELECT list_id FROM draft WHERE campaign_id = $1 AND version = $2 FOR UPDATE`,
		c.ID, c.Version).Scan(&current); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return plan.ImportReport{}, fmt.Errorf("%w: campaign %s has no draft version %d", onceplan.ErrNotFound, c.ID, c.Version)
		}
		return plan.ImportReport{}, err
	}
	report, err := plan.ImportTargets(ctx, tx, plan.ImportParams{
		CampaignID: c.ID, Current: current, Tool: c.Tool, Format: t.Format, Body: t.Body,
		AddressColumn: t.AddressColumn, Encoding: t.Encoding, Append: t.Append, MaxTargets: s.MaxTargets, MaxBytes: s.MaxBytes,
		ActorID: a.UserID, Blank: tpl.BlankFields(), Suppressed: suppressed.Lookup,
	})
	if err != nil {
		return report, err
	}
	if _, err := tx.Exec(ctx, `UPDATE draft SET list_id = $3, last_edited_by = $4, updated_at = now() WHERE campaign_id = $1 AND version = $2`,
		c.ID, c.Version, report.ListID, a.UserID); err != nil {
		return report, err
	}
	// The list it replaced goes, unless a plan froze it or a submission
	// named it.
	if current != nil {
		if err := plan.DropUnfrozenList(ctx, tx, *current); err != nil {
			return report, err
		}
	}
	// The trail keeps the counts and the first refused lines: the draft's
	// history (history.go).
	return report, s.event(ctx, tx, &a, c, auth.ActionImport, "", "", importDetailOf(report, t.Append))
}

// copyDetail is the create entry's detail of a campaign made from another:
// the campaign, and the version whose list it copied.
type copyDetail struct {
	Of      string `json:"copy_of"`
	Name    string `json:"copy_of_name"`
	Version int    `json:"copy_of_version"`
}

// importCopy imports list listID (another campaign's) into campaign c's
// draft through importInto, as the JSON list plan.WriteListJSON streams
// from a connection of its own: whatever applies to an upload — the
// suppression list, normalisation, the report, the trail — applies.
func (s *Service) importCopy(ctx context.Context, tx pgx.Tx, a auth.Actor, c Campaign, listID int64) (plan.ImportReport, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(plan.WriteListJSON(ctx, s.pool, listID, pw))
	}()
	report, err := s.importInto(ctx, tx, a, c, TargetsParams{Format: plan.FormatJSON, Body: pr})
	pr.Close() // an import that stopped early ends the writer too
	<-done
	return report, err
}

// MissingVarsError blocks a submission: targets lack variables the
// templates read.
type MissingVarsError struct {
	Missing []plan.MissingVar
	Total   int
}

func (e *MissingVarsError) Error() string {
	first := e.Missing[0]
	lack := fmt.Sprintf("%d targets lack", e.Total)
	if e.Total == 1 {
		lack = "1 target lacks"
	}
	return fmt.Sprintf("%s merge variables the draft uses; first: line %d (%s) has no %s",
		lack, first.Line, first.Target, strings.Join(first.Missing, ", "))
}

// Is makes the error a validation error.
func (e *MissingVarsError) Is(target error) bool { return target == onceplan.ErrInvalid }

// ErrorCode makes missing variables invalid input.
func (e *MissingVarsError) ErrorCode() onceplan.Code { return onceplan.CodeInvalid }

// Submit asks for approval of the current draft, once it validates: its
// provider is one this deployment sends through, and plan.Check passes
// (res.Check carries its warnings).
func (s *Service) Submit(ctx context.Context, a auth.Actor, id string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, auth.ActionSubmit, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		if err := s.knownProvider(c.Provider); err != nil {
			return err
		}
		var err error
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		check, err := plan.Check(ctx, tx, res.Draft.Content())
		if err != nil {
			return err
		}
		if check.MissingCount > 0 {
			return &MissingVarsError{Missing: check.Missing, Total: check.MissingCount}
		}
		var detail any // the trail says the proposer submitted despite the warning
		if check.EmptyCount > 0 {
			detail = map[string]any{"empty": check.EmptyCount}
		}
		if err := s.move(ctx, tx, &a, &c, auth.ActionSubmit, res.PlanHash, "", detail); err != nil {
			return err
		}
		res.Campaign, res.Check = c, &check
		_, err = Submit(ctx, tx, c.ID, c.Version, res.PlanHash, a.UserID)
		return err
	})
	return res, err
}

// Approve records a's approval of the plan hash they were shown. The N-th
// distinct approval of the current hash freezes the plan (and starts it
// when the campaign says so).
func (s *Service) Approve(ctx context.Context, a auth.Actor, id, shownHash string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionApprove); err != nil {
		return Result{}, err
	}
	if err := plan.ValidHash(shownHash); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil {
			return err
		}
		if res, err = s.result(ctx, tx, c); err != nil {
			return err
		}
		if err := approveAllowed(ctx, tx, a, c, res.PlanHash); err != nil {
			return err
		}
		if shownHash != res.PlanHash {
			return fmt.Errorf("%w: the draft changed since it was shown to you (you approved %.12s…, it is now %.12s…); review it again", onceplan.ErrConflict, shownHash, res.PlanHash)
		}
		_, err = tx.Exec(ctx, `INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ($1, $2, $3, $4)`,
			c.ID, c.Version, shownHash, a.UserID)
		if err := approvalErr(err); err != nil {
			return err
		}
		if err := s.event(ctx, tx, &a, c, auth.ActionApprove, shownHash, "", nil); err != nil {
			return err
		}
		count, err := approvals(ctx, tx, c, shownHash)
		if err != nil {
			return err
		}
		if count < c.RequiredApprovals {
			res.Campaign = c
			return s.answer(ctx, tx, &res, nil)
		}
		p, err := freeze(ctx, tx, c, res.Draft, shownHash)
		if err != nil {
			return err
		}
		c.PlanID = p.ID
		if err := s.move(ctx, tx, nil, &c, auth.ActionFreeze, shownHash, "", map[string]any{"plan_id": p.ID, "target_count": p.TargetCount, "approvals": count}); err != nil {
			return err
		}
		if c.StartOnApproval && (c.ScheduledAt == nil || !c.ScheduledAt.After(s.Now())) {
			if c, err = s.start(ctx, tx, nil, c); err != nil {
				return err
			}
		}
		res.Campaign = c
		return s.answer(ctx, tx, &res, nil)
	})
	return res, err
}

// freeze writes the plan of campaign c's draft d, approved under hash,
// and points the campaign at it.
func freeze(ctx context.Context, tx pgx.Tx, c Campaign, d Draft, hash string) (plan.Plan, error) {
	p, err := plan.Freeze(ctx, tx, plan.FreezeParams{
		CampaignID: c.ID, Version: d.Version, Provider: c.Provider, Tool: c.Tool, ListUnsubscribe: c.ListUnsubscribe,
		Payload: d.Payload, ListID: d.ListID, TargetCount: d.TargetCount, ProposedBy: d.ProposedBy, Hash: hash,
	})
	if err != nil {
		return p, err
	}
	_, err = tx.Exec(ctx, `UPDATE campaign SET plan_id = $2 WHERE id = $1`, c.ID, p.ID)
	return p, err
}

// ApproveAllowed says whether a may approve campaign c's current version
// now: nil, or an error whose message says why not (the role, the state,
// authorship as submitted, an approval already given). Approve checks the
// same.
func (s *Service) ApproveAllowed(ctx context.Context, a auth.Actor, c Campaign) error {
	r, err := s.result(ctx, s.pool, c)
	if err != nil {
		return err
	}
	return approveAllowed(ctx, s.pool, a, c, r.PlanHash)
}

func approveAllowed(ctx context.Context, db onceplan.DB, a auth.Actor, c Campaign, hash string) error {
	if err := Allowed(a, c, auth.ActionApprove); err != nil {
		return err
	}
	// Authorship as submitted decides, as it does for PostgreSQL.
	sub, err := LatestSubmission(ctx, db, c.ID)
	if err != nil {
		return err
	}
	if sub.IsAuthor(a.UserID) {
		return fmt.Errorf("%w: you proposed or last edited this draft; someone else must approve it", onceplan.ErrForbidden)
	}
	var already bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approval WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3 AND approver_id = $4)`,
		c.ID, c.Version, hash, a.UserID).Scan(&already); err != nil {
		return err
	}
	if already {
		return fmt.Errorf("%w: you have already approved this version", onceplan.ErrConflict)
	}
	return nil
}

func approvalErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("%w: you have already approved this version", onceplan.ErrConflict)
		case "OP006":
			return fmt.Errorf("%w: you proposed or last edited this draft; someone else must approve it", onceplan.ErrForbidden)
		}
	}
	return err
}

// approvals counts the distinct approvals of campaign c's current version
// under hash.
func approvals(ctx context.Context, db onceplan.DB, c Campaign, hash string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM approval WHERE campaign_id = $1 AND version = $2 AND plan_hash = $3`,
		c.ID, c.Version, hash).Scan(&n)
	return n, err
}

// Reject sends a pending draft back to its proposer, with a reason.
func (s *Service) Reject(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionReject); err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(reason) == "" {
		return Result{}, &onceplan.FieldError{Field: "reason", Reason: "is required: say what must change"}
	}
	return s.transition(ctx, a, id, auth.ActionReject, reason)
}

// transition takes a simple action (reject, pause, cancel) on a locked
// campaign, as the lifecycle table says, and audits it.
func (s *Service) transition(ctx context.Context, a auth.Actor, id string, action auth.Action, reason string) (Result, error) {
	var res Result
	err := s.act(ctx, a, id, action, func(tx pgx.Tx, c *Campaign) error {
		h, err := s.result(ctx, tx, *c)
		if err != nil {
			return err
		}
		if err := s.move(ctx, tx, &a, c, action, h.PlanHash, reason, nil); err != nil {
			return err
		}
		res, err = s.result(ctx, tx, *c)
		return err
	})
	return res, err
}

// Start begins executing the approved plan: the run record and one job per
// target, in one transaction. Starting a running campaign again enqueues
// nothing and is not an error.
func (s *Service) Start(ctx context.Context, a auth.Actor, id string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionStart); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil {
			return err
		}
		if c.ArchivedAt != nil {
			return archivedError(c)
		}
		switch c.State {
		case StateApproved:
			if c, err = s.start(ctx, tx, &a, c); err != nil {
				return err
			}
		case StateRunning:
			// Already started: nothing new.
		default:
			return fmt.Errorf("%w: campaign %s is %s; only an approved campaign can be started", onceplan.ErrConflict, c.ID, c.State)
		}
		res, err = s.result(ctx, tx, c)
		return err
	})
	return res, err
}

// start writes the run and its jobs for a locked, approved campaign.
func (s *Service) start(ctx context.Context, tx pgx.Tx, a *auth.Actor, c Campaign) (Campaign, error) {
	p, err := plan.GetPlan(ctx, tx, c.PlanID)
	if err != nil {
		return c, err
	}
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
		err := s.tx(ctx, func(tx pgx.Tx) error {
			c, err := LockCampaign(ctx, tx, id)
			if err != nil || c.State != StateApproved {
				return err // someone started or edited it meanwhile
			}
			_, err = s.start(ctx, tx, nil, c)
			if err == nil {
				started = append(started, id)
			}
			return err
		})
		if err != nil {
			return started, fmt.Errorf("starting scheduled campaign %s: %w", id, err)
		}
	}
	return started, nil
}

// Pause stops a running campaign's jobs from claiming new effects; calls
// already in flight finish and are recorded.
func (s *Service) Pause(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionPause); err != nil {
		return Result{}, err
	}
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

// Cancel ends a campaign for good: its remaining jobs end without acting.
func (s *Service) Cancel(ctx context.Context, a auth.Actor, id, reason string) (Result, error) {
	if err := auth.Authorize(a, auth.ActionCancel); err != nil {
		return Result{}, err
	}
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil || c.State != StateRunning {
			return err
		}
		p, err := plan.GetPlan(ctx, tx, c.PlanID)
		if err != nil {
			return err
		}
		if n, err = s.enqueuer.EnqueueRemaining(ctx, tx, p); err != nil || n == 0 {
			return err
		}
		return s.move(ctx, tx, nil, &c, auth.ActionResume, p.Hash, reason, map[string]any{"jobs": n})
	})
	return n, err
}

// RequeueTarget enqueues one target of plan p again, as the system, after
// recovery freed its key, with the attempts it has left — whatever job is
// live for it (Enqueuer.EnqueueFreed). A campaign that completed in the
// meantime runs again — or its gate would turn the new job away and the
// target would be forgotten — and the trail says why.
func (s *Service) RequeueTarget(ctx context.Context, p plan.Plan, ordinal, attempts int) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, p.CampaignID)
		if err != nil {
			return err
		}
		if c.PlanID != p.ID {
			return nil // a newer version runs its own jobs
		}
		n, err := s.enqueuer.EnqueueFreed(ctx, tx, p, ordinal, attempts)
		if err != nil || n == 0 {
			return err
		}
		return s.reopen(ctx, tx, nil, &c, "recovery found a target not sent and put it back on the queue", n)
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
	err = s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil {
			return err
		}
		var seen bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM campaign_event
			WHERE campaign_id = $1 AND action = $2 AND detail ->> 'subject' = $3)`, c.ID, string(ActionAlert), subject).Scan(&seen); err != nil || seen {
			return err
		}
		d := map[string]any{"subject": subject}
		maps.Copy(d, detail)
		recorded = true
		return s.event(ctx, tx, nil, c, ActionAlert, "", reason, d)
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil || c.State != StateRunning {
			return err
		}
		ok, err := done(ctx, tx, c)
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
				return s.move(ctx, tx, nil, &c, auth.ActionResume, p.Hash, fmt.Sprintf(untriedReason, n), map[string]any{"jobs": n, "untried": n})
			}
		}
		completed = true
		return s.move(ctx, tx, nil, &c, ActionComplete, "", "", nil)
	})
	return completed, err
}

// untriedReason is the trail's reason when CompleteIfDone puts targets no
// job tried back on the queue (%d: how many).
const untriedReason = "%d targets were never tried though every job had finished; they are back on the queue"

// maxUntriedRequeues bounds CompleteIfDone's requeues of untried targets
// for one version of a campaign.
const maxUntriedRequeues = 3

// ResolveEffect is a person's verdict on a target whose effect is unknown:
// delivered (done) or not delivered (failed, so a resume sends it once
// more). The key must belong to the campaign's plan.
func (s *Service) ResolveEffect(ctx context.Context, a auth.Actor, campaignID, key string, outcome ledger.Outcome, reason string) (ledger.Effect, error) {
	var eff ledger.Effect
	err := s.effectAction(ctx, a, campaignID, key, auth.ActionResolve, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		var err error
		if eff, err = ledger.NewStore(tx).Resolve(ctx, ledger.ResolveParams{Key: ledger.Key(key), Outcome: outcome, Actor: a.String(), Reason: reason}); err != nil {
			return err
		}
		if err := s.event(ctx, tx, &a, c, auth.ActionResolve, "", reason, map[string]any{"key": key, "epoch": eff.Epoch, "outcome": outcome}); err != nil {
			return err
		}
		if outcome == ledger.NotDelivered {
			// The key is free again: the target goes back on the queue.
			return s.requeueAfterChange(ctx, tx, &a, c, "an unknown target was resolved as not delivered")
		}
		return nil
	})
	return eff, err
}

// Get reads a campaign with its current draft and plan hash.
func (s *Service) Get(ctx context.Context, id string) (Result, error) {
	c, err := GetCampaign(ctx, s.pool, id)
	if err != nil {
		return Result{}, err
	}
	return s.result(ctx, s.pool, c)
}
