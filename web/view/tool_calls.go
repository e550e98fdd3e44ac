package view

import (
	"net/url"
	"time"
)

// ToolPolicy is a tool's registration as the pages show it.
type ToolPolicy struct {
	Tool         string
	Summary      string // toolcall.Policy.Summary
	FirstUse     bool
	RegisteredBy string
	Description  string
}

// ToolCallRow is one single effect in a list.
type ToolCallRow struct {
	Key        string
	Tool       string
	Event      string
	Target     string
	State      string // "new" before any attempt
	Attempt    int
	Holder     string
	LeaseUntil time.Time
	// LeaseExpired: pending, and its lease ended without a settle.
	LeaseExpired bool
	Receipt      string
	Reason       string
	UpdatedAt    time.Time
}

// ToolCount is how many calls of a tool (and event) stand in each state.
type ToolCount struct {
	Tool    string
	Event   string
	ByState map[string]int
	Total   int
}

// ToolApprovalRow is an approval request in a list.
type ToolApprovalRow struct {
	ID          int64
	Tool        string
	Event       string
	Target      string
	ArgsDigest  string
	RequestedBy string
	CreatedAt   time.Time
}

// ToolEventRow is one entry of the single effects' trail.
type ToolEventRow struct {
	Key      string
	Event    string
	Action   string
	Actor    string
	ViaAgent bool
	State    string
	Reason   string
	Detail   string
	At       time.Time
}

// ToolCallsPage lists single effects by tool and state: the approvals
// and unknowns waiting for a person first, then the calls, and — for one
// tool and event — its audit: the counts and the trail.
type ToolCallsPage struct {
	Page
	Tool, Event, State string
	States             []string
	Tools              []ToolPolicy
	Counts             []ToolCount
	Waiting            []ToolApprovalRow
	Unknowns           []ToolCallRow
	Rows               []ToolCallRow
	Trail              []ToolEventRow
}

// ToolApprovalPage is one approval request: exactly the args a person
// approves, and the forms to decide.
type ToolApprovalPage struct {
	Page
	ID           int64
	Key          string
	Tool         string
	Event        string
	Target       string
	AmountMinor  int64
	Scope        string
	Args         string // indented JSON
	ArgsDigest   string
	RequestedBy  string
	CreatedAt    time.Time
	Policy       ToolPolicy
	Decision     string // "", approved, rejected
	DecidedBy    string
	DecideReason string
	DecidedAt    time.Time
	// Stale: the key was bound to other args since; approving performs
	// nothing.
	Stale       bool
	CanDecide   bool
	FieldErrors map[string]string
}

// ToolCallPage is one single effect: its state, its raw answer, its
// trail, and the forms a person resolves or revokes it with.
type ToolCallPage struct {
	Page
	Row         ToolCallRow
	Epoch       int
	ArgsDigest  string
	Args        string
	AmountMinor int64
	Scope       string
	Policy      ToolPolicy
	Raw         string
	RawKind     string
	Resolution  string
	ResolvedBy  string
	ApprovedBy  string
	Next        string
	Trail       []ToolEventRow
	CanResolve  bool
	CanRevoke   bool
}

// toolCallURL is a single effect's page.
func toolCallURL(key string) string { return "/tool-calls/effects/" + url.PathEscape(key) }

// toolCallsURL is the list filtered by tool, event and state.
func toolCallsURL(tool, event, state string) string {
	v := url.Values{}
	if tool != "" {
		v.Set("tool", tool)
	}
	if event != "" {
		v.Set("event", event)
	}
	if state != "" {
		v.Set("state", state)
	}
	if len(v) == 0 {
		return "/tool-calls"
	}
	return "/tool-calls?" + v.Encode()
}

// toolApprovalURL is an approval request's page.
func toolApprovalURL(id int64) string { return "/tool-calls/approvals/" + i64(id) }
