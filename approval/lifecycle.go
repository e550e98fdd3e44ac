package approval

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// The campaign's lifecycle, in one table: which action may be taken from
// which states, and where it leads. Every state change goes through move,
// which checks the edge here and records the action's event in the same
// transaction; the UI asks Allowed which buttons to show and why not. (The
// database refuses an illegal edge too — the campaign_update trigger — as a
// backstop, with the same edges.)
var lifecycle = map[auth.Action]struct {
	from []State
	to   State // "" when the action does not move the campaign by itself
}{
	auth.ActionEdit:    {editableStates, StateDraft},
	auth.ActionImport:  {editableStates, StateDraft},
	auth.ActionSubmit:  {[]State{StateDraft}, StatePendingApproval},
	auth.ActionApprove: {[]State{StatePendingApproval}, ""}, // the quorum's last approval freezes it: auth.ActionFreeze
	auth.ActionReject:  {[]State{StatePendingApproval}, StateDraft},
	auth.ActionFreeze:  {[]State{StatePendingApproval}, StateApproved},
	auth.ActionStart:   {[]State{StateApproved}, StateRunning},
	auth.ActionPause:   {[]State{StateRunning}, StatePaused},
	// Resume runs the remainder: a paused campaign runs again, a running
	// one enqueues what has no live job, a completed one reopens when
	// something is left to queue (Service.Resume leaves it completed
	// otherwise).
	auth.ActionResume: {[]State{StatePaused, StateRunning, StateCompleted}, StateRunning},
	auth.ActionCancel: {[]State{StateDraft, StatePendingApproval, StateApproved, StateRunning, StatePaused},
		StateCancelled},
	// Discard cancels a campaign never approved (Service.Discard checks
	// it has no plan): its proposer's way to drop a draft.
	auth.ActionDiscard: {[]State{StateDraft, StatePendingApproval}, StateCancelled},
	ActionComplete:     {[]State{StateRunning}, StateCompleted},
	// Decisions on one target's effect, in whatever state the campaign is
	// (a new version being drafted does not stop a person from resolving
	// the last one's unknowns); the key must be a target of one of its
	// plans (keyOfCampaign).
	auth.ActionResolve:   {allStates, ""},
	auth.ActionSupersede: {allStates, ""},
	auth.ActionRevoke:    {allStates, ""},
	// A test send renders the current version, whatever its state, until
	// the campaign is cancelled.
	auth.ActionTestSend: {editableStates, ""},
}

var (
	editableStates = []State{StateDraft, StatePendingApproval, StateApproved,
		StateRunning, StatePaused, StateCompleted}
	allStates = append(slices.Clone(editableStates), StateCancelled)
)

// Allowed says whether actor a may take action on campaign c now: nil, or
// an error (onceplan.ErrForbidden or onceplan.ErrConflict) whose message says why not, for a
// person. It checks the role and the state; Service.ApproveAllowed adds
// what an approval needs besides.
func Allowed(a auth.Actor, c Campaign, action auth.Action) error {
	if err := auth.Authorize(a, action); err != nil {
		return err
	}
	return stateAllows(c, action)
}

// stateAllows checks the lifecycle table alone (system actions, which no
// person takes, check only this).
func stateAllows(c Campaign, action auth.Action) error {
	e, ok := lifecycle[action]
	if !ok {
		return fmt.Errorf("%w: unknown action %q", onceplan.ErrConflict, action)
	}
	if c.ArchivedAt != nil {
		return archivedError(c)
	}
	if !slices.Contains(e.from, c.State) {
		return fmt.Errorf("%w: campaign %s is %s; %s needs it %s", onceplan.ErrConflict, c.ID, label(c.State), action, joinStates(e.from))
	}
	return nil
}

// archivedError refuses every action on an archived campaign: its ledger
// rows are in the archive, and it never runs or changes again
// (docs/ARCHITECTURE.md, "The archive"; PostgreSQL's backstop:
// campaign_archived_final). A clone of it is a campaign of its own.
func archivedError(c Campaign) error {
	return fmt.Errorf("%w: campaign %s was archived on %s, and an archived campaign never runs or changes again; clone it to send it anew",
		onceplan.ErrConflict, c.ID, c.ArchivedAt.UTC().Format("2006-01-02 15:04 UTC"))
}

// act runs a person's action on a campaign: the role (auth.Authorize), then,
// in one transaction with the campaign locked, the state (the lifecycle
// table), then fn. Every action of the service enters here, so the rules
// are checked the same way for the UI, the API and the command line.
func (s *Service) act(ctx context.Context, a auth.Actor, id string, action auth.Action, fn func(tx pgx.Tx, c *Campaign) error) error {
	if err := auth.Authorize(a, action); err != nil {
		return err
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		c, err := LockCampaign(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := stateAllows(c, action); err != nil {
			return err
		}
		return fn(tx, &c)
	})
}

// effectAction runs a person's decision on one effect of a campaign (act),
// once the key is a target of one of its plans: an action on one
// campaign's page or route can never touch another campaign's effects.
func (s *Service) effectAction(ctx context.Context, a auth.Actor, id, key string, action auth.Action, fn func(tx pgx.Tx, c *Campaign) error) error {
	return s.act(ctx, a, id, action, func(tx pgx.Tx, c *Campaign) error {
		if err := keyOfCampaign(ctx, tx, c.ID, key); err != nil {
			return err
		}
		return fn(tx, c)
	})
}

// shift moves the locked campaign c to action's state, when the lifecycle
// table allows the action (the caller records the action).
func (s *Service) shift(ctx context.Context, tx pgx.Tx, c *Campaign, action auth.Action) error {
	if err := stateAllows(*c, action); err != nil {
		return err
	}
	if to := lifecycle[action].to; to != "" && c.State != to {
		if err := SetState(ctx, tx, c.ID, to); err != nil {
			return err
		}
		c.State = to
	}
	return nil
}

// move takes action on the locked campaign c: it checks the lifecycle
// table, moves c to the action's state (when it has one and c is not there
// already) and records the action in the trail, in tx. a is nil for the
// system.
func (s *Service) move(ctx context.Context, tx pgx.Tx, a *auth.Actor, c *Campaign, action auth.Action, hash, reason string, detail any) error {
	if err := s.shift(ctx, tx, c, action); err != nil {
		return err
	}
	return s.event(ctx, tx, a, *c, action, hash, reason, detail)
}

// reopen runs a completed campaign again because a decision or recovery
// freed a key and put its target back on the queue (else the campaign's
// gate would turn the new job away and the target would be forgotten). It
// records the resume with why.
func (s *Service) reopen(ctx context.Context, tx pgx.Tx, a *auth.Actor, c *Campaign, why string, jobs int) error {
	if c.State != StateCompleted {
		return nil
	}
	return s.move(ctx, tx, a, c, auth.ActionResume, "", why, map[string]any{"jobs": jobs})
}

func label(s State) string { return strings.ReplaceAll(string(s), "_", " ") }

func joinStates(states []State) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = label(s)
	}
	if len(parts) > 1 {
		return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	return strings.Join(parts, "")
}
