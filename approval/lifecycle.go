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
// which states, and where it leads. It is the one state machine every
// caller asks. A person's action on a campaign enters through act, the
// system's through actAsSystem: each checks the role (a person's) and this
// table in the transaction that holds the campaign's row lock, before
// anything is written. A state changes only through shift, which checks
// the table's edge; move records the action with it, and born records a
// new campaign, made where the create row says. The UI asks Allowed which
// buttons to show and why not; a test send asks it before it sends. (The
// database refuses an illegal edge too — the campaign_update trigger — as
// a backstop, with the same edges.) TestExportedOperationsGoThroughTheLifecycle
// keeps every exported write of the package behind these doors.
var lifecycle = map[auth.Action]step{
	// Create has no state before it: the campaign is made in draft.
	auth.ActionCreate: {to: StateDraft},
	auth.ActionEdit:   {from: editableStates, to: StateDraft, refused: " and can no longer be edited"},
	auth.ActionImport: {from: editableStates, to: StateDraft, refused: " and can no longer be edited"},
	auth.ActionSubmit: {from: []State{StateDraft}, to: StatePendingApproval},
	// The quorum's last approval freezes the campaign: auth.ActionFreeze.
	auth.ActionApprove: {from: []State{StatePendingApproval}},
	auth.ActionReject:  {from: []State{StatePendingApproval}, to: StateDraft},
	auth.ActionFreeze:  {from: []State{StatePendingApproval}, to: StateApproved},
	// Starting a running campaign again enqueues nothing and is no error.
	auth.ActionStart: {from: []State{StateApproved}, to: StateRunning, again: true,
		refused: "; only an approved campaign can be started"},
	auth.ActionPause: {from: []State{StateRunning}, to: StatePaused},
	// Resume runs the remainder: a paused campaign runs again, a running
	// one enqueues what has no live job, a completed one reopens when
	// something is left to queue (Service.Resume leaves it completed
	// otherwise).
	auth.ActionResume: {from: []State{StatePaused, StateRunning, StateCompleted}, to: StateRunning},
	auth.ActionCancel: {from: []State{StateDraft, StatePendingApproval, StateApproved, StateRunning, StatePaused},
		to: StateCancelled},
	// Discard cancels a campaign never approved (Service.Discard checks
	// it has no plan): its proposer's way to drop a draft.
	auth.ActionDiscard: {from: []State{StateDraft, StatePendingApproval}, to: StateCancelled},
	ActionComplete:     {from: []State{StateRunning}, to: StateCompleted},
	// Decisions on one target's effect, in whatever state the campaign is
	// (a new version being drafted does not stop a person from resolving
	// the last one's unknowns); the key must be a target of one of its
	// plans (keyOfCampaign).
	auth.ActionResolve:   {from: allStates},
	auth.ActionSupersede: {from: allStates},
	auth.ActionRevoke:    {from: allStates},
	// A test send renders the current version, whatever its state, until
	// the campaign is cancelled.
	auth.ActionTestSend: {from: editableStates},
	// An alert records that something needs a person, whatever the
	// campaign's state — archived too: it changes nothing of the campaign.
	ActionAlert: {from: allStates, archived: true},
}

// step is one row of the lifecycle table.
type step struct {
	// from are the states the action may be taken from.
	from []State
	// to is where it leads; "" when the action does not move the
	// campaign by itself.
	to State
	// again: the action taken once more in its to state does nothing and
	// is no error (act lets it through to the action, which sees the
	// state; Allowed, which decides the buttons, does not).
	again bool
	// refused, when set, says after the campaign's state why the action
	// is refused (else: which states it needs).
	refused string
	// archived: the action may be taken on an archived campaign.
	archived bool
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
	if c.ArchivedAt != nil && !e.archived {
		return archivedError(c)
	}
	if !slices.Contains(e.from, c.State) {
		if e.refused != "" {
			return fmt.Errorf("%w: campaign %s is %s%s", onceplan.ErrConflict, c.ID, label(c.State), e.refused)
		}
		return fmt.Errorf("%w: campaign %s is %s; %s needs it %s", onceplan.ErrConflict, c.ID, label(c.State), action, joinStates(e.from))
	}
	return nil
}

// admits is stateAllows for taking the action: an action the table lets
// be taken again (step.again) passes in its to state too.
func admits(c Campaign, action auth.Action) error {
	err := stateAllows(c, action)
	if e := lifecycle[action]; err != nil && e.again && c.State == e.to && c.ArchivedAt == nil {
		return nil
	}
	return err
}

// archivedError refuses every action on an archived campaign: its ledger
// rows are in the archive, and it never runs or changes again
// (docs/ARCHITECTURE.md, "The archive"; PostgreSQL's backstop:
// campaign_archived_final). A clone of it is a campaign of its own.
func archivedError(c Campaign) error {
	return fmt.Errorf("%w: campaign %s was archived on %s, and an archived campaign never runs or changes again; clone it to send it anew",
		onceplan.ErrConflict, c.ID, c.ArchivedAt.UTC().Format("2006-01-02 15:04 UTC"))
}

// act runs a person's action on a campaign: the role (auth.Authorize),
// then, in one transaction with the campaign locked, the state (the
// lifecycle table: admits), then fn. Every person's action on a campaign
// enters here, so the rules are checked the same way for the UI, the API
// and the command line.
func (s *Service) act(ctx context.Context, a auth.Actor, id string, action auth.Action, fn func(tx pgx.Tx, c *Campaign) error) error {
	if err := auth.Authorize(a, action); err != nil {
		return err
	}
	return s.locked(ctx, id, func(tx pgx.Tx, c *Campaign) error {
		if err := admits(*c, action); err != nil {
			return err
		}
		return fn(tx, c)
	})
}

// actAsSystem runs the system's action on a campaign (no role: no person
// takes it): in one transaction with the campaign locked, the lifecycle
// table, then fn. The table refusing is no error — the system acts only
// when the campaign is where the action may be taken (a scheduled start of
// a campaign edited meanwhile, a completion of one paused) — and acted
// says whether fn ran.
func (s *Service) actAsSystem(ctx context.Context, id string, action auth.Action, fn func(tx pgx.Tx, c *Campaign) error) (acted bool, err error) {
	err = s.locked(ctx, id, func(tx pgx.Tx, c *Campaign) error {
		if stateAllows(*c, action) != nil {
			return nil
		}
		acted = true
		return fn(tx, c)
	})
	return acted, err
}

// locked runs fn in one transaction with campaign id's row locked: every
// state change goes through it, so decisions on one campaign are
// serialised.
func (s *Service) locked(ctx context.Context, id string, fn func(tx pgx.Tx, c *Campaign) error) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		c, err := lockCampaign(ctx, tx, id)
		if err != nil {
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
		if err := setState(ctx, tx, c.ID, to); err != nil {
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

// born records the making of campaign c in its trail, in tx, once c is
// where the table's create row says a campaign starts (PostgreSQL's
// default state: the service never writes a new campaign's state). With
// move, it is the only writer of the trail's campaign actions (a test send
// records itself after Allowed: TestSender.Send).
func (s *Service) born(ctx context.Context, tx pgx.Tx, a *auth.Actor, c Campaign, detail any) error {
	if to := lifecycle[auth.ActionCreate].to; c.State != to {
		return fmt.Errorf("%w: campaign %s was made %s, not %s", onceplan.ErrConflict, c.ID, label(c.State), label(to))
	}
	return s.event(ctx, tx, a, c, auth.ActionCreate, "", "", detail)
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
