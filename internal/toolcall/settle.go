package toolcall

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

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
