package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/httperr"
)

// Single effects (package toolcall): an agent runtime's tool calls, one at
// a time, through the ledger. POST /effects begins one, POST
// /effects/{key}/settle and /heartbeat report on it, GET /effects/{key}
// reads it; a person approves its args and resolves its unknowns in the
// UI (and through /effects/{key}/resolve and /revoke, as a campaign's).

// UI pages the answers link to (package web serves them).
const (
	toolApprovalPage = "/tool-calls/approvals/"
	toolEffectPage   = "/tool-calls/effects/"
)

// beginRequest is POST /effects' body: the identity whose ledger key names
// the call, the args, and the tool's declared recovery.
type beginRequest struct {
	Event        string          `json:"event"`
	Tool         string          `json:"tool"`
	Target       ledger.Target   `json:"target"`
	AmountMinor  int64           `json:"amount_minor"`
	Scope        string          `json:"scope"`
	Args         json.RawMessage `json:"args"`
	Recovery     string          `json:"recovery"`
	ProbeURL     string          `json:"probe_url"`
	LeaseSeconds int64           `json:"lease_seconds"`
}

// effectAnswer is every single-effect answer: the key's status (Status),
// what the caller should do next, and, to the caller that may perform it
// (201), the lease.
type effectAnswer struct {
	Key         string        `json:"key"`
	Epoch       int           `json:"epoch"`
	State       string        `json:"state"`
	Tool        string        `json:"tool"`
	Event       string        `json:"event"`
	Target      ledger.Target `json:"target"`
	AmountMinor int64         `json:"amount_minor"`
	Scope       string        `json:"scope"`
	ArgsDigest  string        `json:"args_digest"`
	Recovery    string        `json:"recovery"`
	// The policy's windows, in seconds (absent: for ever).
	DedupeWindowSeconds   int64 `json:"dedupe_window_seconds,omitempty"`
	ProbeRetentionSeconds int64 `json:"probe_retention_seconds,omitempty"`
	ApprovalRequired      bool  `json:"approval_required"`
	// Args: in GET, resolve and revoke answers (to who may read the call).
	Args       json.RawMessage `json:"args,omitempty"`
	KeyFree    bool            `json:"key_free"`
	Attempt    int             `json:"attempt,omitempty"`
	Lease      string          `json:"lease,omitempty"`
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
	// LeaseSeconds is beside LeaseUntil: the seconds left by the server's
	// clock, for a client that does not trust its own against it.
	LeaseSeconds *int    `json:"lease_seconds,omitempty"`
	Holder       string  `json:"holder,omitempty"`
	Takeover     bool    `json:"takeover,omitempty"`
	Registered   bool    `json:"registered,omitempty"`
	Receipt      string  `json:"receipt,omitempty"`
	Raw          *string `json:"raw,omitempty"`
	RawSource    string  `json:"raw_source,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	Resolution   string  `json:"resolution,omitempty"`
	ResolvedBy   string  `json:"resolved_by,omitempty"`
	ApprovedBy   string  `json:"approved_by,omitempty"`
	ApprovalURL  string  `json:"approval_url,omitempty"`
	URL          string  `json:"url"`
	Next         string  `json:"next"`
	RetryAfter   int     `json:"retry_after,omitempty"`
	// Error is set on 409: the answer is a refusal as well as a status.
	Error *httperr.Problem `json:"error,omitempty"`
}

// toolAnswer is st as the API shows it; lease only to the caller that holds it.
func (a *API) toolAnswer(c echo.Context, st toolcall.Status, lease bool) effectAnswer {
	base := a.baseURL(c)
	v := effectAnswer{
		Key: string(st.Key), Epoch: st.Epoch, State: string(st.State), Tool: st.Tool, Event: st.Event,
		Target: st.Target, AmountMinor: st.AmountMinor, Scope: st.Scope, ArgsDigest: st.ArgsDigest,
		Recovery: string(st.Policy.Recovery), ApprovalRequired: st.Policy.ApprovalRequired, Attempt: st.Attempt,
		Holder: st.Holder, KeyFree: st.KeyFree(), Receipt: st.Receipt, Reason: st.Reason, Resolution: st.Resolution, ResolvedBy: st.ResolvedBy,
		ApprovedBy: st.ApprovedBy, URL: base + toolEffectPage + url.PathEscape(string(st.Key)),
		DedupeWindowSeconds:   int64(st.Policy.DedupeWindow / time.Second),
		ProbeRetentionSeconds: int64(st.Policy.ProbeRetention / time.Second),
	}
	if v.State == "" {
		v.State = "new"
	}
	if lease {
		v.Lease = st.LeaseID
	}
	if !st.LeaseUntil.IsZero() && st.InDoubt() {
		at, secs := st.LeaseUntil.UTC(), st.LeaseSeconds
		v.LeaseUntil, v.LeaseSeconds = &at, &secs
	}
	if st.EffectID != 0 && st.RawKind != "" {
		raw := string(st.Raw)
		v.Raw, v.RawSource = &raw, st.RawSource()
	}
	if st.ApprovalID != 0 {
		v.ApprovalURL = base + toolApprovalPage + strconv.FormatInt(st.ApprovalID, 10)
	}
	v.Next, v.RetryAfter = next(st, v)
	return v
}

// next says what the caller does now, in one sentence, and when to ask
// again (seconds; 0: no need).
func next(st toolcall.Status, v effectAnswer) (string, int) {
	switch st.State {
	case toolcall.StateAwaitingApproval:
		return "a person must approve exactly these args (digest " + st.ArgsDigest + ") at approval_url; nothing is performed until then — begin again after the approval to perform it", 0
	case toolcall.StateRejected:
		return "a person rejected these args (" + st.RejectReason + "): do not perform the call", 0
	case toolcall.StateNew:
		return "nothing is recorded at this key's current epoch: begin it to perform it", 0
	}
	switch ledger.State(st.State) {
	case ledger.StateDone:
		return "it is done: replay the recorded result (receipt, raw); do not call again", 0
	case ledger.StateFailed:
		if strings.HasPrefix(st.ResolvedBy, "user:") {
			return "a person (" + strings.TrimPrefix(st.ResolvedBy, "user:") + ") resolved it as not delivered: nothing was performed, and the key is free — begin again to perform it (the next begin performs the call)", 0
		}
		return "its last attempt failed (nothing was performed): the key is free — begin again to perform it (the next begin performs the call)", 0
	case ledger.StateRevoked:
		return "it was revoked (withdrawn outside Onceplan): the next begin performs it again, with the same key", 0
	case ledger.StateStranded:
		return "it exists at the outside system but can never complete: do not call; a person looks at it at url", 0
	case ledger.StateUnknown:
		if st.Closed != "" {
			return "its outcome is unknown and " + st.Closed + ": do not call; a person resolves it at url (an operator or admin: delivered, or not delivered, after which the next begin performs it) — ask again after retry_after, or wait for it with GET /api/v1/effects/{key}?wait=60s", personRetry
		}
		switch st.Policy.Recovery {
		case toolcall.RecoveryProbe:
			return "its outcome is unknown: do not call; Onceplan asks the tool's probe and settles it — begin again later to learn the outcome", 10
		case toolcall.RecoveryDedupe:
			return "its outcome is unknown and the tool deduplicates by key: the next begin performs it again with the same key", 0
		}
		return "its outcome is unknown: do not call; a person resolves it at url (an operator or admin: delivered, or not delivered, after which the next begin performs it) — ask again after retry_after, or wait for it with GET /api/v1/effects/{key}?wait=60s", personRetry
	case ledger.StatePending:
		if !st.LeaseExpired {
			wait := 1
			if v.LeaseUntil != nil {
				wait = max(1, int(time.Until(*v.LeaseUntil).Seconds())+1)
			}
			return "a call holding this key is in flight until lease_until: do not call; begin again after it to learn the outcome", wait
		}
		if st.Closed != "" {
			return "the lease ended without a settle and " + st.Closed + ": do not call; it becomes unknown for a person to resolve at url", 1
		}
		switch st.Policy.Recovery {
		case toolcall.RecoveryProbe:
			return "the lease ended without a settle: do not call; Onceplan asks the tool's probe, and once the settle window has passed a \"not found\" frees the key — begin again later", max(1, int(st.Policy.SettleWindow.Seconds()))
		case toolcall.RecoveryDedupe:
			return "the lease ended without a settle and the tool deduplicates by key: the next begin performs it again with the same key", 0
		}
		return "the lease ended without a settle: do not call; it becomes unknown for a person to resolve at url", 1
	}
	return "", 0
}

// personRetry is when a caller asks again about a call only a person
// settles (seconds): people take minutes, and a long poll (GET
// ?wait=) learns the verdict within a second of it anyway.
const personRetry = 60

// retryAfter sends v's retry_after as Retry-After too.
func retryAfter(c echo.Context, v effectAnswer) {
	if v.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(v.RetryAfter))
	}
}

// beginStatus is each begin outcome's HTTP status.
var beginStatus = map[toolcall.Outcome]int{
	toolcall.Perform:          http.StatusCreated,
	toolcall.AlreadyDone:      http.StatusOK,
	toolcall.InDoubt:          http.StatusConflict,
	toolcall.AwaitingApproval: http.StatusAccepted,
}

func (a *API) beginEffect(c echo.Context, actor auth.Actor) error {
	var req beginRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	lease, err := toolcall.LeaseOf(req.LeaseSeconds)
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.tools.Begin(c.Request().Context(), actor, toolcall.BeginParams{
		Identity: ledger.KeyInput{Event: req.Event, Tool: req.Tool, Target: req.Target, AmountMinor: req.AmountMinor, Scope: req.Scope},
		Args:     req.Args, Recovery: toolcall.Recovery(req.Recovery), ProbeURL: req.ProbeURL, Lease: lease,
	})
	var mismatch *toolcall.ArgsMismatchError
	if errors.As(err, &mismatch) {
		p := httperr.Report(c, a.cfg.Logger, err)
		p.Field = "args"
		return c.JSON(p.Status, struct {
			Error            httperr.Problem `json:"error"`
			Key              string          `json:"key"`
			StoredArgsDigest string          `json:"stored_args_digest"`
			ArgsDigest       string          `json:"args_digest"`
		}{p, string(mismatch.Key), mismatch.StoredDigest, mismatch.GivenDigest})
	}
	if err != nil {
		return a.fail(c, err)
	}
	v := a.toolAnswer(c, res.Status, res.Outcome == toolcall.Perform)
	v.Takeover, v.Registered = res.Takeover, res.Registered
	switch res.Outcome {
	case toolcall.Perform:
		v.Next = "perform the call now, passing key to the outside system as its idempotency key; then settle it (POST /api/v1/effects/{key}/settle with lease and the raw answer) before lease_until, heartbeating to extend the lease while it runs; do not start the call after lease_until"
		if res.Takeover {
			v.Next = "the previous attempt's lease ended in doubt and the tool deduplicates by key: perform it again with the same key (the outside system applies it once), then settle it with lease"
		}
	case toolcall.InDoubt:
		if res.Busy {
			v.Next = "the call's state kept changing under this begin (recovery or another caller acting on it): do not call; begin again shortly to read where it stands"
			v.RetryAfter = max(v.RetryAfter, 1)
		}
		v.Error = &httperr.Problem{Code: "in_doubt", Message: "do not perform the call: " + v.Next}
	}
	if res.Outcome != toolcall.Perform {
		retryAfter(c, v)
	}
	return c.JSON(beginStatus[res.Outcome], v)
}

// keyParam is the {key} of an effect route, percent-decoded: a client
// that escapes the key's colon (v1%3A…, as encodeURIComponent and Python's
// quote do) names the same effect as one that does not.
func keyParam(c echo.Context) string {
	raw := c.Param("key")
	if k, err := url.PathUnescape(raw); err == nil {
		return k
	}
	return raw
}

func (a *API) effectKey(c echo.Context) (ledger.Key, error) {
	key, err := ledger.ParseKey(keyParam(c))
	if err != nil {
		return "", &bodyError{Status: http.StatusBadRequest, Code: "invalid", Field: "key", Message: err.Error()}
	}
	return key, nil
}

// getEffect is GET /effects/{key}: the call's status with its args, to
// who may read it (404 to others); with ?wait= a long poll until its
// state changes. A server that begins to shut down answers its waiters
// with what they would get now.
func (a *API) getEffect(c echo.Context, actor auth.Actor) error {
	key, err := a.effectKey(c)
	if err != nil {
		return a.fail(c, err)
	}
	wait, err := waitParam(c, toolcall.WaitMax)
	if err != nil {
		return a.fail(c, err)
	}
	ctx, cancel := a.untilStopping(c)
	defer cancel()
	st, err := a.tools.Wait(ctx, actor, key, wait)
	if err != nil && errors.Is(err, context.Canceled) && c.Request().Context().Err() == nil && st.Key != "" {
		err = nil // the server is stopping: answer what is known
	}
	if err != nil {
		return a.fail(c, err)
	}
	return a.readAnswer(c, st)
}

// readAnswer answers st with its args to a reader (GET, resolve,
// revoke), with Retry-After when it is worth asking again later.
func (a *API) readAnswer(c echo.Context, st toolcall.Status) error {
	v := a.toolAnswer(c, st, false)
	v.Args = st.Args
	retryAfter(c, v)
	return c.JSON(http.StatusOK, v)
}

// settleRequest is POST /effects/{key}/settle's body.
type settleRequest struct {
	Lease   string  `json:"lease"`
	Outcome string  `json:"outcome"`
	Receipt string  `json:"receipt"`
	Reason  string  `json:"reason"`
	Raw     *string `json:"raw"`
}

func (a *API) settleEffect(c echo.Context, actor auth.Actor) error {
	key, err := a.effectKey(c)
	if err != nil {
		return a.fail(c, err)
	}
	var req settleRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	var raw []byte
	if req.Raw != nil {
		raw = []byte(*req.Raw)
	}
	st, err := a.tools.Settle(c.Request().Context(), actor, toolcall.SettleParams{
		Key: key, Lease: req.Lease, Raw: raw, Outcome: toolcall.SettleOutcome(req.Outcome), Receipt: req.Receipt, Reason: req.Reason,
	})
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, a.toolAnswer(c, st, false))
}

// heartbeatRequest is POST /effects/{key}/heartbeat's body.
type heartbeatRequest struct {
	Lease        string `json:"lease"`
	LeaseSeconds int64  `json:"lease_seconds"`
}

func (a *API) heartbeatEffect(c echo.Context, actor auth.Actor) error {
	key, err := a.effectKey(c)
	if err != nil {
		return a.fail(c, err)
	}
	var req heartbeatRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	lease, err := toolcall.LeaseOf(req.LeaseSeconds)
	if err != nil {
		return a.fail(c, err)
	}
	st, err := a.tools.Heartbeat(c.Request().Context(), actor, key, req.Lease, lease)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, a.toolAnswer(c, st, true))
}

// toolKey reports whether the key of an effect route is a single
// effect's, whose rules are package toolcall's rather than a campaign's.
func (a *API) toolKey(c echo.Context) (bool, error) {
	return a.tools.IsToolKey(c.Request().Context(), keyParam(c))
}

// resolveTool is POST /effects/{key}/resolve for a single effect: the
// call's status after the verdict, as GET /effects/{key} answers it.
func (a *API) resolveTool(c echo.Context, actor auth.Actor, outcome ledger.Outcome, req resolveRequest) error {
	p := toolcall.ResolveParams{Key: ledger.Key(keyParam(c)), Outcome: outcome, Reason: req.Reason, Receipt: req.Receipt}
	if req.Raw != nil {
		p.Raw = []byte(*req.Raw)
	}
	if _, err := a.tools.Resolve(c.Request().Context(), actor, p); err != nil {
		return a.fail(c, err)
	}
	return a.afterAction(c, actor, p.Key)
}

// revokeTool is POST /effects/{key}/revoke for a single effect.
func (a *API) revokeTool(c echo.Context, actor auth.Actor, reason string) error {
	key := ledger.Key(keyParam(c))
	if _, err := a.tools.Revoke(c.Request().Context(), actor, key, reason); err != nil {
		return a.fail(c, err)
	}
	return a.afterAction(c, actor, key)
}

// afterAction answers a person's action on key's call with its status
// (they may read it: whoever may resolve or revoke may).
func (a *API) afterAction(c echo.Context, actor auth.Actor, key ledger.Key) error {
	st, err := a.tools.GetFor(c.Request().Context(), actor, key)
	if err != nil {
		return a.fail(c, err)
	}
	return a.readAnswer(c, st)
}

// errSupersedeTool: a single effect is not superseded; a deliberate second
// effect is a call with a new event id.
var errSupersedeTool = fmt.Errorf("%w: a single effect is not superseded: a deliberate second call is a begin with a new event id", onceplan.ErrConflict)
