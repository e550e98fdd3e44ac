package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// State is where an attempt at an effect stands
// (docs/ARCHITECTURE.md, "The ledger: exactly-once lives in PostgreSQL").
type State string

// The ledger states.
const (
	StatePending  State = "pending"  // claimed; the provider call may be in flight
	StateDone     State = "done"     // the provider accepted; receipt stored
	StateUnknown  State = "unknown"  // may or may not have landed; a probe or a human settles it
	StateFailed   State = "failed"   // definitely not performed; the key is free again
	StateStranded State = "stranded" // exists at the provider but can never complete
	StateRevoked  State = "revoked"  // explicitly withdrawn by a human
)

// Failure says whether a failed attempt is final: what the audit needs to
// tell a target the provider refused for good (the plan's outcome for it)
// from one that is still to be sent, or that ran out of retries.
type Failure string

// Failures.
const (
	// FailureRejected: the provider refused it for good (a definitive
	// rejection); nothing retries it.
	FailureRejected Failure = "rejected"
	// FailureRetry: nothing was done and the target is to be sent again: a
	// temporary failure with retries left, a probe that found nothing, a
	// person's "not delivered".
	FailureRetry Failure = "retry"
	// FailureExhausted: a temporary failure with no retries left.
	FailureExhausted Failure = "exhausted"
	// FailureQuota: the provider said "over quota"; its queue pauses and
	// the target is sent again after it. Not a failure of the target's:
	// it uses up none of its attempts.
	FailureQuota Failure = "quota"
	// FailureUnsent: as FailureRetry, and this attempt never reached the
	// provider: the request never left (a DNS failure, a refused
	// connection, a TLS failure before anything was written).
	FailureUnsent Failure = "unsent"
	// FailureUnreached: as FailureExhausted, and no attempt at the key and
	// epoch ever reached the provider: every other one failed
	// FailureUnsent (PostgreSQL refuses it otherwise, migration 0041).
	FailureUnreached Failure = "unreached"
)

// Final reports whether a failed attempt with this failure is the
// target's ending: nothing sends it again by itself (a person may
// resume). The others are to be sent again.
func (f Failure) Final() bool {
	switch f {
	case FailureRejected, FailureExhausted, FailureUnreached:
		return true
	}
	return false
}

// Effect is one attempt at (key, epoch).
type Effect struct {
	ID           int64
	Key          Key
	Epoch        int
	State        State
	Attempt      int
	Owner        string
	JobID        int64 // 0 when not started by a job
	PlanID       int64 // the plan target it executes; 0 outside a plan
	Ordinal      int
	Receipt      string
	Reason       string
	ResolvedBy   string
	Resolution   string
	RevokedBy    string
	RevokeReason string
	// Failure says, for a failed attempt, whether it is final; "" for
	// other states, and for attempts that failed before it was recorded.
	Failure   Failure
	CreatedAt time.Time
	UpdatedAt time.Time
	SettledAt time.Time // zero while pending
}

// Store reads and writes the ledger. Every method is one transaction of its
// own, committed before it returns: a caller that gets a nil error knows the
// step is durable before it takes the next one.
type Store struct {
	db onceplan.DB
}

// NewStore returns a Store on db (a *pgxpool.Pool, or a pgx.Tx in tests).
func NewStore(db onceplan.DB) *Store { return &Store{db: db} }

const effectCols = `id, key, epoch, state, attempt, owner, coalesce(job_id, 0), coalesce(plan_id, 0), coalesce(ordinal, 0),
	coalesce(receipt, ''), coalesce(reason, ''), coalesce(resolved_by, ''), coalesce(resolution, ''),
	coalesce(revoked_by, ''), coalesce(revoke_reason, ''), coalesce(failure, ''), created_at, updated_at, settled_at`

// everyAttempt selects effectCols of the attempts, hot or archived
// (docs/ARCHITECTURE.md, "The archive"), for which where holds.
func everyAttempt(where string) string {
	return `SELECT ` + effectCols + ` FROM effect WHERE ` + where +
		` UNION ALL SELECT ` + effectCols + ` FROM effect_archive WHERE ` + where
}

func scanEffect(row pgx.Row) (Effect, error) {
	var e Effect
	var key, state, failure string
	var settled *time.Time
	err := row.Scan(&e.ID, &key, &e.Epoch, &state, &e.Attempt, &e.Owner, &e.JobID, &e.PlanID, &e.Ordinal,
		&e.Receipt, &e.Reason, &e.ResolvedBy, &e.Resolution, &e.RevokedBy, &e.RevokeReason, &failure,
		&e.CreatedAt, &e.UpdatedAt, &settled)
	e.Key, e.State, e.Failure = Key(key), State(state), Failure(failure)
	if settled != nil {
		e.SettledAt = *settled
	}
	return e, err
}

// ClaimOutcome says what a claim found.
type ClaimOutcome int

// Claim outcomes.
const (
	// ClaimWon: this caller committed the pending row and may call the provider.
	ClaimWon ClaimOutcome = iota + 1
	// ClaimDone: the effect already happened at the current epoch; do nothing.
	ClaimDone
	// ClaimInDoubt: another attempt is pending or unknown; recovery or a
	// human settles it, never a second call.
	ClaimInDoubt
	// ClaimStranded: the provider holds it and it can never complete.
	ClaimStranded
	// ClaimGateClosed: the claim's gate kept it out (ClaimOne): its
	// campaign does not run that plan now, or its queue is paused.
	ClaimGateClosed
	// ClaimSuppressed: the target's address is suppressed (it
	// unsubscribed, bounced hard, complained, or an admin said so): it is
	// recorded as suppressed for its plan and never claimed for it
	// (Claim.SuppressionID names the entry).
	ClaimSuppressed
)

func (o ClaimOutcome) String() string {
	switch o {
	case ClaimWon:
		return "won"
	case ClaimDone:
		return "already-done"
	case ClaimInDoubt:
		return "in-doubt"
	case ClaimStranded:
		return "blocked-stranded"
	case ClaimGateClosed:
		return "gate-closed"
	case ClaimSuppressed:
		return "suppressed"
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// ClaimParams names the effect to start and who starts it.
type ClaimParams struct {
	Key   Key
	Owner string // the worker's identity, e.g. "host/pid/client"
	JobID int64  // the River job, 0 if none
	// PlanID and Ordinal name the plan target being executed (0 if none).
	PlanID  int64
	Ordinal int
}

// Claim is the result of Store.Claim.
type Claim struct {
	Outcome ClaimOutcome
	// Effect is the new pending row when won, otherwise the row that blocks.
	Effect Effect
	// SuppressionID is the suppression entry that kept the target out
	// (ClaimSuppressed).
	SuppressionID int64
}

// Claim commits a pending row for key at its current epoch, unless a
// blocking row is already there. The partial unique index decides between
// concurrent callers: exactly one wins, the others learn what blocks them.
// It is ClaimOne without a gate.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claim, error) {
	return s.ClaimOne(ctx, ClaimRequest{ClaimParams: p}, Gate{})
}

// blocking returns the row holding key at its current epoch.
func (s *Store) blocking(ctx context.Context, key Key) (Effect, error) {
	e, err := scanEffect(s.db.QueryRow(ctx, `
		SELECT `+effectCols+` FROM effect
		WHERE key = $1
		  AND epoch = `+currentEpoch+`
		  AND state IN `+blockingStates, string(key)))
	return e, translate(err)
}

// Current returns the row that holds key at its current epoch, or
// onceplan.ErrNotFound when the key is free (never tried, or only failed/revoked).
func (s *Store) Current(ctx context.Context, key Key) (Effect, error) {
	return s.blocking(ctx, key)
}

// History returns every attempt at key, oldest first, across all epochs,
// hot or archived.
func (s *Store) History(ctx context.Context, key Key) ([]Effect, error) {
	rows, err := s.db.Query(ctx, everyAttempt(`key = $1`)+` ORDER BY epoch, id`, string(key))
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
	return out, translate(err)
}

// Newest returns the newest attempts at any of keys, across epochs, newest
// first: at most limit of them.
func (s *Store) Newest(ctx context.Context, keys []Key, limit int) ([]Effect, error) {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	rows, err := s.db.Query(ctx, everyAttempt(`key = ANY ($1::text[])`)+` ORDER BY id DESC LIMIT $2`, ks, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
	return out, translate(err)
}

// FirstAttemptAt is when the first attempt at key and epoch was claimed:
// the first call with that effect id can be no earlier, so a provider's
// dedupe window or probe retention measured from it closes no later than
// the provider's own.
func (s *Store) FirstAttemptAt(ctx context.Context, key Key, epoch int) (time.Time, error) {
	var at time.Time
	err := s.db.QueryRow(ctx, `SELECT min(created_at) FROM effect WHERE key = $1 AND epoch = $2`, string(key), epoch).Scan(&at)
	return at, translate(err)
}

// CountedAttempts is how many attempts at key and epoch count toward the
// target's bound on attempts: every one but those an "over quota" answer
// failed (FailureQuota), which were the provider's pause, not the
// target's failure.
func (s *Store) CountedAttempts(ctx context.Context, key Key, epoch int) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM effect WHERE key = $1 AND epoch = $2 AND failure IS DISTINCT FROM 'quota'`,
		string(key), epoch).Scan(&n)
	return n, translate(err)
}

// OnlyUnsentBefore reports whether every attempt at key and epoch but the
// one with id failed FailureUnsent (true when there is none): then none of
// them reached the provider, and a last failure that did not either ends
// the target FailureUnreached (migration 0041 holds the same rule).
func (s *Store) OnlyUnsentBefore(ctx context.Context, key Key, epoch int, id int64) (bool, error) {
	var reached bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM effect WHERE key = $1 AND epoch = $2 AND id <> $3 AND failure IS DISTINCT FROM 'unsent')`,
		string(key), epoch, id).Scan(&reached)
	return !reached, translate(err)
}

// blockingStates is the SQL list of the states that hold a key at its
// epoch (pending, done, unknown, stranded), as the ledger's unique index
// names them. The ledger's statements write it out, as the claim's ON
// CONFLICT arbiter must; other packages ask the database's effect_blocks
// (migration 0027), which TestBlockingStatesAreTheDatabases keeps equal.
const blockingStates = `('pending', 'done', 'unknown', 'stranded')`

// currentEpoch is the SQL expression for the current epoch of the key in
// $1: 0, or the latest recorded bump (rule 5), as the database's
// effect_current_epoch states it for every statement that needs a key's
// epoch (docs/ARCHITECTURE.md, "Where each rule lives"). A statement that
// names a key's epoch more than once takes it in FROM instead, as
// "CROSS JOIN LATERAL effect_current_epoch(t.key) cur": PostgreSQL inlines
// the function as a lateral subquery whose aggregate is evaluated once per
// row, where a scalar subquery that a pulled-up lateral names twice is
// evaluated twice. Over many keys, "LEFT JOIN effect_bumped_epoch() cur
// ON cur.key = t.key" and coalesce(cur.epoch, 0) hash the few bumps once
// instead of probing effect_bump per key.
const currentEpoch = `(SELECT cur.epoch FROM effect_current_epoch($1) cur)`

// CurrentEpoch returns key's epoch: 0, or the number of recorded bumps.
func (s *Store) CurrentEpoch(ctx context.Context, key Key) (int, error) {
	var epoch int
	err := s.db.QueryRow(ctx, `SELECT `+currentEpoch, string(key)).Scan(&epoch)
	return epoch, translate(err)
}

// ResponseKind says which provider interaction produced a raw response.
type ResponseKind string

// Response kinds.
const (
	ResponseSend   ResponseKind = "send"
	ResponseResend ResponseKind = "resend"
	ResponseProbe  ResponseKind = "probe"
	// ResponsePerson is the evidence a person gave with their resolution
	// of a single effect (package toolcall; migration 0028).
	ResponsePerson ResponseKind = "person"
)

// RecordResponse commits the provider's raw answer for an attempt, exactly
// as received, before anything parses it. Returns the response's id.
func (s *Store) RecordResponse(ctx context.Context, effectID int64, kind ResponseKind, body []byte) (int64, error) {
	ids, err := s.recordResponses(ctx, []ResponseRecord{{EffectID: effectID, Kind: kind, Body: body}}, "id")
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// Response is a recorded raw provider answer.
type Response struct {
	ID       int64
	EffectID int64
	Kind     ResponseKind
	// Body is the answer as received: for an attempt a batch call carried,
	// the call's one answer, about all its attempts (Call and Position say
	// which one is this attempt's).
	Body      []byte
	CreatedAt time.Time
	// Call is the batch call whose answer this is (0: the attempt's own
	// call), and Position the attempt's place in it.
	Call     int64
	Position int
}

// Responses returns the raw answers recorded for an attempt, hot or
// archived, oldest first.
func (s *Store) Responses(ctx context.Context, effectID int64) ([]Response, error) {
	rows, err := s.db.Query(ctx, `
		SELECT r.id, r.effect_id, r.kind, coalesce(b.body, r.body), r.created_at, coalesce(b.batch_id, 0), coalesce(m.position, 0)
		FROM effect_response r
		LEFT JOIN effect_batch_response b ON b.id = r.batch_response_id
		LEFT JOIN effect_batch_member m ON m.batch_id = b.batch_id AND m.effect_id = r.effect_id
		WHERE r.effect_id = $1
		UNION ALL
		SELECT r.id, r.effect_id, r.kind, coalesce(b.body, r.body), r.created_at, coalesce(b.batch_id, 0), coalesce(m.position, 0)
		FROM effect_response_archive r
		LEFT JOIN effect_batch_response_archive b ON b.id = r.batch_response_id
		LEFT JOIN effect_batch_member_archive m ON m.batch_id = b.batch_id AND m.effect_id = r.effect_id
		WHERE r.effect_id = $1
		ORDER BY 1`, effectID)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Response, error) {
		var x Response
		var kind string
		err := r.Scan(&x.ID, &x.EffectID, &kind, &x.Body, &x.CreatedAt, &x.Call, &x.Position)
		x.Kind = ResponseKind(kind)
		return x, err
	})
	return out, translate(err)
}

// SettleParams is a worker's (or recovery's) verdict on a pending attempt.
type SettleParams struct {
	EffectID int64
	State    State  // done, failed, unknown or stranded
	Receipt  string // required for done: the provider's id for the effect
	Reason   string // required for failed, unknown, stranded
	// Failure says, for failed, whether it is final; "" is FailureRetry
	// (the key is free and nothing says the target is refused for good).
	Failure Failure
}

// Settle moves a pending attempt to its outcome. Done, failed and stranded
// are refused unless a raw response was recorded first.
func (s *Store) Settle(ctx context.Context, p SettleParams) (Effect, error) {
	rows, err := s.settle(ctx, []SettleParams{p}, effectCols)
	if err != nil {
		return Effect{}, err
	}
	effs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
	if err != nil {
		return Effect{}, translate(err)
	}
	if len(effs) == 0 {
		return Effect{}, fmt.Errorf("%w: effect %d", onceplan.ErrNotFound, p.EffectID)
	}
	return effs[0], nil
}

// Outcome is a resolver's verdict on an unknown effect.
type Outcome string

// Outcomes of a resolution.
const (
	Delivered    Outcome = "delivered"
	NotDelivered Outcome = "not_delivered"
)

// ResolveParams settles the unknown attempt at key's current epoch.
type ResolveParams struct {
	Key     Key
	Outcome Outcome
	// Actor is who decided: "user:ann@example.com" for a human, or
	// "probe:<provider>" when a probe's recorded answer settles it.
	Actor  string
	Reason string
	// Receipt is, for delivered, the provider's id for the effect when the
	// resolver knows it (a probe found it, a resend was answered with it):
	// what a bounce or an export naming that id is matched against.
	Receipt string
	// Failure is, for not delivered, whether the target is sent again
	// (FailureRetry, the default) or failed for good (FailureExhausted,
	// when recovery finds it has no attempts left).
	Failure Failure
}

// Resolve settles an unknown effect as done (delivered) or failed (not
// delivered, which frees the key so the target is sent once more).
func (s *Store) Resolve(ctx context.Context, p ResolveParams) (Effect, error) {
	var to State
	switch p.Outcome {
	case Delivered:
		to = StateDone
	case NotDelivered:
		to = StateFailed
	default:
		return Effect{}, fmt.Errorf("%w: outcome must be %q or %q, not %q", ErrMissingEvidence, Delivered, NotDelivered, p.Outcome)
	}
	if strings.TrimSpace(p.Actor) == "" || strings.TrimSpace(p.Reason) == "" {
		return Effect{}, fmt.Errorf("%w: a resolution needs who and why", ErrMissingEvidence)
	}
	// Not delivered frees the key: the target is to be sent once more.
	var failure *string
	if to == StateFailed {
		failure = new(string(cmp.Or(p.Failure, FailureRetry)))
	}
	e, err := scanEffect(s.db.QueryRow(ctx, `
		UPDATE effect SET state = $2::effect_state, resolved_by = $3, resolution = $4,
		       receipt = CASE WHEN $2::effect_state = 'done' THEN nullif($5, '') END, failure = $6
		WHERE key = $1 AND state = 'unknown'
		  AND epoch = `+currentEpoch+`
		RETURNING `+effectCols, string(p.Key), string(to), p.Actor, p.Reason, p.Receipt, failure))
	if errors.Is(err, pgx.ErrNoRows) {
		return Effect{}, s.notIn(ctx, p.Key, StateUnknown)
	}
	return e, translate(err)
}

// RevokeParams withdraws the done or stranded effect at key's current epoch.
type RevokeParams struct {
	Key    Key
	Actor  string
	Reason string
}

// Revoke marks the done or stranded attempt at key's current epoch revoked.
// A revoked row no longer blocks the key.
func (s *Store) Revoke(ctx context.Context, p RevokeParams) (Effect, error) {
	if strings.TrimSpace(p.Actor) == "" || strings.TrimSpace(p.Reason) == "" {
		return Effect{}, fmt.Errorf("%w: a revocation needs who and why", ErrMissingEvidence)
	}
	e, err := scanEffect(s.db.QueryRow(ctx, `
		UPDATE effect SET state = 'revoked', revoked_by = $2, revoke_reason = $3
		WHERE key = $1 AND state IN ('done', 'stranded')
		  AND epoch = `+currentEpoch+`
		RETURNING `+effectCols, string(p.Key), p.Actor, p.Reason))
	if errors.Is(err, pgx.ErrNoRows) {
		return Effect{}, s.notIn(ctx, p.Key, StateDone)
	}
	return e, translate(err)
}

// notIn explains why no row at key's current epoch was in the wanted state.
func (s *Store) notIn(ctx context.Context, key Key, want State) error {
	cur, err := s.blocking(ctx, key)
	switch {
	case errors.Is(err, onceplan.ErrNotFound):
		return fmt.Errorf("%w: key %s has no %s effect at its current epoch", onceplan.ErrNotFound, key, want)
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: the effect for key %s is %s, not %s", ErrIllegalTransition, key, cur.State, want)
}

// ActorKind says whether a person or a registered policy bumped an epoch.
type ActorKind string

// Actor kinds for bumps.
const (
	ActorHuman  ActorKind = "human"
	ActorPolicy ActorKind = "policy"
)

// BumpParams asks for a deliberate new effect on a key.
type BumpParams struct {
	Key       Key
	ActorKind ActorKind
	Actor     string
	Policy    string // the registered policy's name when ActorKind is policy
	Reason    string
}

// EpochBump is one recorded bump of a key: who moved it to Epoch, and why.
type EpochBump struct {
	Epoch     int
	ActorKind ActorKind
	Actor     string
	Reason    string
	CreatedAt time.Time
}

// Bumps returns key's recorded bumps, by epoch, hot or archived (a key's
// bumps move with its campaign: docs/ARCHITECTURE.md, "The archive").
func (s *Store) Bumps(ctx context.Context, key Key) ([]EpochBump, error) {
	const cols = `epoch, actor_kind, actor, reason, created_at`
	rows, err := s.db.Query(ctx, `SELECT `+cols+` FROM effect_bump WHERE key = $1
		UNION ALL SELECT `+cols+` FROM effect_bump_archive WHERE key = $1 ORDER BY epoch`, string(key))
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EpochBump, error) {
		var b EpochBump
		err := r.Scan(&b.Epoch, &b.ActorKind, &b.Actor, &b.Reason, &b.CreatedAt)
		return b, err
	})
	return out, translate(err)
}

// Bump moves key to its next epoch so that one more effect may happen. It is
// refused while an attempt at the current epoch is pending or unknown: settle
// the doubt first, or a second effect could race the first.
func (s *Store) Bump(ctx context.Context, p BumpParams) (int, error) {
	if _, err := ParseKey(string(p.Key)); err != nil {
		return 0, err
	}
	var epoch int
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Serialise bumps and claims' view of the key within this transaction.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, string(p.Key)); err != nil {
			return err
		}
		var inDoubt bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM effect WHERE key = $1 AND state IN ('pending', 'unknown')
			  AND epoch = `+currentEpoch+`)`,
			string(p.Key)).Scan(&inDoubt); err != nil {
			return err
		}
		if inDoubt {
			return fmt.Errorf("%w: key %s has an attempt in doubt at its current epoch; resolve it before bumping", onceplan.ErrConflict, p.Key)
		}
		var policy *string
		if p.Policy != "" {
			policy = &p.Policy
		}
		return tx.QueryRow(ctx, `
			INSERT INTO effect_bump (key, epoch, actor_kind, actor, policy, reason)
			SELECT $1, coalesce(max(epoch), 0) + 1, $2, $3, $4, $5 FROM effect_bump WHERE key = $1
			RETURNING epoch`, string(p.Key), string(p.ActorKind), p.Actor, policy, p.Reason).Scan(&epoch)
	})
	return epoch, translate(err)
}

// policyNameRE is bump_policy.name's CHECK (migrations/0001_ledger.up.sql).
var policyNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidPolicyName reports whether name may name a bump policy, as the
// database's check says, so that a caller can refuse a bad one before it
// reaches a database.
func ValidPolicyName(name string) bool { return policyNameRE.MatchString(name) }

// RegisterPolicy records a policy allowed to bump epochs. Policies are
// registered before they act, by a named person, and never change. Only
// the schema's owner may (migration 0014: `onceplan policy add`).
func (s *Store) RegisterPolicy(ctx context.Context, name, description, registeredBy string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO bump_policy (name, description, registered_by) VALUES ($1, $2, $3)`,
		name, description, registeredBy)
	return translate(err)
}

// Policy is a registered bump policy: a name that a policy bump
// (BumpParams.Policy) may cite, with what it is for and who registered it.
type Policy struct {
	Name         string
	Description  string
	RegisteredBy string
	CreatedAt    time.Time
}

// Policies lists the registered bump policies by name. The application
// role may read them (and bump under them) but not add one: registering
// is the schema owner's (`onceplan policy add`).
func (s *Store) Policies(ctx context.Context) ([]Policy, error) {
	rows, err := s.db.Query(ctx, `SELECT name, description, registered_by, created_at FROM bump_policy ORDER BY name`)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Policy, error) {
		var p Policy
		err := r.Scan(&p.Name, &p.Description, &p.RegisteredBy, &p.CreatedAt)
		return p, err
	})
	return out, translate(err)
}

// Get reads one attempt by id, hot or archived.
func (s *Store) Get(ctx context.Context, id int64) (Effect, error) {
	e, err := scanEffect(s.db.QueryRow(ctx, everyAttempt(`id = $1`), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("%w: effect %d", onceplan.ErrNotFound, id)
	}
	return e, translate(err)
}
