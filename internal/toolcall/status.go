package toolcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// State is where a single effect stands: a ledger state of its latest
// attempt at the key's current epoch, or, before any attempt, where its
// approval stands.
type State string

// States besides the ledger's (ledger.State values are States too).
const (
	// StateNew: nothing recorded for the key yet.
	StateNew State = ""
	// StateAwaitingApproval: the tool requires approval and no person has
	// decided on these args yet.
	StateAwaitingApproval State = "awaiting_approval"
	// StateRejected: a person rejected these args; nothing is performed.
	StateRejected State = "rejected"
)

// Status is the one read model of a single effect ("what is this key's
// state now?"): the begin's answers, GET /api/v1/effects/{key}, the MCP
// tools, the UI and the audit all read it.
type Status struct {
	Key         ledger.Key
	Tool        string
	Event       string
	Target      ledger.Target
	AmountMinor int64
	Scope       string
	// ArgsDigest is the digest of the args the key is bound to (once an
	// attempt began), else of the args awaiting approval.
	ArgsDigest string
	Args       json.RawMessage
	Bound      bool // the key is bound to ArgsDigest for good

	State State
	// holds: the latest attempt holds the key at its epoch, as the
	// ledger's rule says (effect_blocks, migration 0027); KeyFree asks it.
	holds   bool
	Epoch   int
	Attempt int
	// EffectID is the latest attempt's ledger row (0 before any).
	EffectID   int64
	LeaseID    string
	LeaseUntil time.Time
	// LeaseSeconds is the whole seconds from the read until LeaseUntil, by
	// the database's clock (rounded down; 0 once it ended).
	LeaseSeconds int
	// LeaseExpired: the lease ended (by the database's clock) before a
	// settle.
	LeaseExpired bool
	Holder       string
	Takeovers    int
	Receipt      string
	Reason       string
	ResolvedBy   string
	Resolution   string
	// Raw is the latest raw answer recorded for the attempt (the outside
	// system's, a probe's, or a person's evidence), exactly as received;
	// RawKind says whose (RawSource).
	Raw       []byte
	RawKind   ledger.ResponseKind
	UpdatedAt time.Time
	// CreatedBy is the user the call was begun for, whose call it is (0:
	// not known, a call begun before it was recorded): they may read it
	// (Reader.Call).
	CreatedBy int64

	// Policy is the attempt's (the policy it was begun under), else the
	// tool's policy in force.
	Policy Policy
	// ApprovalID is the approval request of ArgsDigest, when the tool
	// requires approval; ApprovedBy names who approved it, and
	// ApprovalAskedBy is the user who asked for it: it approves that
	// user's call only.
	ApprovalID      int64
	ApprovedBy      string
	ApprovalAskedBy int64
	// RejectReason is the person's reason (StateRejected).
	RejectReason string

	// FirstCallAt is when the outside system may first have seen the key:
	// the first attempt at the key's current epoch (zero before any). Now
	// is the database's clock when the status was read.
	FirstCallAt time.Time
	Now         time.Time
	// Closed, for a call in doubt, says why its recovery cannot act: the
	// outside system's dedupe window or probe retention has passed, so a
	// person resolves it ("" otherwise).
	Closed string
}

// RawSource says whose answer Raw is: "settle" (the outside system's, as
// the caller settled with it), "probe" (the tool's probe, asked by
// recovery) or "person" (the evidence of who resolved it); "" without
// one.
func (s Status) RawSource() string {
	switch s.RawKind {
	case ledger.ResponseSend, ledger.ResponseResend:
		return "settle"
	case ledger.ResponseProbe:
		return "probe"
	case ledger.ResponsePerson:
		return "person"
	}
	return ""
}

// KeyFree reports whether nothing blocks the key now: no attempt holds it
// (the ledger's rule, effect_blocks) and its args are neither awaiting a
// person's approval nor rejected, so the next begin performs the call (or
// asks for its approval). A call resolved as not delivered is failed, and
// free.
func (s Status) KeyFree() bool {
	return !s.holds && s.State != StateAwaitingApproval && s.State != StateRejected
}

// InDoubt reports whether the effect may or may not have happened and
// nobody may perform it now: pending or unknown.
func (s Status) InDoubt() bool {
	return s.State == State(ledger.StatePending) || s.State == State(ledger.StateUnknown)
}

// latestAttemptFrom is the FROM clause of every read of calls: each
// intent c, its key's current epoch cur, its latest attempt x at that
// epoch (the blocking one when there is one: none can be inserted after
// it while it blocks) and the attempt's lease a. The attempts and their
// raw answers are the ledger's, read through effect_attempt and
// effect_latest_response (migration 0030), as every statement of this
// package that joins them does.
var latestAttemptFrom = `
FROM tool_call c
CROSS JOIN LATERAL effect_current_epoch(c.key) cur
LEFT JOIN LATERAL (SELECT e.* FROM effect_attempt() e WHERE e.key = c.key AND e.epoch = cur.epoch ORDER BY e.id DESC LIMIT 1) x ON true
LEFT JOIN tool_attempt a ON a.effect_id = x.id`

// statusQuery reads the call's intent and its latest attempt at the key's
// current epoch ($1), with the attempt's policy, who approved its args and
// its latest raw answer, in one snapshot.
var statusQuery = `
SELECT c.identity, c.args, c.args_digest, cur.epoch,
       coalesce(x.id, 0), coalesce(x.state::text, ''), coalesce(effect_blocks(x.state), false), coalesce(x.attempt, 0),
       coalesce(x.receipt, ''), coalesce(x.reason, ''), coalesce(x.resolved_by, ''), coalesce(x.resolution, ''),
       x.updated_at,
       coalesce(a.lease_id::text, ''), a.lease_until, coalesce(a.lease_until < now(), false), coalesce(a.holder, ''),
       coalesce(greatest(0, floor(extract(epoch FROM a.lease_until - now())))::int, 0), coalesce(c.created_by_user, 0),
       coalesce(a.takeovers, 0), coalesce(a.policy_id, 0), coalesce(a.approval_id, 0), coalesce(u.email, ''), coalesce(ar.requested_by_user, 0),
       r.body, coalesce(r.kind, ''),
       (SELECT min(f.created_at) FROM effect_attempt() f WHERE f.key = c.key AND f.epoch = cur.epoch), now()` + latestAttemptFrom + `
LEFT JOIN tool_approval ap ON ap.request_id = a.approval_id
LEFT JOIN tool_approval_request ar ON ar.id = a.approval_id
LEFT JOIN user_identity() u ON u.id = ap.decided_by
LEFT JOIN LATERAL effect_latest_response(x.id) r ON true
WHERE c.key = $1`

// identity is the stored canonical JSON of a key's identity.
type identity struct {
	Event       string        `json:"event"`
	Tool        string        `json:"tool"`
	Target      ledger.Target `json:"target"`
	AmountMinor int64         `json:"amount_minor"`
	Scope       string        `json:"scope"`
}

func (st *Status) setIdentity(canonical string) error {
	var id identity
	if err := json.Unmarshal([]byte(canonical), &id); err != nil {
		return fmt.Errorf("the stored identity of %s: %w", st.Key, err)
	}
	st.Event, st.Tool, st.Target, st.AmountMinor, st.Scope = id.Event, id.Tool, id.Target, id.AmountMinor, id.Scope
	return nil
}

// ErrNoEffect: no single effect has the key.
var ErrNoEffect = fmt.Errorf("%w: no single effect", onceplan.ErrNotFound)

// getStatus reads key's status. Before the key is bound (no attempt yet),
// digest names the args whose approval to report ("" : the latest
// request's).
func getStatus(ctx context.Context, db DB, key ledger.Key, digest string) (Status, error) {
	st := Status{Key: key}
	var (
		canonical  string
		state      string
		updated    *time.Time
		leaseUntil *time.Time
		policyID   int64
		raw        []byte
		rawKind    string
		firstCall  *time.Time
	)
	err := db.QueryRow(ctx, statusQuery, string(key)).Scan(&canonical, &st.Args, &st.ArgsDigest, &st.Epoch,
		&st.EffectID, &state, &st.holds, &st.Attempt, &st.Receipt, &st.Reason, &st.ResolvedBy, &st.Resolution, &updated,
		&st.LeaseID, &leaseUntil, &st.LeaseExpired, &st.Holder, &st.LeaseSeconds, &st.CreatedBy, &st.Takeovers, &policyID, &st.ApprovalID, &st.ApprovedBy, &st.ApprovalAskedBy, &raw, &rawKind,
		&firstCall, &st.Now)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return requestStatus(ctx, db, key, digest)
	case err != nil:
		return Status{}, err
	}
	st.Bound = true
	st.State, st.Raw, st.RawKind = State(state), raw, ledger.ResponseKind(rawKind)
	if updated != nil {
		st.UpdatedAt = *updated
	}
	if leaseUntil != nil {
		st.LeaseUntil = *leaseUntil
	}
	if firstCall != nil {
		st.FirstCallAt = *firstCall
	}
	if err := st.setIdentity(canonical); err != nil {
		return Status{}, err
	}
	if policyID != 0 {
		st.Policy, err = policyByID(ctx, db, policyID)
	} else {
		st.Policy, err = CurrentPolicy(ctx, db, st.Tool)
	}
	if err != nil {
		return Status{}, err
	}
	if st.State == State(ledger.StateUnknown) || (st.State == State(ledger.StatePending) && st.LeaseExpired) {
		st.Closed = st.Policy.Closed(st.FirstCallAt, st.Now, MinLease)
	}
	if st.State == StateNew && st.Policy.ApprovalRequired {
		// Bound by an earlier attempt that failed or was revoked: a new
		// attempt needs the approval of the bound args, as any.
		if err := st.setApproval(ctx, db, st.ArgsDigest); err != nil {
			return Status{}, err
		}
	}
	return st, nil
}

// requestStatus is the status of a key with no intent yet: its approval
// request of digest (or the latest), else ErrNoEffect.
func requestStatus(ctx context.Context, db DB, key ledger.Key, digest string) (Status, error) {
	st := Status{Key: key}
	var canonical string
	var policyID int64
	err := db.QueryRow(ctx, `
		SELECT identity, args, args_digest, policy_id, requested_by_user FROM tool_approval_request
		WHERE key = $1 AND ($2 = '' OR args_digest = $2) ORDER BY id DESC LIMIT 1`, string(key), digest).
		Scan(&canonical, &st.Args, &st.ArgsDigest, &policyID, &st.CreatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, fmt.Errorf("%w has key %s", ErrNoEffect, key)
	}
	if err != nil {
		return Status{}, err
	}
	if err := st.setIdentity(canonical); err != nil {
		return Status{}, err
	}
	if st.Policy, err = CurrentPolicy(ctx, db, st.Tool); err != nil {
		return Status{}, err
	}
	return st, st.setApproval(ctx, db, st.ArgsDigest)
}

// setApproval fills in where the approval of digest stands, for a key
// no attempt holds.
func (st *Status) setApproval(ctx context.Context, db DB, digest string) error {
	var decision, reason, by string
	err := db.QueryRow(ctx, `
		SELECT r.id, r.requested_by_user, coalesce(a.decision, ''), coalesce(a.reason, ''), coalesce(u.email, '')
		FROM tool_approval_request r
		LEFT JOIN tool_approval a ON a.request_id = r.id
		LEFT JOIN user_identity() u ON u.id = a.decided_by
		WHERE r.key = $1 AND r.args_digest = $2`, string(st.Key), digest).Scan(&st.ApprovalID, &st.ApprovalAskedBy, &decision, &reason, &by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		st.ApprovalID, st.ApprovalAskedBy = 0, 0
		st.State = StateNew
		return nil
	case err != nil:
		return err
	}
	switch decision {
	case "approved":
		st.State, st.ApprovedBy = StateNew, by
	case "rejected":
		st.State, st.RejectReason = StateRejected, reason
	default:
		st.State = StateAwaitingApproval
	}
	return nil
}
