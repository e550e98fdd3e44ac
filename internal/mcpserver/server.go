// Package mcpserver is `onceplan mcp`: a Model Context Protocol server over
// stdio that lets an AI agent propose campaigns to a running Onceplan with
// an agent token. It goes through the JSON API, so it can do exactly what
// the token may: propose, add targets, edit, submit, read, and wait for a
// person's decision (wait_for_decision, the API's long poll). There is
// deliberately no tool that approves, starts, resolves or supersedes —
// a person does that in the web UI, at the campaign's approval URL, and
// every tool description says so, so the model tells its user where to go.
//
// It also lets the agent perform its own tool calls exactly once
// (effect_begin, effect_settle, effect_status: effects.go), through the
// same ledger; approving a call's args and resolving an unknown one are a
// person's, in the web UI, too.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/apiclient"
)

// humansDecide ends every tool description.
const humansDecide = " Onceplan sends nothing until a person approves the campaign in its web UI: there is deliberately no tool to approve, start, resolve or supersede. Give your user the approval_url."

// Target is one recipient of a proposed campaign.
type Target struct {
	Address string            `json:"address" jsonschema:"the recipient's email address"`
	Vars    map[string]string `json:"vars,omitempty" jsonschema:"merge variables for this recipient, used in the templates as {{.name}}"`
}

// ProposeInput is propose_campaign's input.
type ProposeInput struct {
	Name              string   `json:"name" jsonschema:"a short name for the campaign, shown to the approver"`
	Provider          string   `json:"provider,omitempty" jsonschema:"the provider to send through (default outbox)"`
	From              string   `json:"from" jsonschema:"the From address, e.g. Billing <billing@example.com>"`
	Subject           string   `json:"subject" jsonschema:"the subject, a Go template: Hello {{.first_name}}"`
	Text              string   `json:"text" jsonschema:"the plain-text body, a Go template"`
	HTML              string   `json:"html,omitempty" jsonschema:"an optional HTML body, a Go html/template"`
	RequiredApprovals int      `json:"required_approvals,omitempty" jsonschema:"how many distinct people must approve (default 1)"`
	Targets           []Target `json:"targets,omitempty" jsonschema:"the recipients; more can be added with add_targets"`
	IdempotencyKey    string   `json:"idempotency_key,omitempty" jsonschema:"reuse the same key when retrying after a timeout, so the campaign is created once"`
	Transactional     bool     `json:"transactional,omitempty" jsonschema:"true for transactional mail (receipts, password resets): the messages carry no one-click unsubscribe link; the approver sees it. Default false: each message has one, and {{.unsubscribe_url}} places it in a body"`
}

// CampaignInput names a campaign.
type CampaignInput struct {
	CampaignID string `json:"campaign_id" jsonschema:"the campaign's id, as propose_campaign or list_campaigns gave it"`
}

// AddTargetsInput is add_targets' input.
type AddTargetsInput struct {
	CampaignID string   `json:"campaign_id" jsonschema:"the campaign's id"`
	Targets    []Target `json:"targets" jsonschema:"the recipients to add"`
	Replace    bool     `json:"replace,omitempty" jsonschema:"replace the draft's list instead of adding to it"`
}

// EditInput is edit_draft's input.
type EditInput struct {
	CampaignID string  `json:"campaign_id" jsonschema:"the campaign's id"`
	From       *string `json:"from,omitempty" jsonschema:"a new From address"`
	Subject    *string `json:"subject,omitempty" jsonschema:"a new subject template"`
	Text       *string `json:"text,omitempty" jsonschema:"a new text body template"`
	HTML       *string `json:"html,omitempty" jsonschema:"a new HTML body template"`
}

// WaitInput is wait_for_decision's input.
type WaitInput struct {
	CampaignID     string `json:"campaign_id" jsonschema:"the campaign's id"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for a person to decide, in seconds: 1 to 60 (default 30)"`
}

// waitDefault is wait_for_decision's timeout when the agent gives none;
// the bound is the API's (approval.DecisionWaitMax).
const waitDefault = 30 * time.Second

// waitProgressEvery is how often a waiting tool call reports progress,
// when the client asked for it (a client may keep a call alive on it).
const waitProgressEvery = 10 * time.Second

// ListInput is list_campaigns' input.
type ListInput struct {
	Limit int    `json:"limit,omitempty" jsonschema:"how many (1-200, default 20)"`
	After string `json:"after,omitempty" jsonschema:"the previous page's next cursor"`
}

// Result is every tool's structured answer: the API's JSON.
type Result map[string]any

// New returns the MCP server for client.
func New(client *apiclient.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "onceplan", Version: version}, &mcp.ServerOptions{
		Instructions: "Onceplan performs bulk actions (emails) exactly once per recipient, after a person approves them." + humansDecide,
	})
	t := &tools{c: client}
	mcp.AddTool(s, &mcp.Tool{Name: "propose_campaign", Description: "Create a draft campaign: sender, subject and body templates, and its recipients. Answers the campaign id, the import report (accepted, duplicate and rejected recipients with reasons) and the approval_url. Call submit_for_approval when the draft is ready." + humansDecide}, t.propose)
	mcp.AddTool(s, &mcp.Tool{Name: "add_targets", Description: "Add recipients to a draft campaign (or replace its list). Answers the import report: every recipient is accepted, a duplicate of an earlier one, or rejected with a reason." + humansDecide}, t.addTargets)
	mcp.AddTool(s, &mcp.Tool{Name: "edit_draft", Description: "Change a draft's sender, subject or body templates. Editing an approved campaign starts a new version that needs a new approval." + humansDecide}, t.edit)
	mcp.AddTool(s, &mcp.Tool{Name: "submit_for_approval", Description: "Submit a draft for approval. It checks every recipient has the merge variables the templates use; recipients whose variables are empty do not stop it, and the answer's warnings list them, so you can tell your user or correct the list (add_targets with replace) and submit again." + humansDecide}, t.submit)
	mcp.AddTool(s, &mcp.Tool{Name: "campaign_status", Description: "A campaign's state, plan hash, approvals so far, counts of recipients per state (not started, pending, done, unknown, failed, stranded, revoked, outside the plan, suppressed: not sent because they unsubscribed, bounced or complained), its approval_url, how many live worker processes serve its provider (provider_workers), its warnings — when no live worker serves the provider, nothing is sent until someone runs one: tell your user — once it ended, its outcome (ending sent, or incomplete with how many recipients were refused by the provider, given up after their tries, never reached the provider, in doubt: the state stays completed, so read the outcome before telling your user it was sent), and next_steps: what a person must do next, each with who (the role), what (a sentence to pass on), count (approvals missing, or targets concerned) and url (the page where it is done), e.g. approvals missing or unknown recipients to resolve." + humansDecide}, t.status)
	mcp.AddTool(s, &mcp.Tool{Name: "wait_for_decision", Description: fmt.Sprintf("Wait until a person decides on the campaign's submitted version, up to timeout_seconds (1 to %d, default %d), and answer the decision: approved; rejected, with the approver's reason; cancelled; not_submitted (nothing waits for a decision: submit first); or still pending when the time runs out, with waiting_for saying who must act (the approver role, how many approvals are missing, and the approval_url to give your user). It answers within a second of the decision. Call it again to keep waiting. Waiting decides nothing: you cannot approve.",
		int(approval.DecisionWaitMax/time.Second), int(waitDefault/time.Second)) + humansDecide}, t.waitForDecision)
	mcp.AddTool(s, &mcp.Tool{Name: "list_campaigns", Description: "List campaigns, newest first, with their state and, once they ended, their outcome (sent, or incomplete)." + humansDecide}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "audit", Description: "The exactly-once audit of an approved campaign: approved recipients, exactly once, missing, in doubt, failed, stranded, revoked, duplicates, whether the frozen plan is intact, whether exactly-once holds, and the reasons when it does not." + humansDecide}, t.audit)
	addEffectTools(s, t)
	return s
}

type tools struct {
	c *apiclient.Client
}

// call performs an API request; an API error becomes a tool error the
// model can read and act on (not a protocol error).
func (t *tools) call(ctx context.Context, r apiclient.Request) (*mcp.CallToolResult, Result, error) {
	var out Result
	if err := t.c.Do(ctx, r, &out); err != nil {
		msg := err.Error()
		var ae *apiclient.Error
		if errors.As(err, &ae) {
			msg = fmt.Sprintf("Onceplan refused (HTTP %d, %s): %s", ae.Status, ae.Code, ae.Message)
			if ae.Status == http.StatusForbidden {
				msg += " — an agent token cannot do this; ask a person to do it in the web UI."
			}
		}
		return nil, nil, errors.New(msg)
	}
	return nil, out, nil
}

func path(id, rest string) string { return "/campaigns/" + url.PathEscape(id) + rest }

func (t *tools) propose(ctx context.Context, _ *mcp.CallToolRequest, in ProposeInput) (*mcp.CallToolResult, Result, error) {
	if in.Provider == "" {
		in.Provider = "outbox"
	}
	body := map[string]any{"name": in.Name, "provider": in.Provider, "from": in.From, "subject": in.Subject, "text": in.Text}
	if in.HTML != "" {
		body["html"] = in.HTML
	}
	if in.RequiredApprovals > 0 {
		body["required_approvals"] = in.RequiredApprovals
	}
	if in.Transactional {
		body["list_unsubscribe"] = false
	}
	if len(in.Targets) > 0 {
		body["targets"] = in.Targets
	}
	r := apiclient.Request{Method: http.MethodPost, Path: "/campaigns", JSON: body}
	if in.IdempotencyKey != "" {
		r.Header = http.Header{"Idempotency-Key": {in.IdempotencyKey}}
	}
	return t.call(ctx, r)
}

func (t *tools) addTargets(ctx context.Context, _ *mcp.CallToolRequest, in AddTargetsInput) (*mcp.CallToolResult, Result, error) {
	b, err := json.Marshal(in.Targets)
	if err != nil {
		return nil, nil, err
	}
	q := url.Values{}
	if !in.Replace {
		q.Set("append", "true")
	}
	return t.call(ctx, apiclient.Request{Method: http.MethodPost, Path: path(in.CampaignID, "/targets"), Query: q,
		Body: bytes.NewReader(b), ContentType: "application/json"})
}

func (t *tools) edit(ctx context.Context, _ *mcp.CallToolRequest, in EditInput) (*mcp.CallToolResult, Result, error) {
	body := map[string]any{}
	for name, v := range map[string]*string{"from": in.From, "subject": in.Subject, "text": in.Text, "html": in.HTML} {
		if v != nil {
			body[name] = *v
		}
	}
	return t.call(ctx, apiclient.Request{Method: http.MethodPatch, Path: path(in.CampaignID, ""), JSON: body})
}

func (t *tools) submit(ctx context.Context, _ *mcp.CallToolRequest, in CampaignInput) (*mcp.CallToolResult, Result, error) {
	return t.call(ctx, apiclient.Request{Method: http.MethodPost, Path: path(in.CampaignID, "/submit")})
}

func (t *tools) status(ctx context.Context, req *mcp.CallToolRequest, in CampaignInput) (*mcp.CallToolResult, Result, error) {
	res, out, err := t.call(ctx, apiclient.Request{Method: http.MethodGet, Path: path(in.CampaignID, "")})
	if err != nil || out == nil {
		return res, out, err
	}
	// Once approved, the exactly-once headline: done exactly once / approved.
	switch out["state"] {
	case "draft", "pending_approval", "cancelled":
		out["exactly_once"] = "not approved yet: nothing has been sent"
	default:
		var m map[string]any
		if err := t.c.Do(ctx, apiclient.Request{Method: http.MethodGet, Path: path(in.CampaignID, "/audit")}, &m); err == nil {
			verdict := "does not hold yet"
			if m["holds"] == true {
				verdict = "holds"
			}
			out["exactly_once"] = fmt.Sprintf("%v of %v approved targets done exactly once; exactly-once %s", m["exactly_once"], m["approved"], verdict)
		}
	}
	return res, out, nil
}

func (t *tools) waitForDecision(ctx context.Context, req *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, Result, error) {
	maxSeconds := int(approval.DecisionWaitMax / time.Second)
	wait := waitDefault
	switch {
	case in.TimeoutSeconds < 0 || in.TimeoutSeconds > maxSeconds:
		return nil, nil, fmt.Errorf("timeout_seconds must be between 1 and %d, not %d; call wait_for_decision again to wait longer",
			maxSeconds, in.TimeoutSeconds)
	case in.TimeoutSeconds > 0:
		wait = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if token := req.Params.GetProgressToken(); token != nil {
		// The client asked for progress: report it while waiting, so
		// that a client which times calls out on silence keeps this one.
		done := make(chan struct{})
		defer close(done)
		go func() {
			tick := time.NewTicker(waitProgressEvery)
			defer tick.Stop()
			start := time.Now()
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				case now := <-tick.C:
					// Advisory: a progress report that fails changes nothing.
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
						Progress: now.Sub(start).Seconds(), Total: wait.Seconds(), Message: "waiting for a person to decide"})
				}
			}
		}()
	}
	q := url.Values{"wait": {strconv.Itoa(int(wait / time.Second))}}
	return t.call(ctx, apiclient.Request{Method: http.MethodGet, Path: path(in.CampaignID, "/decision"), Query: q})
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, Result, error) {
	if in.Limit == 0 {
		in.Limit = 20
	}
	q := url.Values{"limit": {strconv.Itoa(in.Limit)}}
	if in.After != "" {
		q.Set("after", in.After)
	}
	return t.call(ctx, apiclient.Request{Method: http.MethodGet, Path: "/campaigns", Query: q})
}

func (t *tools) audit(ctx context.Context, _ *mcp.CallToolRequest, in CampaignInput) (*mcp.CallToolResult, Result, error) {
	return t.call(ctx, apiclient.Request{Method: http.MethodGet, Path: path(in.CampaignID, "/audit")})
}
