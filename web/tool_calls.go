package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/view"
)

// The single effects' pages (package toolcall): the list by tool and
// state with the approvals and unknowns waiting, an approval request's
// page, and a call's page where a person resolves or revokes it.

// toolStates are the states the list counts and filters by, in order.
var toolStates = []string{"awaiting_approval", "pending", "unknown", "done", "failed", "stranded", "revoked"}

// tools is the single effects' service (Config.ToolCalls).
func (s *Server) tools() *toolcall.Service { return s.cfg.ToolCalls }

func toolPolicyView(p toolcall.Policy) view.ToolPolicy {
	return view.ToolPolicy{Tool: p.Tool, Summary: p.Summary(), FirstUse: p.FirstUse, RegisteredBy: p.RegisteredBy, Description: p.Description}
}

func toolRowView(r toolcall.Row) view.ToolCallRow {
	state := string(r.State)
	if state == "" {
		state = "new"
	}
	return view.ToolCallRow{Key: string(r.Key), Tool: r.Tool, Event: r.Event, Target: r.Target.Value, State: state, Attempt: r.Attempt,
		Holder: r.Holder, LeaseUntil: r.LeaseUntil, LeaseExpired: r.LeaseExpired && r.State == toolcall.State(ledger.StatePending),
		Receipt: r.Receipt, Reason: r.Reason, UpdatedAt: r.UpdatedAt}
}

func toolEventViews(events []toolcall.Event) []view.ToolEventRow {
	out := make([]view.ToolEventRow, 0, len(events))
	for _, e := range events {
		detail := ""
		if len(e.Detail) > 0 && string(e.Detail) != "null" {
			detail = string(e.Detail)
		}
		out = append(out, view.ToolEventRow{Key: string(e.Key), Event: e.Event, Action: e.Action, Actor: e.Actor, ViaAgent: e.ViaAgent,
			State: e.State, Reason: e.Reason, Detail: detail, At: e.CreatedAt})
	}
	return out
}

// handleToolCalls lists what the signed-in person may read of the single
// effects (toolcall.Reader): the rows, counts, approvals and trail each
// filtered by the one read rule, so a call they may not open is not
// listed either.
func (s *Server) handleToolCalls(c echo.Context) error {
	ctx := c.Request().Context()
	svc := s.tools()
	a := mustActor(c)
	p := view.ToolCallsPage{Page: s.page(c, "Tool calls", "tool-calls"), States: toolStates,
		Tool: strings.TrimSpace(c.QueryParam("tool")), Event: strings.TrimSpace(c.QueryParam("event")), State: c.QueryParam("state")}
	if p.State != "" && !slices.Contains(toolStates, p.State) {
		return &onceplan.FieldError{Field: "state", Reason: "is not a state of a tool call (" + strings.Join(toolStates, ", ") + ")"}
	}
	policies, err := toolcall.Policies(ctx, s.cfg.Pool)
	if err != nil {
		return err
	}
	for _, pol := range policies {
		p.Tools = append(p.Tools, toolPolicyView(pol))
	}
	counts, err := svc.Counts(ctx, a, p.Tool, p.Event, p.Event != "")
	if err != nil {
		return err
	}
	for _, n := range counts {
		if len(p.Counts) == 0 || p.Counts[len(p.Counts)-1].Tool != n.Tool || p.Counts[len(p.Counts)-1].Event != n.Event {
			p.Counts = append(p.Counts, view.ToolCount{Tool: n.Tool, Event: n.Event, ByState: map[string]int{}})
		}
		row := &p.Counts[len(p.Counts)-1]
		row.ByState[string(n.State)] += n.N
		row.Total += n.N
	}
	waiting, err := svc.Requests(ctx, a, toolcall.RequestFilter{Waiting: true})
	if err != nil {
		return err
	}
	for _, r := range waiting {
		p.Waiting = append(p.Waiting, view.ToolApprovalRow{ID: r.ID, Tool: r.Tool, Event: r.Event, Target: r.Target.Value,
			ArgsDigest: r.ArgsDigest, RequestedBy: r.RequestedBy, CreatedAt: r.CreatedAt})
	}
	unknowns, err := svc.List(ctx, a, toolcall.ListFilter{State: toolcall.State(ledger.StateUnknown)})
	if err != nil {
		return err
	}
	for _, r := range unknowns {
		p.Unknowns = append(p.Unknowns, toolRowView(r))
	}
	if p.State != "awaiting_approval" {
		rows, err := svc.List(ctx, a, toolcall.ListFilter{Tool: p.Tool, Event: p.Event, State: toolcall.State(p.State)})
		if err != nil {
			return err
		}
		for _, r := range rows {
			p.Rows = append(p.Rows, toolRowView(r))
		}
	}
	if p.Tool != "" && p.Event != "" {
		events, err := svc.Events(ctx, a, toolcall.EventFilter{Tool: p.Tool, Event: p.Event})
		if err != nil {
			return err
		}
		p.Trail = toolEventViews(events)
	}
	return s.render(c, http.StatusOK, view.ToolCalls(p))
}

// requestOf reads the approval request the route names, as the signed-in
// person may read it (404 otherwise, as for an id nobody used).
func (s *Server) requestOf(c echo.Context) (toolcall.Request, error) {
	id, err := strconv.ParseInt(c.Param("rid"), 10, 64)
	if err != nil {
		return toolcall.Request{}, echo.NewHTTPError(http.StatusNotFound, "no such approval request")
	}
	return s.tools().GetRequestFor(c.Request().Context(), mustActor(c), id)
}

// prettyJSON indents a JSON document for reading.
func prettyJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func (s *Server) renderToolApproval(c echo.Context, status int, r toolcall.Request, fieldErrors map[string]string) error {
	a := mustActor(c)
	p := view.ToolApprovalPage{Page: s.page(c, "Approve "+r.Tool, "tool-calls"), ID: r.ID, Key: string(r.Key), Tool: r.Tool, Event: r.Event,
		Target: r.Target.Value, AmountMinor: r.AmountMinor, Scope: r.Scope, Args: prettyJSON(r.Args), ArgsDigest: r.ArgsDigest,
		RequestedBy: r.RequestedBy, CreatedAt: r.CreatedAt, Policy: toolPolicyView(r.Policy), Decision: r.Decision,
		DecidedBy: r.DecidedBy, DecideReason: r.Reason, DecidedAt: r.DecidedAt, Stale: r.Stale(), FieldErrors: fieldErrors,
		CanDecide: auth.Authorize(a, auth.ActionApprove) == nil && !a.Agent && a.UserID != r.RequestedByUser}
	if p.FieldErrors == nil {
		p.FieldErrors = map[string]string{}
	}
	return s.render(c, status, view.ToolApproval(p))
}

func (s *Server) handleToolApproval(c echo.Context) error {
	r, err := s.requestOf(c)
	if err != nil {
		return err
	}
	return s.renderToolApproval(c, http.StatusOK, r, nil)
}

// toolDecide approves or rejects the args the page showed (their
// digest, posted back), the signed-in person deciding.
func toolDecide(approve bool) func(*Server, echo.Context) error {
	return func(s *Server, c echo.Context) error {
		r, err := s.requestOf(c)
		if err != nil {
			return err
		}
		reason := ""
		if !approve {
			f := readReasonForm(c)
			if err := f.Validate(); err != nil {
				errs, _ := fieldErrors(err)
				return s.renderToolApproval(c, http.StatusUnprocessableEntity, r, errs)
			}
			reason = f.Reason
		}
		if _, err := s.tools().Decide(c.Request().Context(), mustActor(c), r.ID, c.FormValue("args_digest"), approve, reason); err != nil {
			return err
		}
		flash := "tool-approved"
		if !approve {
			flash = "tool-rejected"
		}
		return redirect(c, "/tool-calls/approvals/"+strconv.FormatInt(r.ID, 10), flash)
	}
}

// toolKeyOf is the route's key.
func toolKeyOf(c echo.Context) (ledger.Key, error) {
	raw, err := url.PathUnescape(c.Param("key"))
	if err != nil {
		raw = c.Param("key")
	}
	key, err := ledger.ParseKey(raw)
	if err != nil {
		return "", echo.NewHTTPError(http.StatusNotFound, "no such tool call: "+err.Error())
	}
	return key, nil
}

func (s *Server) handleToolCall(c echo.Context) error {
	key, err := toolKeyOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	svc := s.tools()
	a := mustActor(c)
	// The API's read (GET /api/v1/effects/{key}): 404 to whoever may not
	// read the call, as for a key nobody began.
	st, err := svc.GetFor(ctx, a, key)
	if err != nil {
		return err
	}
	state := string(st.State)
	if state == "" {
		state = "new"
	}
	p := view.ToolCallPage{Page: s.page(c, st.Tool+" on "+st.Target.Value, "tool-calls"),
		Row: view.ToolCallRow{Key: string(st.Key), Tool: st.Tool, Event: st.Event, Target: st.Target.Value, State: state, Attempt: st.Attempt,
			Holder: st.Holder, LeaseUntil: st.LeaseUntil, LeaseExpired: st.LeaseExpired, Receipt: st.Receipt, Reason: st.Reason, UpdatedAt: st.UpdatedAt},
		Epoch: st.Epoch, ArgsDigest: st.ArgsDigest, Args: prettyJSON(st.Args), AmountMinor: st.AmountMinor, Scope: st.Scope,
		Policy: toolPolicyView(st.Policy), Raw: string(st.Raw), RawKind: string(st.RawKind), Resolution: st.Resolution,
		ResolvedBy: st.ResolvedBy, ApprovedBy: st.ApprovedBy, Next: toolNext(st),
		CanResolve: st.State == toolcall.State(ledger.StateUnknown) && auth.Authorize(a, auth.ActionResolve) == nil,
		CanRevoke: (st.State == toolcall.State(ledger.StateDone) || st.State == toolcall.State(ledger.StateStranded)) &&
			auth.Authorize(a, auth.ActionRevoke) == nil,
	}
	events, err := svc.Events(ctx, a, toolcall.EventFilter{Key: key})
	if err != nil {
		return err
	}
	p.Trail = toolEventViews(events)
	return s.render(c, http.StatusOK, view.ToolCall(p))
}

// toolNext says, for a person, what happens to the call next.
func toolNext(st toolcall.Status) string {
	switch {
	case st.State == toolcall.State(ledger.StateUnknown) && st.Closed != "":
		return "Unknown: " + st.Closed + ". Resolve it from the outside system's evidence."
	case st.State == toolcall.State(ledger.StateUnknown) && st.Policy.Recovery == toolcall.RecoveryProbe:
		return "Unknown: Onceplan asks the tool's probe; you may resolve it yourself from the outside system's evidence."
	case st.State == toolcall.State(ledger.StateUnknown) && st.Policy.Recovery == toolcall.RecoveryDedupe:
		return "Unknown: the next begin performs it again with the same key (the tool deduplicates); you may resolve it yourself."
	case st.State == toolcall.State(ledger.StateUnknown):
		return "Unknown: it may or may not have happened, and the tool can neither deduplicate nor be asked. Resolve it from the outside system's evidence."
	case st.State == toolcall.State(ledger.StatePending) && st.LeaseExpired:
		return "Its lease ended without a settle: recovery settles it by the tool's policy (" + st.Policy.Summary() + ")."
	case st.State == toolcall.State(ledger.StatePending):
		return "In flight: its caller holds the lease until " + st.LeaseUntil.UTC().Format("15:04:05 UTC") + "."
	case st.State == toolcall.State(ledger.StateDone):
		return "Done: every later begin of this key replays its result."
	case st.State == toolcall.State(ledger.StateFailed), st.State == toolcall.State(ledger.StateRevoked):
		return "The key is free: the next begin performs it."
	case st.State == toolcall.StateAwaitingApproval:
		return "Waiting for a person to approve its args."
	case st.State == toolcall.StateRejected:
		return "Rejected: it is not performed."
	}
	return ""
}

// handleToolResolve records a person's verdict on an unknown call.
func (s *Server) handleToolResolve(c echo.Context) error {
	key, err := toolKeyOf(c)
	if err != nil {
		return err
	}
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	outcome := ledger.Outcome(c.FormValue("outcome"))
	if outcome != ledger.Delivered && outcome != ledger.NotDelivered {
		return &onceplan.FieldError{Field: "outcome", Reason: "choose whether it happened or not"}
	}
	if _, err := s.tools().Resolve(c.Request().Context(), mustActor(c), toolcall.ResolveParams{Key: key, Outcome: outcome, Reason: f.Reason}); err != nil {
		return err
	}
	return redirect(c, "/tool-calls/effects/"+url.PathEscape(string(key)), "resolved")
}

// handleToolRevoke withdraws a done call, with a reason.
func (s *Server) handleToolRevoke(c echo.Context) error {
	key, err := toolKeyOf(c)
	if err != nil {
		return err
	}
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	if _, err := s.tools().Revoke(c.Request().Context(), mustActor(c), key, f.Reason); err != nil {
		return err
	}
	return redirect(c, "/tool-calls/effects/"+url.PathEscape(string(key)), "revoked")
}
