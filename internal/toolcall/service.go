package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/ledger"
)

// Defaults and bounds of a lease.
const (
	// DefaultLease is a begin's lease when the caller names none: the
	// caller heartbeats well within it while the call runs.
	DefaultLease = time.Minute
	MinLease     = time.Second
	MaxLease     = time.Hour
	// MaxArgsBytes bounds a call's args (migration 0021's check).
	MaxArgsBytes = 1 << 20
	// MaxIdentityBytes bounds each text of a call's identity (event,
	// scope, target): they are stored beside the key and indexed, and an
	// index entry holds at most a few kilobytes.
	MaxIdentityBytes = 1000
	// MaxRawBytes bounds a settle's raw answer.
	MaxRawBytes = 4 << 20
	// DefaultProbeTimeout bounds one probe request.
	DefaultProbeTimeout = 10 * time.Second
)

// Options configure a Service.
type Options struct {
	Logger *slog.Logger
	// HTTP asks probes; default a client with DefaultProbeTimeout.
	HTTP *http.Client
}

// Service begins, settles and recovers single effects.
type Service struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	http   *http.Client
	// changes wakes the waiters of a key (Wait) when a transaction that
	// changed its call commits (recordEvent notifies).
	changes *pgnotify.Hub
}

// NewService returns a Service on pool.
func NewService(pool *pgxpool.Pool, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: DefaultProbeTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Service{pool: pool, logger: opts.Logger, http: opts.HTTP, changes: pgnotify.New(pool, ChangeChannel)}
}

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

// ErrLease: the settle's or heartbeat's lease is not the attempt's
// current one (409).
var ErrLease = fmt.Errorf("%w: not the current lease", onceplan.ErrConflict)

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

// leaseOrDefault is a begin's or heartbeat's lease: d, or DefaultLease
// for 0, within MinLease and MaxLease.
func leaseOrDefault(d time.Duration) (time.Duration, error) {
	if d == 0 {
		d = DefaultLease
	}
	if d < MinLease || d > MaxLease {
		return 0, leaseSecondsError(fmt.Sprint(d.Seconds()))
	}
	return d, nil
}

// LeaseOf is the lease a request's lease_seconds names (0: DefaultLease):
// every door that takes a lease as a number of seconds (the API's begin
// and heartbeat, MCP's effect_begin) converts it here, checking the
// number itself before it becomes a duration, so that no number wraps
// around into another lease. Out of range: a field error naming
// lease_seconds.
func LeaseOf(seconds int64) (time.Duration, error) {
	if seconds == 0 {
		return DefaultLease, nil
	}
	if seconds < int64(MinLease/time.Second) || seconds > int64(MaxLease/time.Second) {
		return 0, leaseSecondsError(strconv.FormatInt(seconds, 10))
	}
	return time.Duration(seconds) * time.Second, nil
}

// leaseSecondsError refuses a lease of given seconds.
func leaseSecondsError(given string) error {
	return &onceplan.FieldError{Field: "lease_seconds", Reason: fmt.Sprintf("must be a whole number of seconds from %d to %d (0 or absent: the default, %d), not %s",
		int(MinLease/time.Second), int(MaxLease/time.Second), int(DefaultLease/time.Second), given)}
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

// refusal translates PostgreSQL's refusal of what was not registered or
// approved (OP007) into a conflict, of a campaign target's key (OP008:
// a call begun before single effects had keys of their own) into a
// forbidden action, and the ledger's SQLSTATEs as the ledger does.
func refusal(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "OP007" || pgErr.Code == "OP006"):
		return fmt.Errorf("%w: %s", onceplan.ErrConflict, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "OP008":
		return fmt.Errorf("%w: %s", onceplan.ErrForbidden, pgErr.Message)
	}
	return err
}

// SettleOutcome is a caller's verdict on its call.
type SettleOutcome string

// Settle outcomes.
const (
	// Done: the outside system performed it (a receipt is required).
	Done SettleOutcome = "done"
	// Failed: definitely not performed (a rejection); the key is free.
	Failed SettleOutcome = "failed"
	// Unknown: it may or may not have happened (a timeout, a dropped
	// connection): recovered like an ended lease.
	Unknown SettleOutcome = "unknown"
)

// SettleParams is a caller's report of its call.
type SettleParams struct {
	Key   ledger.Key
	Lease string // the lease Begin gave
	// Raw is the outside system's answer exactly as received, recorded
	// before anything reads it; required for done and failed (it may be
	// empty), optional for unknown (nil: no answer came).
	Raw     []byte
	Outcome SettleOutcome
	Receipt string // the outside system's id for the effect (done)
	Reason  string // why (failed, unknown)
}

func (p SettleParams) validate() error {
	switch p.Outcome {
	case Done:
		if strings.TrimSpace(p.Receipt) == "" {
			return &onceplan.FieldError{Field: "receipt", Reason: "is required with outcome done: the outside system's id for the effect (or its answer's summary)"}
		}
	case Failed, Unknown:
		if strings.TrimSpace(p.Reason) == "" {
			return &onceplan.FieldError{Field: "reason", Reason: fmt.Sprintf("is required with outcome %s: say why", p.Outcome)}
		}
	default:
		return &onceplan.FieldError{Field: "outcome", Reason: fmt.Sprintf("must be \"done\", \"failed\" or \"unknown\", not %q", p.Outcome)}
	}
	if p.Raw == nil && p.Outcome != Unknown {
		return &onceplan.FieldError{Field: "raw", Reason: fmt.Sprintf("is required with outcome %s: the outside system's answer as received (it may be empty)", p.Outcome)}
	}
	if len(p.Raw) > MaxRawBytes {
		return &onceplan.FieldError{Field: "raw", Reason: fmt.Sprintf("is %d bytes; at most %d", len(p.Raw), MaxRawBytes)}
	}
	if strings.TrimSpace(p.Lease) == "" {
		return &onceplan.FieldError{Field: "lease", Reason: "is required: the lease the begin answered"}
	}
	return nil
}

// attemptRow is an attempt locked for a change.
type attemptRow struct {
	effectID   int64
	state      ledger.State
	takeovers  int
	policy     Policy
	tool       string
	event      string
	leaseUntil time.Time
	// leaseEnded: the lease ended (by the database's clock).
	leaseEnded bool
}

// lockAttempt locks the attempt of key whose lease is lease.
func lockAttempt(ctx context.Context, tx pgx.Tx, key ledger.Key, lease string) (attemptRow, error) {
	var r attemptRow
	var state string
	var policyID int64
	// The lock, then the read in a statement of its own (see lockDoubt).
	err := tx.QueryRow(ctx, `SELECT effect_id FROM tool_attempt WHERE key = $1 AND lease_id::text = $2 FOR UPDATE`,
		string(key), strings.TrimSpace(lease)).Scan(&r.effectID)
	if err == nil {
		err = tx.QueryRow(ctx, `
			SELECT e.state, a.takeovers, a.policy_id, c.tool, c.event, a.lease_until, a.lease_until < now()
			FROM tool_attempt a JOIN effect_attempt() e ON e.id = a.effect_id JOIN tool_call c ON c.key = a.key
			WHERE a.effect_id = $1`, r.effectID).
			Scan(&state, &r.takeovers, &policyID, &r.tool, &r.event, &r.leaseUntil, &r.leaseEnded)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: lease %s is not the current lease of key %s: it was never given, or it ended and another caller took the call over to perform it again with the same key; do not settle — begin again to learn the outcome",
			ErrLease, lease, key)
	}
	if err != nil {
		return r, err
	}
	r.state = ledger.State(state)
	r.policy, err = policyByID(ctx, tx, policyID)
	return r, err
}

// Settle records the caller's raw answer and its outcome, in one
// transaction, the raw answer first (docs/ARCHITECTURE.md, "Single agent
// effects"). A settle repeated after it committed (a retry after a lost
// answer) changes nothing and answers the same. An attempt whose lease
// ended and which recovery made unknown stays unknown, for a person; the
// caller's answer is recorded beside it as their evidence. Any other
// settle of an attempt already settled is refused (409) and changes
// nothing: the raw answer a replay returns is the one of the settle that
// settled the attempt.
func (s *Service) Settle(ctx context.Context, a auth.Actor, p SettleParams) (Status, error) {
	if err := auth.Authorize(a, auth.ActionPerform); err != nil {
		return Status{}, err
	}
	if err := p.validate(); err != nil {
		return Status{}, err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := lockAttempt(ctx, tx, p.Key, p.Lease)
		if err != nil {
			return err
		}
		store := ledger.NewStore(tx)
		kind := ledger.ResponseSend
		if r.takeovers > 0 {
			kind = ledger.ResponseResend
		}
		ev := eventParams{Key: p.Key, Tool: r.tool, Event: r.event, Action: "settle", Actor: &a, EffectID: r.effectID,
			Reason: p.Reason, Detail: map[string]any{"outcome": p.Outcome, "receipt": p.Receipt}}
		switch {
		case r.state == ledger.StatePending:
			to := map[SettleOutcome]ledger.State{Done: ledger.StateDone, Failed: ledger.StateFailed, Unknown: ledger.StateUnknown}[p.Outcome]
			sp := &ledger.SettleParams{EffectID: r.effectID, State: to, Receipt: p.Receipt, Reason: p.Reason}
			if p.Raw != nil {
				_, _, err = store.AnswerMany(ctx, []ledger.Answer{{ResponseRecord: ledger.ResponseRecord{EffectID: r.effectID, Kind: kind, Body: p.Raw}, Settle: sp}}, nil, ledger.Gate{})
			} else {
				_, err = store.Settle(ctx, *sp)
			}
			if err != nil {
				return err
			}
			ev.State = to
		case r.state == ledger.StateUnknown && r.policy.Recovery == RecoveryDedupe && p.Outcome != Unknown:
			// The attempt was performed again with the same key (a
			// takeover): the outside system's answer settles the doubt,
			// as a campaign's re-send does.
			if _, err := store.RecordResponse(ctx, r.effectID, kind, p.Raw); err != nil {
				return err
			}
			outcome, why := ledger.Delivered, "performed again with the same key; the outside system answered done: "+p.Receipt
			if p.Outcome == Failed {
				outcome, why = ledger.NotDelivered, "performed again with the same key; the outside system answered failed: "+p.Reason
			}
			e, err := store.Resolve(ctx, ledger.ResolveParams{Key: p.Key, Outcome: outcome, Actor: "dedupe:" + a.String(), Reason: why})
			if err != nil {
				return err
			}
			ev.State = e.State
		case r.state == ledger.StateDone && p.Outcome == Done, r.state == ledger.StateFailed && p.Outcome == Failed,
			r.state == ledger.StateUnknown && p.Outcome == Unknown:
			// A repeat of a settle that committed: the same answer.
			return nil
		case r.state == ledger.StateUnknown:
			// Recovery made it unknown after the lease ended: a person
			// resolves it, and this answer is their evidence.
			if _, err := store.RecordResponse(ctx, r.effectID, kind, p.Raw); err != nil {
				return err
			}
			ev.State = r.state
			ev.Detail["late"] = true
		default:
			// Settled already, otherwise: the transaction rolls back, so
			// the raw answer of the settle that settled it stays the one
			// a replay returns.
			return fmt.Errorf("%w: the attempt for key %s is already %s, settled before this answer came; nothing was recorded — begin again to read the outcome",
				onceplan.ErrConflict, p.Key, r.state)
		}
		return recordEvent(ctx, tx, ev)
	})
	if err != nil {
		return Status{}, err
	}
	return getStatus(ctx, s.pool, p.Key, "")
}

// Heartbeat extends the lease of a call still in hand, to lease from now
// (0: DefaultLease); a lease already longer keeps its end (a lease only
// runs forward: migration 0026). A lease that ended is not revived: the
// call is in doubt, and its recovery decides.
func (s *Service) Heartbeat(ctx context.Context, a auth.Actor, key ledger.Key, lease string, d time.Duration) (Status, error) {
	if err := auth.Authorize(a, auth.ActionPerform); err != nil {
		return Status{}, err
	}
	d, err := leaseOrDefault(d)
	if err != nil {
		return Status{}, err
	}
	if strings.TrimSpace(lease) == "" {
		return Status{}, &onceplan.FieldError{Field: "lease", Reason: "is required: the lease the begin answered"}
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := lockAttempt(ctx, tx, key, lease)
		if err != nil {
			return err
		}
		switch {
		case r.state != ledger.StatePending:
			return fmt.Errorf("%w: the attempt for key %s is %s: there is no call in hand to extend (do not perform it; read its status)", onceplan.ErrConflict, key, r.state)
		case r.leaseEnded:
			return fmt.Errorf("%w: the lease of key %s ended at %s: the call is in doubt and no heartbeat revives it (do not start or continue it; begin again to learn its outcome)",
				onceplan.ErrConflict, key, r.leaseUntil.UTC().Format(time.RFC3339Nano))
		}
		_, err = tx.Exec(ctx, `UPDATE tool_attempt SET lease_until = greatest(lease_until, now() + make_interval(secs => $2)) WHERE effect_id = $1`, r.effectID, d.Seconds())
		return refusal(err)
	})
	if err != nil {
		return Status{}, err
	}
	return getStatus(ctx, s.pool, key, "")
}
