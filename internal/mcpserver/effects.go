package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/onceplan/onceplan/clients/go/toolclient"
	"github.com/onceplan/onceplan/internal/toolcall"
)

// The single-effect tools (package toolcall): an agent performs its own
// tool calls exactly once through the ledger — begin before the call,
// settle after it — and reads where one stands. As with campaigns, no
// tool approves or resolves: a person does, in the web UI.

// peopleDecideCalls ends every single-effect tool's description.
const peopleDecideCalls = " A person approves a call's args (when its tool requires approval) and resolves a call whose outcome is unknown, in the web UI: there is deliberately no tool to approve or resolve. Give your user the approval_url or url."

// BeginInput is effect_begin's input.
type BeginInput struct {
	Event       string         `json:"event" jsonschema:"the stable id of this occurrence: the same when you retry or resume this step, new for a new decision (e.g. run-42/step-3)"`
	Tool        string         `json:"tool" jsonschema:"the tool you are about to call, lower-case, e.g. crm.set_status"`
	Target      string         `json:"target" jsonschema:"what the call acts on: an account, record or other id (or an email address with target_kind email)"`
	TargetKind  string         `json:"target_kind,omitempty" jsonschema:"subject (default) or email"`
	AmountMinor int64          `json:"amount_minor,omitempty" jsonschema:"an amount in integer minor units (cents), when the call moves money; part of the call's identity"`
	Scope       string         `json:"scope,omitempty" jsonschema:"an optional extra discriminator; part of the call's identity"`
	Args        map[string]any `json:"args" jsonschema:"exactly the input you will call the tool with; stored and hashed, never part of the key"`
	Recovery    string         `json:"recovery,omitempty" jsonschema:"the tool's recovery as you know it (dedupe, probe or none); it must match what an admin registered"`
	LeaseSecs   int64          `json:"lease_seconds,omitempty" jsonschema:"how long you have to settle (1 to 3600, default 60)"`
}

// SettleInput is effect_settle's input.
type SettleInput struct {
	Key     string `json:"key" jsonschema:"the key effect_begin answered"`
	Lease   string `json:"lease" jsonschema:"the lease effect_begin answered"`
	Outcome string `json:"outcome" jsonschema:"done (it happened), failed (the outside system refused it: nothing happened) or unknown (you cannot tell: a timeout, a lost connection)"`
	Receipt string `json:"receipt,omitempty" jsonschema:"the outside system's id for the effect (required with done)"`
	Reason  string `json:"reason,omitempty" jsonschema:"why (required with failed and unknown)"`
	Raw     string `json:"raw" jsonschema:"the outside system's answer exactly as you received it (may be empty)"`
}

// StatusInput is effect_status' input.
type StatusInput struct {
	Key string `json:"key" jsonschema:"the call's key"`
}

// addEffectTools adds effect_begin, effect_settle and effect_status to s.
func addEffectTools(s *mcp.Server, t *tools) {
	mcp.AddTool(s, &mcp.Tool{Name: "effect_begin", Description: "Call this BEFORE performing a tool call that has a side effect (sends, pays, writes), so it happens exactly once even if you retry, crash or are restarted. " +
		"Answers outcome: perform_now — perform the call now, passing key to the outside system as its idempotency key, then call effect_settle with key, lease and the raw answer before lease_until; " +
		"already_done — it happened: use the recorded receipt and raw, do not call again; in_doubt — do not call (next says what happens next); " +
		"awaiting_approval — a person must approve exactly these args first: give your user the approval_url and call effect_begin again later. " +
		"The same event, tool and target with changed args is refused: a changed call needs a new event id." + peopleDecideCalls}, t.effectBegin)
	mcp.AddTool(s, &mcp.Tool{Name: "effect_settle", Description: "Report a call you performed after effect_begin answered perform_now: its outcome and the outside system's raw answer, recorded before anything reads it. Repeating the same settle is harmless." + peopleDecideCalls}, t.effectSettle)
	mcp.AddTool(s, &mcp.Tool{Name: "effect_status", Description: "Where a call stands now (done, pending, unknown, failed, awaiting approval…), with next: what happens next." + peopleDecideCalls}, t.effectStatus)
}

// effects is the single-effects client on the MCP server's API client.
func (t *tools) effects() *toolclient.Client {
	return &toolclient.Client{Server: t.c.Server, Token: t.c.Token, HTTP: t.c.HTTP}
}

// effectResult is an Effect as the tools answer it.
func effectResult(eff toolclient.Effect) (Result, error) {
	b, err := json.Marshal(eff)
	if err != nil {
		return nil, err
	}
	var out Result
	err = json.Unmarshal(b, &out)
	for k, v := range out {
		if v == nil || v == "" || v == false || v == float64(0) && k != "epoch" {
			delete(out, k)
		}
	}
	return out, err
}

// effectError is an API refusal as a tool error the model can act on.
func effectError(err error) error {
	var np *toolclient.NotPerformedError
	var ae *toolclient.Error
	switch {
	case errors.As(err, &np) && np.API != nil:
		//lint:ignore ST1005 Onceplan is a proper noun (the product's name)
		return fmt.Errorf("Onceplan refused (HTTP %d, %s): %s — do not perform the call with these args; a changed call needs a new event id", np.API.Status, np.API.Code, np.API.Message)
	case errors.As(err, &ae):
		msg := fmt.Sprintf("Onceplan refused (HTTP %d, %s): %s", ae.Status, ae.Code, ae.Message)
		if ae.Status == http.StatusForbidden {
			msg += " — an agent token cannot do this; ask a person to do it in the web UI."
		}
		return errors.New(msg)
	}
	return err
}

func (t *tools) effectBegin(ctx context.Context, _ *mcp.CallToolRequest, in BeginInput) (*mcp.CallToolResult, Result, error) {
	kind := in.TargetKind
	if kind == "" {
		kind = "subject"
	}
	var args any = in.Args
	if in.Args == nil {
		args = map[string]any{}
	}
	// The number is checked as the API checks it, before it becomes a
	// duration: a lease that wrapped around would be another lease.
	lease, err := toolcall.LeaseOf(in.LeaseSecs)
	if err != nil {
		return nil, nil, err
	}
	eff, status, err := t.effects().Begin(ctx, toolclient.Intent{Event: in.Event, Tool: in.Tool, Target: toolclient.Target{Kind: kind, Value: in.Target},
		AmountMinor: in.AmountMinor, Scope: in.Scope, Args: args, Recovery: in.Recovery, Lease: lease})
	if err != nil {
		return nil, nil, effectError(err)
	}
	out, err := effectResult(eff)
	if err != nil {
		return nil, nil, err
	}
	out["outcome"] = map[int]string{http.StatusCreated: "perform_now", http.StatusOK: "already_done",
		http.StatusAccepted: "awaiting_approval", http.StatusConflict: "in_doubt"}[status]
	return nil, out, nil
}

func (t *tools) effectSettle(ctx context.Context, _ *mcp.CallToolRequest, in SettleInput) (*mcp.CallToolResult, Result, error) {
	eff, err := t.effects().Settle(ctx, in.Key, toolclient.SettleParams{Lease: in.Lease, Outcome: in.Outcome, Receipt: in.Receipt, Reason: in.Reason, Raw: []byte(in.Raw)})
	if err != nil {
		return nil, nil, effectError(err)
	}
	out, err := effectResult(eff)
	return nil, out, err
}

func (t *tools) effectStatus(ctx context.Context, _ *mcp.CallToolRequest, in StatusInput) (*mcp.CallToolResult, Result, error) {
	eff, err := t.effects().Get(ctx, in.Key)
	if err != nil {
		return nil, nil, effectError(err)
	}
	out, err := effectResult(eff)
	return nil, out, err
}
