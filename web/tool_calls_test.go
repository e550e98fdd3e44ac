package web

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestToolCallPages: the list shows the approvals and unknowns waiting
// for a person and the calls by tool and state; an approver approves the
// exact args on the request's page (not the user the call was begun
// for); an operator resolves an unknown on the call's page; every
// decision is in the tool's and event's audit trail. (Who reads which:
// TestToolCallReadsAreTheAPIs.)
func TestToolCallPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	svc := toolcall.NewService(b.pool, toolcall.Options{})
	_, err := toolcall.Register(ctx, b.pool, toolcall.RegisterParams{Tool: "payment.send", ApprovalRequired: true,
		Description: "pays a vendor", RegisteredBy: "admin@example.com"})
	require.NoError(t, err)
	// The agent acts for the proposer.
	agent := b.as["proposer"].actor
	agent.Agent = true
	begin := func(tool, event string, args string, lease time.Duration) toolcall.BeginResult {
		res, err := svc.Begin(ctx, agent, toolcall.BeginParams{
			Identity: ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "vendor-7"}, AmountMinor: 5000},
			Args:     []byte(args), Lease: lease})
		require.NoError(t, err)
		return res
	}
	pay := begin("payment.send", "invoice-42", `{"cents": 5000, "iban": "DE02"}`, time.Minute)
	require.Equal(t, toolcall.AwaitingApproval, pay.Outcome)
	// A call of a tool without recovery whose lease ends: unknown.
	lost := begin("crm.note", "run-3", `{"text": "hello"}`, time.Second)
	require.Equal(t, toolcall.Perform, lost.Outcome)
	await.Until(t, time.Minute, "the expired attempt recovered", func() bool {
		n, err := svc.RecoverDue(ctx, 10)
		require.NoError(t, err)
		return n == 1
	})

	op, ap := b.as["operator"], b.as["approver"]
	d := parse(t, op.get("/tool-calls"))
	require.Equal(t, 1, tid(d, "tool-approval-waiting").Length())
	require.Equal(t, 1, tid(d, "tool-unknown-list").Find(`[data-testid="tool-call"][data-state="unknown"]`).Length())
	require.Equal(t, "1", tid(d, "tool-counts").Find(`[data-tool="payment.send"] [data-state="awaiting_approval"]`).Text())
	require.Equal(t, "1", tid(d, "tool-counts").Find(`[data-tool="crm.note"] [data-state="unknown"]`).Text())
	require.Equal(t, "yes", tid(d, "tool-policies").Find(`[data-tool="crm.note"]`).AttrOr("data-first-use", ""))
	require.Contains(t, tid(d, "tool-policies").Find(`[data-tool="crm.note"]`).Text(), "no recovery, no approval (registered on first use)")
	require.Equal(t, 1, tid(d, "nav-tool-calls").Length())

	// The approval page shows exactly the args and their digest.
	reqURL := "/tool-calls/approvals/" + strconv.FormatInt(pay.Status.ApprovalID, 10)
	d = parse(t, ap.get(reqURL))
	require.Equal(t, pay.Status.ArgsDigest, tid(d, "tool-approval-digest").Text())
	require.Contains(t, tid(d, "tool-approval-args").Text(), `"iban": "DE02"`)
	require.Equal(t, "5000", tid(d, "tool-approval-amount").Text())
	require.Equal(t, 1, tid(d, "tool-approve-form").Length())
	d = parse(t, b.as["proposer"].get(reqURL))
	require.Equal(t, 0, tid(d, "tool-approve-form").Length(), "the user the call was begun for does not decide")
	require.Equal(t, http.StatusForbidden, b.as["proposer"].post(reqURL+"/approve", url.Values{"args_digest": {pay.Status.ArgsDigest}}).Code)
	require.Equal(t, http.StatusForbidden, op.post(reqURL+"/approve", url.Values{"args_digest": {pay.Status.ArgsDigest}}).Code)
	require.Equal(t, http.StatusConflict, ap.post(reqURL+"/approve", url.Values{"args_digest": {"0000"}}).Code, "the digest shown is the one approved")
	require.Equal(t, toolcall.AwaitingApproval, begin("payment.send", "invoice-42", `{"cents": 5000, "iban": "DE02"}`, time.Minute).Outcome)
	rec := ap.post(reqURL+"/approve", url.Values{"args_digest": {pay.Status.ArgsDigest}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, ap.get(reqURL))
	require.Equal(t, "approved", tid(d, "tool-approval").AttrOr("data-decision", ""))
	require.Equal(t, toolcall.Perform, begin("payment.send", "invoice-42", `{"cents": 5000, "iban": "DE02"}`, time.Minute).Outcome)

	// The unknown's page: a person resolves it.
	callURL := "/tool-calls/effects/" + url.PathEscape(string(lost.Status.Key))
	d = parse(t, b.as["proposer"].get(callURL))
	require.Equal(t, "unknown", tid(d, "tool-call-detail").AttrOr("data-state", ""))
	require.Contains(t, tid(d, "tool-call-next").Text(), "Resolve it from the outside system's evidence")
	require.Equal(t, 0, tid(d, "tool-resolve-form").Length(), "the call's user reads; an operator resolves")
	d = parse(t, op.get(callURL))
	require.Equal(t, 1, tid(d, "tool-resolve-form").Length())
	require.Equal(t, http.StatusBadRequest, op.post(callURL+"/resolve", url.Values{"outcome": {"not_delivered"}}).Code)
	rec = op.post(callURL+"/resolve", url.Values{"outcome": {"not_delivered"}, "reason": {"not in the CRM's history"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, op.get(callURL))
	require.Equal(t, "failed", tid(d, "tool-call-detail").AttrOr("data-state", ""))
	require.Equal(t, toolcall.Perform, begin("crm.note", "run-3", `{"text": "hello"}`, time.Minute).Outcome, "not delivered: the next begin performs it")

	// The audit of the tool and event.
	d = parse(t, b.as["proposer"].get("/tool-calls?tool=payment.send&event=invoice-42"))
	var actions []string
	tid(d, "tool-trail").Find(`[data-testid="tool-trail-entry"]`).Each(func(_ int, s *goquery.Selection) { actions = append(actions, s.AttrOr("data-action", "")) })
	require.Equal(t, []string{"request_approval", "approve", "begin"}, actions)
	d = parse(t, op.get("/tool-calls?tool=crm.note&event=run-3"))
	actions = nil
	tid(d, "tool-trail").Find(`[data-testid="tool-trail-entry"]`).Each(func(_ int, s *goquery.Selection) { actions = append(actions, s.AttrOr("data-action", "")) })
	require.Equal(t, []string{"begin", "recover", "resolve", "begin"}, actions)
}
