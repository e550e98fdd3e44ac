package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// keyOfCampaign refuses a key that is not a target of one of the
// campaign's approved plans: an action on one campaign's page or route can
// never touch another campaign's effects.
func keyOfCampaign(ctx context.Context, tx pgx.Tx, campaignID, key string) error {
	_, err := plan.TargetOfKey(ctx, tx, campaignID, key)
	if errors.Is(err, onceplan.ErrNotFound) {
		return fmt.Errorf("%w: key %s is not a target of campaign %s", onceplan.ErrNotFound, key, campaignID)
	}
	return err
}

// CampaignOfKey finds the campaign whose approved plan has key as a target
// (keys carry the campaign as their event, so there is at most one).
func (s *Service) CampaignOfKey(ctx context.Context, key string) (string, error) {
	if _, err := ledger.ParseKey(key); err != nil {
		return "", fmt.Errorf("%w: %v", onceplan.ErrInvalid, err)
	}
	id, err := plan.CampaignOfKey(ctx, s.pool, key)
	if errors.Is(err, onceplan.ErrNotFound) {
		return "", fmt.Errorf("%w: no approved plan has a target with key %s", onceplan.ErrNotFound, key)
	}
	return id, err
}

func needReason(reason, what string) error {
	if strings.TrimSpace(reason) == "" {
		return &onceplan.FieldError{Field: "reason", Reason: what + " needs a reason"}
	}
	return nil
}

// SupersedeEffect deliberately allows one more effect for a target whose
// effect is done: it bumps the key's epoch, recorded
// with who and why, and — when the campaign is running or completed — puts
// the target back on the queue. confirmTarget must repeat the target's
// address, so nobody supersedes the wrong row by a slip.
func (s *Service) SupersedeEffect(ctx context.Context, a auth.Actor, campaignID, key, confirmTarget, reason string) (int, error) {
	if err := auth.Authorize(a, auth.ActionSupersede); err != nil {
		return 0, err
	}
	if err := needReason(reason, "superseding an effect"); err != nil {
		return 0, err
	}
	var epoch int
	err := s.effectAction(ctx, a, campaignID, key, auth.ActionSupersede, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		target, err := plan.TargetOfKey(ctx, tx, c.ID, key)
		if err != nil {
			return err
		}
		if !strings.EqualFold(strings.TrimSpace(confirmTarget), target) {
			return &onceplan.FieldError{Field: "target", Reason: fmt.Sprintf("type the target's address (%s) to confirm", target)}
		}
		store := ledger.NewStore(tx)
		if cur, err := store.Current(ctx, ledger.Key(key)); err != nil || cur.State != ledger.StateDone {
			if err != nil && !errors.Is(err, onceplan.ErrNotFound) {
				return err
			}
			return fmt.Errorf("%w: only a done target can be superseded; %s has no done effect at its current epoch", onceplan.ErrConflict, target)
		}
		if epoch, err = store.Bump(ctx, ledger.BumpParams{
			Key: ledger.Key(key), ActorKind: ledger.ActorHuman, Actor: a.String(), Reason: reason,
		}); err != nil {
			return err
		}
		if err := s.move(ctx, tx, &a, &c, auth.ActionSupersede, "", reason, map[string]any{"key": key, "epoch": epoch}); err != nil {
			return err
		}
		return s.requeueAfterChange(ctx, tx, &a, c, "a done target was superseded")
	})
	return epoch, err
}

// RevokeEffect records that a done or stranded effect was withdrawn outside
// Onceplan (a payout reversed, a post deleted). The key no longer blocks;
// nothing is sent again unless someone supersedes it.
func (s *Service) RevokeEffect(ctx context.Context, a auth.Actor, campaignID, key, reason string) (ledger.Effect, error) {
	if err := auth.Authorize(a, auth.ActionRevoke); err != nil {
		return ledger.Effect{}, err
	}
	if err := needReason(reason, "revoking an effect"); err != nil {
		return ledger.Effect{}, err
	}
	var eff ledger.Effect
	err := s.effectAction(ctx, a, campaignID, key, auth.ActionRevoke, func(tx pgx.Tx, cp *Campaign) error {
		c := *cp
		var err error
		if eff, err = ledger.NewStore(tx).Revoke(ctx, ledger.RevokeParams{Key: ledger.Key(key), Actor: a.String(), Reason: reason}); err != nil {
			return err
		}
		return s.move(ctx, tx, &a, &c, auth.ActionRevoke, "", reason, map[string]any{"key": key, "epoch": eff.Epoch})
	})
	return eff, err
}

// requeueAfterChange puts a started campaign's remainder back on the queue
// after a decision freed a key (why says which); a completed campaign
// runs again.
func (s *Service) requeueAfterChange(ctx context.Context, tx pgx.Tx, a *auth.Actor, c Campaign, why string) error {
	switch c.State {
	case StateRunning, StateCompleted:
	default:
		return nil // paused: Resume enqueues; not started: Start does
	}
	p, err := plan.GetPlan(ctx, tx, c.PlanID)
	if err != nil {
		return err
	}
	n, err := s.enqueuer.EnqueueRemaining(ctx, tx, p)
	if err != nil || n == 0 {
		return err
	}
	return s.reopen(ctx, tx, a, &c, why, n)
}

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
		if err := s.move(ctx, tx, &a, &c, auth.ActionResolve, "", reason, map[string]any{"key": key, "epoch": eff.Epoch, "outcome": outcome}); err != nil {
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
