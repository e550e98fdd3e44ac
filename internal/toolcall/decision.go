package toolcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// requestApproval records (once per key and digest) that a person must
// approve these args before the call may be performed.
func (s *Service) requestApproval(ctx context.Context, a auth.Actor, v validated, pol Policy, digest string) (Status, error) {
	if a.UserID == 0 {
		return Status{}, fmt.Errorf("%w: an approval request needs the user the call is begun for", onceplan.ErrForbidden)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO tool_approval_request (key, identity, tool, event, args, policy_id, requested_by, requested_by_user)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8) ON CONFLICT (key, args_digest) DO NOTHING RETURNING id`,
			string(v.key), v.identity, v.in.Tool, v.in.Event, string(v.args), pol.ID, a.String(), a.UserID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // asked already
		}
		if err != nil {
			return err
		}
		return recordEvent(ctx, tx, eventParams{Key: v.key, Tool: v.in.Tool, Event: v.in.Event, Action: "request_approval", Actor: &a,
			Detail: map[string]any{"request": id, "args_digest": digest}})
	})
	if err != nil {
		return Status{}, err
	}
	return getStatus(ctx, s.pool, v.key, digest)
}

// Request is an approval request as the person deciding sees it.
type Request struct {
	ID          int64
	Key         ledger.Key
	Tool        string
	Event       string
	Target      ledger.Target
	AmountMinor int64
	Scope       string
	Args        json.RawMessage
	ArgsDigest  string
	RequestedBy string
	// RequestedByUser is the user the call was begun for: they never
	// decide on it.
	RequestedByUser int64
	CreatedAt       time.Time
	Policy          Policy
	// Decision is "", "approved" or "rejected".
	Decision  string
	DecidedBy string
	Reason    string
	DecidedAt time.Time
	// BoundDigest is the digest the key is bound to, when an attempt
	// began (with these args or, when it differs, with others: then this
	// request can no longer be performed).
	BoundDigest string
}

// Stale reports whether the key was bound to other args since: approving
// this request would perform nothing.
func (r Request) Stale() bool { return r.BoundDigest != "" && r.BoundDigest != r.ArgsDigest }

// requestSelect reads approval requests, each with its decision and the
// digest its key is bound to; a WHERE clause follows.
const requestSelect = `
		SELECT r.id, r.key, r.identity, r.args, r.args_digest, r.requested_by, r.requested_by_user, r.created_at, r.policy_id,
		       coalesce(a.decision, ''), coalesce(u.email, ''), coalesce(a.reason, ''), a.created_at, coalesce(c.args_digest, '')
		FROM tool_approval_request r
		LEFT JOIN tool_approval a ON a.request_id = r.id
		LEFT JOIN user_identity() u ON u.id = a.decided_by
		LEFT JOIN tool_call c ON c.key = r.key`

// scanRequest reads a row of requestSelect, and the id of its policy.
func scanRequest(row pgx.Row) (Request, int64, error) {
	var r Request
	var key, canonical string
	var policyID int64
	var decidedAt *time.Time
	if err := row.Scan(&r.ID, &key, &canonical, &r.Args, &r.ArgsDigest, &r.RequestedBy, &r.RequestedByUser, &r.CreatedAt, &policyID,
		&r.Decision, &r.DecidedBy, &r.Reason, &decidedAt, &r.BoundDigest); err != nil {
		return Request{}, 0, err
	}
	r.Key = ledger.Key(key)
	if decidedAt != nil {
		r.DecidedAt = *decidedAt
	}
	st := Status{Key: r.Key}
	if err := st.setIdentity(canonical); err != nil {
		return Request{}, 0, err
	}
	r.Tool, r.Event, r.Target, r.AmountMinor, r.Scope = st.Tool, st.Event, st.Target, st.AmountMinor, st.Scope
	return r, policyID, nil
}

// GetRequestFor reads approval request id as a reads it: not found when
// there is none, and also when a may not read it (Request.MayRead), so
// that nobody learns which calls other users ask to make.
func (s *Service) GetRequestFor(ctx context.Context, a auth.Actor, id int64) (Request, error) {
	r, err := s.getRequest(ctx, id)
	if err == nil && !r.MayRead(a) {
		return Request{}, errNoRequest(id)
	}
	return r, err
}

// errNoRequest: there is no approval request id (that the reader may read).
func errNoRequest(id int64) error {
	return fmt.Errorf("%w: there is no tool call approval request %d", onceplan.ErrNotFound, id)
}

// getRequest reads approval request id.
func (s *Service) getRequest(ctx context.Context, id int64) (Request, error) {
	r, policyID, err := scanRequest(s.pool.QueryRow(ctx, requestSelect+` WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, errNoRequest(id)
	}
	if err != nil {
		return Request{}, err
	}
	r.Policy, err = policyByID(ctx, s.pool, policyID)
	return r, err
}

// Decide records a person's decision on approval request id: approve
// (true) or reject, of the digest they were shown (a request's args never
// change, so another digest means another page than the request's).
// Agent tokens never decide; nobody decides on a call begun for them.
func (s *Service) Decide(ctx context.Context, a auth.Actor, id int64, digest string, approve bool, reason string) (Request, error) {
	action, decision := auth.ActionApprove, "approved"
	if !approve {
		action, decision = auth.ActionReject, "rejected"
	}
	if a.Agent {
		return Request{}, fmt.Errorf("%w: an agent token may not %s a tool call; a person must", onceplan.ErrForbidden, action)
	}
	if err := auth.Authorize(a, action); err != nil {
		return Request{}, err
	}
	reason = strings.TrimSpace(reason)
	if !approve && reason == "" {
		return Request{}, &onceplan.FieldError{Field: "reason", Reason: "is required: say why the call must not be made"}
	}
	r, err := s.GetRequestFor(ctx, a, id)
	if err != nil {
		return Request{}, err
	}
	switch {
	case digest != r.ArgsDigest:
		return Request{}, fmt.Errorf("%w: the args you were shown (digest %s) are not this request's (digest %s): reload the page", onceplan.ErrConflict, digest, r.ArgsDigest)
	case r.Decision != "":
		return Request{}, fmt.Errorf("%w: this request was already %s by %s", onceplan.ErrConflict, r.Decision, r.DecidedBy)
	case approve && r.Stale():
		return Request{}, fmt.Errorf("%w: the call's key is bound to other args since (digest %s): approving these would perform nothing", onceplan.ErrConflict, r.BoundDigest)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tool_approval (request_id, decision, args_digest, decided_by, reason) VALUES ($1, $2, $3, $4, $5)`,
			id, decision, digest, a.UserID, reason); err != nil {
			return decisionRefusal(err)
		}
		return recordEvent(ctx, tx, eventParams{Key: r.Key, Tool: r.Tool, Event: r.Event, Action: string(action),
			Actor: &a, Reason: reason, Detail: map[string]any{"request": id, "args_digest": digest}})
	})
	if err != nil {
		return Request{}, err
	}
	return s.getRequest(ctx, id)
}

// decisionRefusal says why PostgreSQL refused a decision.
func decisionRefusal(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "23505":
		return fmt.Errorf("%w: this request was decided meanwhile", onceplan.ErrConflict)
	case "OP006":
		return fmt.Errorf("%w: you began this call (yourself or through your agent token): another person decides on it", onceplan.ErrForbidden)
	case "OP007":
		return fmt.Errorf("%w: %s", onceplan.ErrConflict, pgErr.Message)
	}
	return err
}

// RequestFilter selects approval requests.
type RequestFilter struct {
	// Waiting: only those no person decided on and whose key is not bound
	// to other args.
	Waiting bool
	Limit   int
}

// Requests lists the approval requests a may read (Request.MayRead),
// newest first.
func (s *Service) Requests(ctx context.Context, a auth.Actor, f RequestFilter) ([]Request, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	rows, err := s.pool.Query(ctx, requestSelect+`
		WHERE (NOT $1 OR (NOT EXISTS (SELECT 1 FROM tool_approval a WHERE a.request_id = r.id)
		                  AND NOT EXISTS (SELECT 1 FROM tool_call c WHERE c.key = r.key AND c.args_digest <> r.args_digest)))
		  AND `+requestReadable("r.requested_by_user", 3)+`
		ORDER BY r.id DESC LIMIT $2`, append([]any{f.Waiting, f.Limit}, ReaderOf(a).requestArgs()...)...)
	if err != nil {
		return nil, err
	}
	var policyIDs []int64
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Request, error) {
		r, policyID, err := scanRequest(row)
		policyIDs = append(policyIDs, policyID)
		return r, err
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	// The requests' policies in one read, not one per request.
	prows, err := s.pool.Query(ctx, `SELECT `+policyCols+` FROM tool_policy WHERE id = ANY($1)`, policyIDs)
	if err != nil {
		return nil, err
	}
	policies, err := pgx.CollectRows(prows, func(row pgx.CollectableRow) (Policy, error) { return scanPolicy(row) })
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]Policy, len(policies))
	for _, p := range policies {
		byID[p.ID] = p
	}
	for i := range out {
		out[i].Policy = byID[policyIDs[i]]
	}
	return out, nil
}

// IsToolKey reports whether key is a single effect's (an intent or an
// approval request names it), so the effect routes shared with campaigns
// know whose rules apply.
func (s *Service) IsToolKey(ctx context.Context, key string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tool_call WHERE key = $1)
		OR EXISTS (SELECT 1 FROM tool_approval_request WHERE key = $1)`, key).Scan(&ok)
	return ok, err
}

// ResolveParams is a person's verdict on a single effect whose outcome
// is unknown.
type ResolveParams struct {
	Key     ledger.Key
	Outcome ledger.Outcome
	// Reason says how they know (required).
	Reason string
	// Receipt is the outside system's id for the effect they found
	// (Delivered only; optional): a replay returns it as the receipt.
	Receipt string
	// Raw is the evidence as they found it (optional, at most
	// MaxRawBytes; nil: none): recorded once with the verdict, a replay
	// returns it as raw, from "person".
	Raw []byte
}

func (p ResolveParams) validate() error {
	if p.Outcome != ledger.Delivered && p.Outcome != ledger.NotDelivered {
		return &onceplan.FieldError{Field: "outcome", Reason: fmt.Sprintf("must be %q or %q, not %q", ledger.Delivered, ledger.NotDelivered, p.Outcome)}
	}
	if p.Receipt != "" && p.Outcome != ledger.Delivered {
		return &onceplan.FieldError{Field: "receipt", Reason: "is the outside system's id for an effect that happened: a call not delivered has none (give the evidence as raw)"}
	}
	if len(p.Raw) > MaxRawBytes {
		return &onceplan.FieldError{Field: "raw", Reason: fmt.Sprintf("is %d bytes; at most %d", len(p.Raw), MaxRawBytes)}
	}
	return nil
}

// personOnly refuses action on key's call to agent tokens and to people
// without the role it needs, naming the tool call and who may act.
func personOnly(a auth.Actor, action auth.Action, key ledger.Key) error {
	err := auth.Authorize(a, action)
	if err == nil {
		return nil
	}
	who := "a person with the operator role (or an admin)"
	if a.Agent {
		return fmt.Errorf("%w: an agent token may not %s a tool call (key %s): %s does, in the web UI or with their own token", onceplan.ErrForbidden, action, key, who)
	}
	return fmt.Errorf("%w: only %s may %s a tool call (key %s)", onceplan.ErrForbidden, who, action, key)
}

// Resolve is a person's verdict on a single effect whose outcome is
// unknown: delivered (done) or not delivered (failed, which frees the key:
// the next begin performs it), with their receipt and raw evidence. The
// same ledger rule as a campaign target's (ledger.Store.Resolve), with the
// attempt locked against a concurrent settle or takeover; the evidence is
// written in the same transaction (migration 0028 refuses it otherwise).
func (s *Service) Resolve(ctx context.Context, a auth.Actor, p ResolveParams) (ledger.Effect, error) {
	if err := personOnly(a, auth.ActionResolve, p.Key); err != nil {
		return ledger.Effect{}, err
	}
	if err := p.validate(); err != nil {
		return ledger.Effect{}, err
	}
	return s.humanAct(ctx, a, p.Key, "resolve", ledger.StateUnknown, p.Reason, func(store *ledger.Store) (ledger.Effect, error) {
		e, err := store.Resolve(ctx, ledger.ResolveParams{Key: p.Key, Outcome: p.Outcome, Actor: a.String(), Reason: p.Reason, Receipt: p.Receipt})
		if err != nil || p.Raw == nil {
			return e, err
		}
		_, err = store.RecordResponse(ctx, e.ID, ledger.ResponsePerson, p.Raw)
		return e, err
	})
}

// Revoke records that a single effect that is done (or stranded) was
// withdrawn outside Onceplan: the key no longer blocks, and the next
// begin performs it again (with the same key: an outside system that
// deduplicates may still refuse it).
func (s *Service) Revoke(ctx context.Context, a auth.Actor, key ledger.Key, reason string) (ledger.Effect, error) {
	if err := personOnly(a, auth.ActionRevoke, key); err != nil {
		return ledger.Effect{}, err
	}
	return s.humanAct(ctx, a, key, "revoke", "", reason, func(store *ledger.Store) (ledger.Effect, error) {
		return store.Revoke(ctx, ledger.RevokeParams{Key: key, Actor: a.String(), Reason: reason})
	})
}

// humanAct runs a person's ledger action on key's current attempt, locked
// (when it is in state: "" for any), and records it in the trail.
func (s *Service) humanAct(ctx context.Context, a auth.Actor, key ledger.Key, action string, state ledger.State, reason string,
	act func(*ledger.Store) (ledger.Effect, error)) (ledger.Effect, error) {
	if strings.TrimSpace(reason) == "" {
		return ledger.Effect{}, &onceplan.FieldError{Field: "reason", Reason: "is required: say how you know"}
	}
	var eff ledger.Effect
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tool, event string
		err := tx.QueryRow(ctx, `SELECT c.tool, c.event FROM tool_call c WHERE c.key = $1`, string(key)).Scan(&tool, &event)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w has key %s", ErrNoEffect, key)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM tool_attempt a JOIN effect_attempt() e ON e.id = a.effect_id
			WHERE a.key = $1 AND ($2 = '' OR e.state::text = $2) FOR UPDATE OF a`, string(key), string(state)); err != nil {
			return err
		}
		if eff, err = act(ledger.NewStore(tx)); err != nil {
			return err
		}
		return recordEvent(ctx, tx, eventParams{Key: key, Tool: tool, Event: event, Action: action, Actor: &a,
			EffectID: eff.ID, State: eff.State, Reason: reason})
	})
	return eff, err
}
