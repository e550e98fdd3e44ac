package toolcall

import (
	"fmt"

	"github.com/onceplan/onceplan/internal/auth"
)

// The one read rule of single effects (docs/ARCHITECTURE.md, "Single
// agent effects"). A call belongs to the user it was begun for
// (tool_call.created_by_user; for a call awaiting approval, the user who
// asked: tool_approval_request.requested_by_user), and is read, with its
// args and raw answers and trail, by
//   - that user, with any of their tokens (an agent token among them) and
//     their sessions;
//   - a person (never an agent token) with the operator role, or an
//     admin: they resolve and revoke calls, so they read every one.
//
// An approval request — the exact args a person decides on — is read by
// the same people, and by a person with the approver role: they decide on
// requests (never on their own).
//
// Nobody else learns that a call or a request exists: every door answers
// them as it answers a key or an id nobody used (404). Every door asks
// this rule through the Service: GET /api/v1/effects/{key} and its waits
// and the answers of resolve and revoke (GetFor), MCP's effect_status
// (through the API), and the web UI's pages and lists (GetFor,
// GetRequestFor, List, Counts, Requests, Events), which filter in SQL by
// the predicates below, the same rule written once more beside it.
type Reader struct {
	// User is the reader's user id (0: none).
	User int64
	// AllCalls: a person with the operator role, or an admin.
	AllCalls bool
	// AllRequests: AllCalls, or a person with the approver role.
	AllRequests bool
}

// ReaderOf is a as a reader of single effects.
func ReaderOf(a auth.Actor) Reader {
	person := !a.Agent
	r := Reader{User: a.UserID, AllCalls: person && a.Has(auth.RoleOperator)}
	r.AllRequests = r.AllCalls || (person && a.Has(auth.RoleApprover))
	return r
}

// Call reports whether r may read the call that owner (its user's id; 0:
// none recorded, a call begun before its user was) began.
func (r Reader) Call(owner int64) bool {
	return r.AllCalls || (owner != 0 && owner == r.User)
}

// Request reports whether r may read an approval request that owner
// asked for.
func (r Reader) Request(owner int64) bool {
	return r.AllRequests || r.Call(owner)
}

// callArgs are a statement's parameters for callReadable, from its
// parameter n on: $n AllCalls, $n+1 User; requestArgs for
// requestReadable: $n+2 AllRequests too.
func (r Reader) callArgs() []any    { return []any{r.AllCalls, r.User} }
func (r Reader) requestArgs() []any { return append(r.callArgs(), r.AllRequests) }

// callReadable is Reader.Call in SQL: owner is the owner column (NULL:
// none recorded, readable by AllCalls only), and the reader's
// parameters start at $n (callArgs).
func callReadable(owner string, n int) string {
	return fmt.Sprintf("($%d OR %s = $%d)", n, owner, n+1)
}

// requestReadable is Reader.Request in SQL, as callReadable
// (requestArgs).
func requestReadable(owner string, n int) string {
	return fmt.Sprintf("($%d OR %s)", n+2, callReadable(owner, n))
}

// MayRead reports whether a may read the call (Reader.Call of its user).
func (s Status) MayRead(a auth.Actor) bool {
	return ReaderOf(a).Call(s.CreatedBy)
}

// MayRead reports whether a may read the approval request
// (Reader.Request of the user who asked).
func (r Request) MayRead(a auth.Actor) bool {
	return ReaderOf(a).Request(r.RequestedByUser)
}
