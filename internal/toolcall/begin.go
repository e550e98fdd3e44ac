package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// BeginParams is one call's intent.
type BeginParams struct {
	// Identity names the operation; its ledger v1 key is the call's key.
	Identity ledger.KeyInput
	// Args is the JSON the tool is called with: stored and hashed, bound
	// to the key, never part of it. Required (an object, array or value).
	Args json.RawMessage
	// Recovery is the caller's declaration of the tool's recovery ("":
	// whatever is registered); ProbeURL the probe it declares. A
	// declaration that differs from the registration is refused: the
	// registry, written by an admin, is what recovery follows.
	Recovery Recovery
	ProbeURL string
	// Lease is how long the caller has to settle or heartbeat (default
	// DefaultLease, MinLease to MaxLease).
	Lease time.Duration
}

// Outcome says what a begin found.
type Outcome int

// Begin outcomes, each with its HTTP status in the API.
const (
	// Perform (201): the caller holds the lease and may perform the call
	// now, passing the key to the outside system.
	Perform Outcome = iota + 1
	// AlreadyDone (200): it happened; replay the recorded result.
	AlreadyDone
	// InDoubt (409): pending elsewhere, unknown, stranded or rejected: do
	// not call (Next says what happens next).
	InDoubt
	// AwaitingApproval (202): a person must approve these exact args
	// first.
	AwaitingApproval
)

// BeginResult is a begin's answer.
type BeginResult struct {
	Outcome Outcome
	Status  Status
	// Takeover: the previous attempt's lease ended in doubt and the tool
	// deduplicates by key, so this caller performs it again with the same
	// key (the outside system applies it once).
	Takeover bool
	// Registered: this begin was the tool's first use and registered it
	// (no recovery, no approval).
	Registered bool
	// Busy (with InDoubt): the key's state kept changing under this
	// begin; Status is where it stands now: ask again shortly.
	Busy bool
}

// ArgsMismatchError is a begin whose key is bound to other args (422).
type ArgsMismatchError struct {
	Key          ledger.Key
	StoredDigest string
	GivenDigest  string
}

// ErrArgsMismatch is wrapped by ArgsMismatchError.
var ErrArgsMismatch = onceplan.New(onceplan.CodeArgsMismatch, "args mismatch")

func (e *ArgsMismatchError) Error() string {
	return fmt.Sprintf("key %s is bound to other args (digest %s; these have digest %s): the same event, tool and target with changed args is a different operation — give it a new event id",
		e.Key, e.StoredDigest, e.GivenDigest)
}

// Is makes errors.Is(err, ErrArgsMismatch) hold.
func (e *ArgsMismatchError) Is(target error) bool { return target == ErrArgsMismatch }

// ErrorCode makes a changed call a [onceplan.CodeArgsMismatch].
func (e *ArgsMismatchError) ErrorCode() onceplan.Code { return onceplan.CodeArgsMismatch }

// validated is a begin's checked input.
type validated struct {
	key      ledger.Key
	identity string // canonical JSON, with the principal and "space":"single" (KeyOf)
	in       ledger.KeyInput
	args     []byte
	lease    time.Duration
	// earlier are the keys a call of this identity got before single
	// effects were their users' own (migration 0037: the v1 key of the
	// identity without the principal) and before they had a key space of
	// their own (migration 0026: without the space member either), with
	// those identities. legacy: the call was begun then, by the same
	// user, and keeps that key (keyInUse).
	earlier []earlierKey
	legacy  bool
}

// earlierKey is a key, and its identity, that a call was begun under
// before migration 0026 or 0037 changed the identity of calls.
type earlierKey struct {
	key      ledger.Key
	identity string
}

// keyFields are the fields a key input's error may name, as the API's
// request names them.
var keyFields = []string{"event", "tool", "target", "amount_minor", "scope"}

// validate checks p as the call of principal (a user's id).
func (p BeginParams) validate(principal int64) (validated, error) {
	if err := ValidateTool(p.Identity.Tool); err != nil {
		return validated{}, err
	}
	for _, f := range []struct{ name, value string }{
		{"event", p.Identity.Event}, {"scope", p.Identity.Scope}, {"target", p.Identity.Target.Value},
	} {
		if len(f.value) > MaxIdentityBytes {
			return validated{}, &onceplan.FieldError{Field: f.name, Reason: fmt.Sprintf("is %d bytes; at most %d", len(f.value), MaxIdentityBytes)}
		}
	}
	canonical, err := ledger.CanonicalJSON(p.Identity)
	if err != nil {
		field := "target"
		for _, f := range keyFields {
			if strings.HasPrefix(err.Error(), f+" ") || strings.HasPrefix(err.Error(), "target "+f) {
				field = f
				break
			}
		}
		return validated{}, &onceplan.FieldError{Field: field, Reason: err.Error()}
	}
	var in ledger.KeyInput
	if err := json.Unmarshal(canonical, &in); err != nil {
		return validated{}, err
	}
	identity, err := singleIdentity(canonical, principal)
	if err != nil {
		return validated{}, err
	}
	spaced, err := spacedIdentity(canonical)
	if err != nil {
		return validated{}, err
	}
	args := bytes.TrimSpace(p.Args)
	switch {
	case len(args) == 0:
		return validated{}, &onceplan.FieldError{Field: "args", Reason: "is required: the JSON the tool is called with (an empty object {} when it takes none)"}
	case len(args) > MaxArgsBytes:
		return validated{}, &onceplan.FieldError{Field: "args", Reason: fmt.Sprintf("is %d bytes; at most %d", len(args), MaxArgsBytes)}
	case !json.Valid(args) || !utf8.Valid(args):
		return validated{}, &onceplan.FieldError{Field: "args", Reason: "is not valid JSON"}
	case bytes.Contains(args, []byte(`\u0000`)):
		return validated{}, &onceplan.FieldError{Field: "args", Reason: "contains a NUL character (\\u0000), which PostgreSQL's JSON cannot hold"}
	}
	lease, err := leaseOrDefault(p.Lease)
	if err != nil {
		return validated{}, err
	}
	if _, err := ParseRecovery(string(p.Recovery)); err != nil {
		return validated{}, err
	}
	return validated{key: keyOfIdentity(identity), identity: string(identity), in: in, args: args, lease: lease,
		earlier: []earlierKey{
			{key: keyOfIdentity(spaced), identity: string(spaced)},
			{key: keyOfIdentity(canonical), identity: string(canonical)},
		}}, nil
}

// keyInUse switches v to a key its call was begun under before calls
// were their users' own (migration 0037) or had a key space of their own
// (migration 0026), when an intent is recorded under that key for this
// very user (principal) and none under the current key: a runtime
// retrying such a call across an upgrade finds it, and never performs it
// a second time. A call begun then by another user, or by nobody known
// (created_by_user NULL), is never handed to this user's begin: it is
// another user's call. No intent is ever written under an earlier key
// again (migrations 0026 and 0037), so the answer cannot change between
// two begins.
func (s *Service) keyInUse(ctx context.Context, v validated, principal int64) (validated, error) {
	earlier := make([]string, len(v.earlier))
	for i, e := range v.earlier {
		earlier[i] = string(e.key)
	}
	var key string
	err := s.pool.QueryRow(ctx, `SELECT key FROM tool_call
		WHERE key = $1 OR (key = ANY($2) AND created_by_user = $3)
		ORDER BY key = $1 DESC, array_position($2, key) LIMIT 1`,
		string(v.key), earlier, principal).Scan(&key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return v, nil
	case err != nil:
		return v, err
	}
	for _, e := range v.earlier {
		if string(e.key) == key {
			v.key, v.identity, v.legacy = e.key, e.identity, true
		}
	}
	return v, nil
}

// policyFor is the tool's policy in force, registering its first use, and
// checks the caller's declaration against it. The first use is recorded
// only when the declaration agrees with what a first use registers.
func (s *Service) policyFor(ctx context.Context, a auth.Actor, v validated, p BeginParams) (Policy, bool, error) {
	pol, err := CurrentPolicy(ctx, s.pool, v.in.Tool)
	registered := false
	switch {
	case errors.Is(err, ErrNotRegistered):
		if p.Recovery != "" && p.Recovery != RecoveryNone {
			return Policy{}, false, &onceplan.FieldError{Field: "recovery", Reason: fmt.Sprintf(
				"tool %s is not registered, and a tool's first use registers it with no recovery and no approval: only an admin declares %s (onceplan tool add --name %s --recovery %s), so begin without declaring one, or have it registered first",
				v.in.Tool, p.Recovery, v.in.Tool, p.Recovery)}
		}
		if pol, err = registerFirstUse(ctx, s.pool, v.in.Tool, a.String()); err != nil {
			return Policy{}, false, err
		}
		registered = pol.FirstUse && pol.RegisteredBy == a.String()
	case err != nil:
		return Policy{}, false, err
	}
	if p.Recovery != "" && (p.Recovery != pol.Recovery || (p.ProbeURL != "" && p.ProbeURL != pol.ProbeURL)) {
		return Policy{}, false, &onceplan.FieldError{Field: "recovery", Reason: fmt.Sprintf(
			"tool %s is registered with %s (by %s), not what this call declares (recovery %s): recovery follows the registration; an admin changes it with onceplan tool add",
			pol.Tool, pol.Summary(), pol.RegisteredBy, p.Recovery)}
	}
	return pol, registered, nil
}

// Begin commits the intent of a call before its body runs, or says what
// holds its key (see Outcome). The caller performs the call only on
// Perform, passing the key to the outside system.
func (s *Service) Begin(ctx context.Context, a auth.Actor, p BeginParams) (BeginResult, error) {
	if err := auth.Authorize(a, auth.ActionPerform); err != nil {
		return BeginResult{}, err
	}
	if a.UserID == 0 {
		return BeginResult{}, fmt.Errorf("%w: a tool call belongs to the user who begins it, and %s names none", onceplan.ErrForbidden, a)
	}
	v, err := p.validate(a.UserID)
	if err != nil {
		return BeginResult{}, err
	}
	if v, err = s.keyInUse(ctx, v, a.UserID); err != nil {
		return BeginResult{}, err
	}
	_, registered, err := s.policyFor(ctx, a, v, p)
	if err != nil {
		return BeginResult{}, err
	}
	var digest string
	if err := s.pool.QueryRow(ctx, `SELECT tool_args_digest($1::jsonb)`, string(v.args)).Scan(&digest); err != nil {
		return BeginResult{}, err
	}
	// Each round either answers or finds that the key's state changed
	// under it (a recovery, a settle, another begin) and reads it again; a
	// few rounds always suffice. A change under a round's write is refused
	// by PostgreSQL, and is a reason for another round, never the answer:
	// a begin answers with the call's status (docs/ARCHITECTURE.md,
	// "Single agent effects").
	for range 5 {
		res, again, err := s.begin(ctx, a, v, digest)
		switch {
		case err != nil && changedUnder(err):
			s.logger.Info("a tool call's state changed under its begin; reading it again", "key", string(v.key), "err", err)
		case err != nil || !again:
			res.Registered = registered
			return res, err
		}
	}
	st, err := s.statusOrNew(ctx, v, digest)
	if err != nil {
		return BeginResult{}, err
	}
	return BeginResult{Outcome: InDoubt, Status: st, Busy: true, Registered: registered}, nil
}

// changedUnder reports whether err is PostgreSQL's refusal of a write
// whose premise another transaction changed meanwhile: a conflict, or an
// outcome or transition that is no longer there to make.
func changedUnder(err error) bool {
	return errors.Is(err, onceplan.ErrConflict) || errors.Is(err, ledger.ErrIllegalTransition) || errors.Is(err, ledger.ErrWriteOnce)
}

// statusOrNew is the status of v's key, or the status of a key nothing
// holds yet (under the tool's policy in force).
func (s *Service) statusOrNew(ctx context.Context, v validated, digest string) (Status, error) {
	st, err := getStatus(ctx, s.pool, v.key, digest)
	if !errors.Is(err, ErrNoEffect) {
		return st, err
	}
	pol, err := CurrentPolicy(ctx, s.pool, v.in.Tool)
	return Status{Key: v.key, Policy: pol}, err
}

// begin is one round of Begin; again asks for another round.
func (s *Service) begin(ctx context.Context, a auth.Actor, v validated, digest string) (BeginResult, bool, error) {
	st, err := s.statusOrNew(ctx, v, digest)
	if err != nil {
		return BeginResult{}, false, err
	}
	if st.Bound && st.ArgsDigest != digest {
		return BeginResult{}, false, &ArgsMismatchError{Key: v.key, StoredDigest: st.ArgsDigest, GivenDigest: digest}
	}
	switch ledger.State(st.State) {
	case ledger.StateDone:
		return BeginResult{Outcome: AlreadyDone, Status: st}, false, nil
	case ledger.StateStranded:
		return BeginResult{Outcome: InDoubt, Status: st}, false, nil
	case ledger.StatePending, ledger.StateUnknown:
		if !st.LeaseExpired && st.State == State(ledger.StatePending) {
			return BeginResult{Outcome: InDoubt, Status: st}, false, nil
		}
		if st.Policy.Recovery == RecoveryDedupe && st.Policy.CanTakeOver(st.FirstCallAt, st.Now, v.lease) {
			return s.takeover(ctx, a, st, v.lease)
		}
		// Recover now rather than at the next maintenance round: the
		// caller waits for the answer. A dedupe call whose outside
		// system's window would close before this caller's lease ends is
		// left to a person.
		changed, err := s.recoverAttempt(ctx, st.EffectID, v.lease)
		if err != nil {
			return BeginResult{}, false, err
		}
		if changed {
			return BeginResult{}, true, nil
		}
		// Unchanged by this recovery; someone else's change is read anew.
		now, err := s.statusOrNew(ctx, v, digest)
		if err != nil || now.State != st.State || now.EffectID != st.EffectID {
			return BeginResult{}, err == nil, err
		}
		if now.State == State(ledger.StateUnknown) || (now.State == State(ledger.StatePending) && now.LeaseExpired) {
			now.Closed = now.Policy.Closed(now.FirstCallAt, now.Now, v.lease)
		}
		return BeginResult{Outcome: InDoubt, Status: now}, false, nil
	}
	// The key is free: never tried, or its attempt failed or was revoked.
	pol := st.Policy
	if pol.ApprovalRequired {
		switch st.State {
		case StateRejected:
			return BeginResult{Outcome: InDoubt, Status: st}, false, nil
		case StateAwaitingApproval:
			return BeginResult{Outcome: AwaitingApproval, Status: st}, false, nil
		}
		if st.ApprovalID == 0 {
			st, err := s.requestApproval(ctx, a, v, pol, digest)
			return BeginResult{Outcome: AwaitingApproval, Status: st}, false, err
		}
		if st.ApprovalAskedBy != a.UserID {
			// Only a call begun before calls were their users' own can
			// meet another user's request (migration 0037), whose
			// approval PostgreSQL does not let this call perform.
			return BeginResult{}, false, fmt.Errorf("%w: the approval of these args on key %s was asked for by another user, before calls were their users' own, and approves that user's call only: begin this call with a new event id to ask for an approval of your own",
				onceplan.ErrForbidden, v.key)
		}
	}
	return s.claim(ctx, a, v, digest)
}

// claim binds the intent and commits the pending attempt and its lease in
// one transaction: the ledger's one-element claim decides between
// concurrent callers.
func (s *Service) claim(ctx context.Context, a auth.Actor, v validated, digest string) (BeginResult, bool, error) {
	var won bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A legacy call's intent is there already, and PostgreSQL refuses
		// an identity without the space and principal members (migrations
		// 0026 and 0037).
		if !v.legacy {
			if _, err := tx.Exec(ctx, `INSERT INTO tool_call (key, identity, tool, event, args, created_by, created_by_user)
				VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7) ON CONFLICT (key) DO NOTHING`,
				string(v.key), v.identity, v.in.Tool, v.in.Event, string(v.args), a.String(), a.UserID); err != nil {
				return err
			}
		}
		var stored string
		if err := tx.QueryRow(ctx, `SELECT args_digest FROM tool_call WHERE key = $1`, string(v.key)).Scan(&stored); err != nil {
			return err
		}
		if stored != digest {
			return &ArgsMismatchError{Key: v.key, StoredDigest: stored, GivenDigest: digest}
		}
		c, err := ledger.NewStore(tx).ClaimOne(ctx, ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: v.key, Owner: a.String()}}, ledger.Gate{})
		if err != nil {
			return err
		}
		if c.Outcome != ledger.ClaimWon {
			return nil // another caller holds it: the next round reads what
		}
		won = true
		if _, err := tx.Exec(ctx, `INSERT INTO tool_attempt (effect_id, key, policy_id, holder, lease_until)
			VALUES ($1, $2, 0, $3, now() + make_interval(secs => $4))`,
			c.Effect.ID, string(v.key), a.String(), v.lease.Seconds()); err != nil {
			return refusal(err)
		}
		return recordEvent(ctx, tx, eventParams{Key: v.key, Tool: v.in.Tool, Event: v.in.Event, Action: "begin", Actor: &a,
			EffectID: c.Effect.ID, State: ledger.StatePending, Detail: map[string]any{"args_digest": digest, "attempt": c.Effect.Attempt}})
	})
	if err != nil {
		return BeginResult{}, false, err
	}
	if !won {
		return BeginResult{}, true, nil
	}
	st, err := getStatus(ctx, s.pool, v.key, digest)
	return BeginResult{Outcome: Perform, Status: st}, false, err
}

// takeover hands an attempt in doubt of a deduplicating tool to this caller,
// who performs it again with the same key (docs/ARCHITECTURE.md, "Executing
// one effect": "send again with the same id"). The attempt's row is locked,
// so of two takeovers one wins; the other finds a live lease.
func (s *Service) takeover(ctx context.Context, a auth.Actor, st Status, lease time.Duration) (BeginResult, bool, error) {
	var took bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		d, err := lockDoubt(ctx, tx, st.EffectID)
		if err != nil {
			return err
		}
		if !d.inDoubt() || d.closed(lease) != "" {
			return nil // settled meanwhile, or past the window: read again
		}
		if _, err := tx.Exec(ctx, `UPDATE tool_attempt SET lease_id = gen_random_uuid(), holder = $2,
			lease_until = now() + make_interval(secs => $3), takeovers = takeovers + 1 WHERE effect_id = $1`,
			st.EffectID, a.String(), lease.Seconds()); err != nil {
			return refusal(err)
		}
		took = true
		return recordEvent(ctx, tx, eventParams{Key: st.Key, Tool: st.Tool, Event: st.Event, Action: "takeover", Actor: &a,
			EffectID: st.EffectID, State: d.state,
			Reason: "the lease ended in doubt and the tool deduplicates by key: performed again with the same key",
			Detail: map[string]any{"previous_holder": st.Holder, "takeovers": st.Takeovers + 1}})
	})
	if err != nil || !took {
		return BeginResult{}, err == nil, err
	}
	now, err := getStatus(ctx, s.pool, st.Key, st.ArgsDigest)
	return BeginResult{Outcome: Perform, Status: now, Takeover: true}, false, err
}
