package toolcall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// recoverable is the SQL condition that the attempt a (tool_attempt) of
// effect e, under policy p, is for recovery to act on now: a pending
// attempt whose lease ended (unless its tool deduplicates and a takeover
// of the shortest lease, $2 seconds, still fits the outside system's
// window: then the next begin performs it again), or an unknown one its
// probe can settle, within the probe's retention. Migration 0026's
// tool_window_closed is Policy.CanTakeOver's and CanProbe's rule.
const recoverable = `((e.state = 'pending' AND a.lease_until < now()
		AND (p.recovery <> 'dedupe' OR tool_window_closed(p.dedupe_window, tool_first_call_at(e.id), now() + make_interval(secs => $2))))
	OR (e.state = 'unknown' AND p.recovery = 'probe' AND NOT tool_window_closed(p.probe_retention, tool_first_call_at(e.id), now())))`

// RecoverDue recovers up to limit attempts in doubt (see recoverable),
// oldest first, and returns how many changed state. Maintenance calls it
// every round, in every process: two at once cannot disagree, as every
// change locks its attempt and re-checks it.
func (s *Service) RecoverDue(ctx context.Context, limit int) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT e.id FROM effect_attempt() e
		JOIN tool_attempt a ON a.effect_id = e.id
		JOIN tool_policy p ON p.id = a.policy_id
		WHERE e.state IN ('pending', 'unknown') AND e.plan_id IS NULL AND `+recoverable+`
		ORDER BY e.updated_at LIMIT $1`, limit, MinLease.Seconds())
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, id := range ids {
		changed, err := s.recoverAttempt(ctx, id, MinLease)
		if err != nil {
			errs = append(errs, fmt.Errorf("recovering tool attempt %d: %w", id, err))
		} else if changed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// doubt is an attempt as recovery sees it.
type doubt struct {
	key        ledger.Key
	tool       string
	event      string
	state      ledger.State
	leaseID    string
	leaseUntil time.Time
	expired    bool
	policy     Policy
	holder     string
	// windowOver: the policy's settle window after the lease has passed.
	windowOver bool
	// firstCall is when the outside system may first have seen the key
	// (tool_first_call_at); now the database's clock at the read.
	firstCall time.Time
	now       time.Time
}

// closed is why recovery cannot act on the attempt now (a takeover with
// lease past the dedupe window, a probe past its retention), or "".
func (d doubt) closed(lease time.Duration) string {
	return d.policy.Closed(d.firstCall, d.now, lease)
}

// leftToAPerson is the reason an attempt in doubt whose recovery cannot
// act is unknown: why, and that a person resolves it.
func (d doubt) leftToAPerson(why string) string {
	return fmt.Sprintf("the lease of %s ended at %s without a settle, and %s — a person resolves it",
		d.holder, d.leaseUntil.UTC().Format(time.RFC3339), why)
}

// inDoubt reports whether the attempt is in doubt now: unknown, or
// pending with its lease ended.
func (d doubt) inDoubt() bool {
	return d.state == ledger.StateUnknown || (d.state == ledger.StatePending && d.expired)
}

// lockDoubt locks attempt id and then reads it. The read is a statement
// of its own, after the lock: at READ COMMITTED it sees every change
// committed while the lock was awaited — a settle or a recovery changes
// the effect, not the locked row, so a read in the locking statement
// would show the effect as it was before the wait.
func lockDoubt(ctx context.Context, tx pgx.Tx, id int64) (doubt, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tool_attempt WHERE effect_id = $1 FOR UPDATE`, id); err != nil {
		return doubt{}, err
	}
	return readDoubt(ctx, tx, id)
}

// readDoubt reads attempt id.
func readDoubt(ctx context.Context, db DB, id int64) (doubt, error) {
	var d doubt
	var state string
	var policyID int64
	err := db.QueryRow(ctx, `
		SELECT a.key, c.tool, c.event, e.state, a.lease_id::text, a.lease_until, a.lease_until < now(), a.policy_id, a.holder,
		       a.lease_until + p.settle_window <= now(), tool_first_call_at(a.effect_id), now()
		FROM tool_attempt a JOIN effect_attempt() e ON e.id = a.effect_id JOIN tool_call c ON c.key = a.key JOIN tool_policy p ON p.id = a.policy_id
		WHERE a.effect_id = $1`, id).
		Scan(&d.key, &d.tool, &d.event, &state, &d.leaseID, &d.leaseUntil, &d.expired, &policyID, &d.holder, &d.windowOver, &d.firstCall, &d.now)
	if err != nil {
		return d, err
	}
	d.state = ledger.State(state)
	d.policy, err = policyByID(ctx, db, policyID)
	return d, err
}

// recoverAttempt recovers attempt id by its policy, if it is in doubt,
// and reports whether its state changed:
//   - none: a pending attempt whose lease ended becomes unknown, for a
//     person (never "did not happen");
//   - probe: the probe is asked (its answer recorded before it is read);
//     found → done (an unknown one: resolved delivered); not found once
//     the settle window after the lease has passed → failed (resolved not
//     delivered), which frees the key; inside the window → nothing yet.
//     Past the outside system's retention it is not asked ("not found"
//     would prove nothing): a pending attempt becomes unknown, for a
//     person;
//   - dedupe: nothing here while a takeover with lease still fits the
//     outside system's window (the next begin performs it again); past
//     it, a pending attempt becomes unknown, for a person (calling again
//     could be a second effect).
//
// Every change is made with the attempt locked and re-checked, so a
// settle, heartbeat or takeover that came first wins.
func (s *Service) recoverAttempt(ctx context.Context, id int64, lease time.Duration) (bool, error) {
	d, err := readDoubt(ctx, s.pool, id)
	if err != nil {
		return false, err
	}
	if !d.inDoubt() {
		return false, nil
	}
	if d.closed(lease) != "" {
		if d.state != ledger.StatePending {
			return false, nil // unknown: a person resolves it
		}
		return s.lockedRecovery(ctx, id, d, func(tx pgx.Tx, now doubt) (ledger.State, string, error) {
			why := now.closed(lease)
			if now.state != ledger.StatePending || !now.expired || why == "" {
				return "", "", nil
			}
			reason := now.leftToAPerson(why)
			_, err := ledger.NewStore(tx).Settle(ctx, ledger.SettleParams{EffectID: id, State: ledger.StateUnknown, Reason: reason})
			return ledger.StateUnknown, reason, err
		})
	}
	switch d.policy.Recovery {
	case RecoveryNone:
		if d.state != ledger.StatePending {
			return false, nil // unknown: a person resolves it
		}
		return s.lockedRecovery(ctx, id, d, func(tx pgx.Tx, now doubt) (ledger.State, string, error) {
			if now.state != ledger.StatePending || !now.expired {
				return "", "", nil
			}
			reason := now.leftToAPerson(fmt.Sprintf("tool %s can neither deduplicate nor be asked: the call may or may not have happened", now.tool))
			_, err := ledger.NewStore(tx).Settle(ctx, ledger.SettleParams{EffectID: id, State: ledger.StateUnknown, Reason: reason})
			return ledger.StateUnknown, reason, err
		})
	case RecoveryProbe:
		return s.probe(ctx, id, d)
	}
	return false, nil
}

// probe asks the attempt's probe and settles from its answer.
func (s *Service) probe(ctx context.Context, id int64, d doubt) (bool, error) {
	u := d.policy.ProbeURLFor(d.key)
	pr, perr := provider.ProbeHTTP(ctx, s.http, "tool "+d.tool, u)
	if perr != nil && pr.Raw == nil {
		s.logger.Warn("probing a tool call in doubt", "key", string(d.key), "tool", d.tool, "err", perr)
		return false, nil // the probe said nothing: ask again next round
	}
	return s.lockedRecovery(ctx, id, d, func(tx pgx.Tx, now doubt) (ledger.State, string, error) {
		store := ledger.NewStore(tx)
		if !now.inDoubt() {
			return "", "", nil // settled, or its lease renewed, meanwhile
		}
		// The probe's answer is recorded before anything reads it.
		if _, err := store.RecordResponse(ctx, id, ledger.ResponseProbe, pr.Raw); err != nil {
			return "", "", err
		}
		var to ledger.State
		var reason string
		switch {
		case perr != nil:
			s.logger.Warn("probing a tool call in doubt", "key", string(d.key), "tool", d.tool, "err", perr)
			return "", "", nil
		case !pr.Found && now.closed(0) != "":
			// The retention ended while the probe was asked: its "not
			// found" proves nothing; the next round leaves it to a person.
			return "", "", nil
		case pr.Found:
			receipt := pr.Receipt
			if receipt == "" {
				receipt = "found by probe"
			}
			to, reason = ledger.StateDone, "the probe found it: "+receipt
			if now.state == ledger.StatePending {
				_, err := store.Settle(ctx, ledger.SettleParams{EffectID: id, State: to, Receipt: receipt})
				return to, reason, err
			}
			_, err := store.Resolve(ctx, ledger.ResolveParams{Key: d.key, Outcome: ledger.Delivered, Actor: "probe:" + d.tool, Reason: reason})
			return to, reason, err
		case !now.windowOver:
			return "", "", nil // not yet believed: ask again later
		default:
			to = ledger.StateFailed
			reason = fmt.Sprintf("the probe found nothing %s after the lease ended: it did not happen; the key is free again", d.policy.SettleWindow)
			if now.state == ledger.StatePending {
				_, err := store.Settle(ctx, ledger.SettleParams{EffectID: id, State: to, Reason: reason})
				return to, reason, err
			}
			_, err := store.Resolve(ctx, ledger.ResolveParams{Key: d.key, Outcome: ledger.NotDelivered, Actor: "probe:" + d.tool, Reason: reason})
			return to, reason, err
		}
	})
}

// lockedRecovery runs decide on attempt id locked and read again (now),
// and records its change in the trail; decide returns "" for no change.
func (s *Service) lockedRecovery(ctx context.Context, id int64, before doubt, decide func(tx pgx.Tx, now doubt) (ledger.State, string, error)) (bool, error) {
	changed := false
	err := pgx.BeginFunc(context.WithoutCancel(ctx), s.pool, func(tx pgx.Tx) error {
		now, err := lockDoubt(ctx, tx, id)
		if err != nil {
			return err
		}
		if now.leaseID != before.leaseID {
			return nil // taken over meanwhile
		}
		to, reason, err := decide(tx, now)
		if err != nil || to == "" {
			return err
		}
		changed = true
		s.logger.Info("recovered a tool call in doubt", "key", string(now.key), "tool", now.tool, "recovery", string(now.policy.Recovery), "state", string(to))
		return recordEvent(ctx, tx, eventParams{Key: now.key, Tool: now.tool, Event: now.event, Action: "recover",
			Actor: nil, EffectID: id, State: to, Reason: reason, Detail: map[string]any{"recovery": now.policy.Recovery, "from": now.state}})
	})
	return changed, err
}
