package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Role is a permission a user holds; a user may hold several.
type Role string

// The roles.
const (
	RoleAdmin    Role = "admin"    // users and tokens; implies every other role
	RoleProposer Role = "proposer" // create and edit drafts, import targets, submit
	RoleApprover Role = "approver" // approve or reject what others proposed
	RoleOperator Role = "operator" // start, pause, resume, cancel; resolve unknowns
	RoleViewer   Role = "viewer"   // read
)

// Roles lists every role, in the order the UI shows them.
var Roles = []Role{RoleAdmin, RoleProposer, RoleApprover, RoleOperator, RoleViewer}

// ParseRole checks a role name.
func ParseRole(s string) (Role, error) {
	if slices.Contains(Roles, Role(s)) {
		return Role(s), nil
	}
	return "", fmt.Errorf("%q is not a role (one of admin, proposer, approver, operator, viewer)", s)
}

// Actor is who asks: a signed-in user, or an agent token acting for one.
type Actor struct {
	UserID int64
	Email  string
	Roles  []Role
	// Agent is set for agent tokens: they may propose and read, never
	// decide (approve, reject, start, pause, resume, cancel, resolve,
	// supersede, revoke, bump).
	Agent bool
}

// Has reports whether the actor holds role (admin holds every role).
func (a Actor) Has(role Role) bool {
	return slices.Contains(a.Roles, role) || slices.Contains(a.Roles, RoleAdmin)
}

// String names the actor for logs and the ledger ("user:ann@example.com",
// "agent:ann@example.com").
func (a Actor) String() string {
	if a.Agent {
		return "agent:" + a.Email
	}
	return "user:" + a.Email
}

// Errors callers test with errors.Is.
var ()

// Action is a decision on a campaign, as recorded in the audit trail.
type Action string

// The audited actions.
const (
	ActionCreate  Action = "create"
	ActionEdit    Action = "edit"
	ActionImport  Action = "import"
	ActionSubmit  Action = "submit"
	ActionApprove Action = "approve"
	ActionReject  Action = "reject"
	ActionFreeze  Action = "freeze"
	ActionStart   Action = "start"
	ActionPause   Action = "pause"
	ActionResume  Action = "resume"
	ActionCancel  Action = "cancel"
	// ActionDiscard ends a campaign never approved (a draft, or one
	// waiting for approval) at its proposer's request: nothing of it can
	// be submitted, approved or started any more. Recorded in the trail
	// as a cancel.
	ActionDiscard Action = "discard"
	ActionResolve Action = "resolve"
	// ActionSupersede bumps a done target's epoch so it gets one more
	// effect: a new decision to act, so it needs an approver.
	ActionSupersede Action = "supersede"
	// ActionRevoke withdraws a done or stranded effect (it was reversed
	// outside Onceplan); the key no longer blocks.
	ActionRevoke Action = "revoke"
	// ActionTestSend sends one target's rendered message to reviewers
	// (package testsend); it touches no ledger key. Recorded in the trail.
	ActionTestSend Action = "test_send"
	// ActionSuppress adds an address to the suppression list and
	// ActionUnsuppress takes one off (package suppression). They are not
	// campaign events: the suppression rows are their record.
	ActionSuppress   Action = "suppress"
	ActionUnsuppress Action = "unsuppress"
	// ActionPerform begins, heartbeats and settles a single effect (an
	// agent's tool call, package toolcall): the caller performs it at the
	// outside system itself, under the ledger's key. Agents may; approving
	// a call's args is ActionApprove's, resolving it ActionResolve's.
	ActionPerform Action = "perform"
)

// permission says which role an action needs and whether an agent token
// may take it.
var permission = map[Action]struct {
	role       Role
	agentMayDo bool
}{
	ActionCreate:  {RoleProposer, true},
	ActionEdit:    {RoleProposer, true},
	ActionImport:  {RoleProposer, true},
	ActionSubmit:  {RoleProposer, true},
	ActionApprove: {RoleApprover, false},
	ActionReject:  {RoleApprover, false},
	ActionStart:   {RoleOperator, false},
	ActionPause:   {RoleOperator, false},
	ActionResume:  {RoleOperator, false},
	ActionCancel:  {RoleOperator, false},
	// Discarding a draft stops what was never approved, so its
	// proposers may (an agent too: it only ever sends less); an
	// operator may (alsoRoles).
	ActionDiscard:   {RoleProposer, true},
	ActionResolve:   {RoleOperator, false},
	ActionSupersede: {RoleApprover, false},
	ActionRevoke:    {RoleOperator, false},
	// Test sends: the proposer, approvers and operators (alsoRoles).
	ActionTestSend: {RoleProposer, false},
	// Adding an address only ever mails fewer people; taking one off is
	// an admin's explicit decision.
	ActionSuppress:   {RoleOperator, false},
	ActionUnsuppress: {RoleAdmin, false},
	// Performing a tool call: what an agent (or a proposer's script) does;
	// an operator may too.
	ActionPerform: {RoleProposer, true},
}

// alsoRoles are further roles that allow an action besides its
// permission's role (any one of them suffices).
var alsoRoles = map[Action][]Role{
	ActionTestSend: {RoleApprover, RoleOperator},
	ActionDiscard:  {RoleOperator},
	ActionPerform:  {RoleOperator},
}

// Authorize reports whether actor may take action, with a reason when not.
func Authorize(a Actor, action Action) error {
	p, ok := permission[action]
	if !ok {
		return fmt.Errorf("%w: unknown action %q", onceplan.ErrForbidden, action)
	}
	if a.Agent && !p.agentMayDo {
		return fmt.Errorf("%w: an agent token may not %s a campaign; a person must", onceplan.ErrForbidden, action)
	}
	if a.Has(p.role) || slices.ContainsFunc(alsoRoles[action], a.Has) {
		return nil
	}
	if also := alsoRoles[action]; len(also) > 0 {
		names := []string{string(p.role)}
		for _, r := range also {
			names = append(names, string(r))
		}
		return fmt.Errorf("%w: %s needs one of the roles %s", onceplan.ErrForbidden, action, strings.Join(names, ", "))
	}
	return fmt.Errorf("%w: %s needs the %s role", onceplan.ErrForbidden, action, p.role)
}
