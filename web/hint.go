package web

// Who-may hints: a page that shows no button for a decision the signed-in
// user may not take says who may, and where more people are added.

import (
	"context"
	"strings"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
)

// hintNames is how many names a hint lists.
const hintNames = 5

// anOperator is anyone with the operator role: what the lifecycle allows
// it is what an operator could do now.
var anOperator = auth.Actor{Roles: []auth.Role{auth.RoleOperator}}

// whoMay lists the enabled users (not agents) for whom may says yes, by
// email; it is asked of each user in turn.
func (s *Server) whoMay(ctx context.Context, may func(auth.Actor) (bool, error)) ([]string, error) {
	users, err := auth.ListUsers(ctx, s.cfg.Pool)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, u := range users {
		if u.Disabled() {
			continue
		}
		ok, err := may(u.Actor())
		if err != nil {
			return nil, err
		}
		if ok {
			names = append(names, u.Email)
		}
	}
	return names, nil
}

// addUsersHint says where users, and the role they need, are added.
func addUsersHint(role auth.Role) string {
	return "an admin adds one on the Admin page (Add a user, role " + string(role) + ") or with `onceplan user add --email EMAIL --role " + string(role) + "`"
}

// namesOr words who may: "ann@example.com or bob@example.com", the first
// hintNames of them.
func namesOr(names []string) string {
	if len(names) > hintNames {
		names = append(names[:hintNames:hintNames], "others")
	}
	if len(names) > 1 {
		return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	return strings.Join(names, "")
}

// operatorHint says, to a user who may not take any of a running campaign's
// operator actions that the lifecycle allows now (start, pause, resume,
// cancel), who may: "" when the user may, or when nobody could now.
func (s *Server) operatorHint(ctx context.Context, a auth.Actor, camp approval.Campaign) (string, error) {
	var actions []auth.Action
	for _, action := range []auth.Action{auth.ActionStart, auth.ActionPause, auth.ActionResume, auth.ActionCancel} {
		if approval.Allowed(a, camp, action) == nil {
			return "", nil
		}
		if approval.Allowed(anOperator, camp, action) == nil {
			actions = append(actions, action)
		}
	}
	if len(actions) == 0 {
		return "", nil
	}
	what := "Starting, pausing, resuming and cancelling this campaign are an operator's decisions"
	if actions[0] == auth.ActionStart {
		what = "An operator starts this campaign"
	}
	names, err := s.whoMay(ctx, func(u auth.Actor) (bool, error) { return approval.Allowed(u, camp, actions[0]) == nil, nil })
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return what + ", and nobody has the operator role yet: " + addUsersHint(auth.RoleOperator) + ".", nil
	}
	return what + ": ask " + namesOr(names) + ".", nil
}

// approverHint says who may approve campaign c's current version instead
// of the signed-in user, and where approvers are added.
func (s *Server) approverHint(ctx context.Context, a auth.Actor, c approval.Campaign) (string, error) {
	names, err := s.whoMay(ctx, func(u auth.Actor) (bool, error) {
		if u.UserID == a.UserID {
			return false, nil
		}
		switch err := s.cfg.Approval.ApproveAllowed(ctx, u, c); {
		case err == nil:
			return true, nil
		case errIsRefusal(err):
			return false, nil
		default:
			return false, err
		}
	})
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "Nobody else may approve it yet: " + addUsersHint(auth.RoleApprover) + ".", nil
	}
	return "Ask " + namesOr(names) + " to approve it; to add another approver, " + addUsersHint(auth.RoleApprover) + ".", nil
}
