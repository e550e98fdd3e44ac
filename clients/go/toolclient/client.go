// Package toolclient performs an agent's tool calls exactly once through a
// running Onceplan's single-effects API (POST /api/v1/effects and its
// settle, heartbeat and status routes; package toolcall is the server's
// side).
//
// [Client.Do] is the whole protocol in one call: it commits the intent
// (begin) before the tool body runs, runs the body only when this caller
// holds the key's lease, heartbeats while it runs, and settles with the
// outside system's raw answer. When the key was already performed it
// returns the recorded result instead of calling again; when the call is
// in doubt or awaits a person's approval it returns an error that says
// so, and the body is not run.
//
// The body must pass the key to the outside system as its idempotency key
// (or operation id): that is what lets a tool registered with recovery
// "dedupe" be performed again after a crash without a second effect, and
// one with "probe" be asked whether it happened.
//
// The package imports only the standard library.
package toolclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one Onceplan server with one API token (an agent token is
// enough: agents may begin, heartbeat, settle and read).
type Client struct {
	// Server is the base URL, e.g. http://127.0.0.1:8080.
	Server string
	Token  string
	HTTP   *http.Client
}

// New checks the server URL and returns a client.
func New(server, token string) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("toolclient: the server URL %q is not an http(s) URL like http://127.0.0.1:8080", server)
	}
	if strings.TrimSpace(token) == "" {
		return nil, errors.New("toolclient: no API token (create one with `onceplan token create --agent`)")
	}
	return &Client{Server: strings.TrimSuffix(server, "/"), Token: strings.TrimSpace(token), HTTP: &http.Client{Timeout: MaxWait + 30*time.Second}}, nil
}

// Target is the resolved identity the effect lands on.
type Target struct {
	Kind  string `json:"kind"` // "subject" or "email"
	Value string `json:"value"`
}

// Subject is a target named by an opaque id (an account, a record).
func Subject(id string) Target { return Target{Kind: "subject", Value: id} }

// Email is a target that is an email address.
func Email(addr string) Target { return Target{Kind: "email", Value: addr} }

// Intent is one tool call: its identity (whose ledger key names it) and
// its args (stored and hashed beside the key, never part of it).
type Intent struct {
	// Event is the run's or trigger's stable occurrence id: the same on a
	// retry or a restart of the same step, new for a new decision.
	Event       string
	Tool        string
	Target      Target
	AmountMinor int64
	Scope       string
	// Args is the tool's input, marshalled to JSON (a json.RawMessage is
	// sent as is). nil sends {}.
	Args any
	// Recovery is the tool's recovery as the caller declares it ("":
	// whatever is registered); it must match the registration.
	Recovery string
	// Lease is how long the body has before a heartbeat (default 60s).
	Lease time.Duration
}

// lease is in.Lease, or the server's default of 60s.
func (in Intent) lease() time.Duration {
	if in.Lease == 0 {
		return time.Minute
	}
	return in.Lease
}

// seconds is a lease as the API's lease_seconds: whole seconds, at least 1.
func seconds(lease time.Duration) int { return int(max(lease, time.Second) / time.Second) }

// Effect is the server's answer about a call (the API's SingleEffect).
type Effect struct {
	Key        string `json:"key"`
	Epoch      int    `json:"epoch"`
	State      string `json:"state"`
	Tool       string `json:"tool"`
	Event      string `json:"event"`
	Target     Target `json:"target"`
	ArgsDigest string `json:"args_digest"`
	Recovery   string `json:"recovery"`
	// How long the tool's outside system honours a key, and can be asked
	// about a call, from the first call (0: for ever).
	DedupeWindowSeconds   int  `json:"dedupe_window_seconds"`
	ProbeRetentionSeconds int  `json:"probe_retention_seconds"`
	ApprovalRequired      bool `json:"approval_required"`
	// Args is the JSON the call was begun with (Get's answer).
	Args json.RawMessage `json:"args"`
	// KeyFree: nothing blocks the key; the next Do performs the call (a
	// call a person resolved as not delivered is failed, and free).
	KeyFree    bool       `json:"key_free"`
	Attempt    int        `json:"attempt"`
	Lease      string     `json:"lease"`
	LeaseUntil *time.Time `json:"lease_until"`
	// LeaseSeconds is the lease's whole seconds left when the server
	// answered, by its clock (nil without a lease): time the lease by it
	// and the local clock, counted from when the request was sent, rather
	// than by LeaseUntil against a local clock that may differ.
	LeaseSeconds *int    `json:"lease_seconds"`
	Takeover     bool    `json:"takeover"`
	Receipt      string  `json:"receipt"`
	Raw          *string `json:"raw"`
	// RawSource says whose Raw is: "settle" (the outside system's, as
	// settled), "probe" (the tool's probe, asked by Onceplan's recovery)
	// or "person" (the evidence of the person who resolved it).
	RawSource   string `json:"raw_source"`
	Reason      string `json:"reason"`
	ResolvedBy  string `json:"resolved_by"`
	ApprovalURL string `json:"approval_url"`
	URL         string `json:"url"`
	Next        string `json:"next"`
	RetryAfter  int    `json:"retry_after"`
}

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	// StoredArgsDigest is set on 422: the digest of the args the key is
	// bound to.
	StoredArgsDigest string
}

func (e *Error) Error() string {
	return fmt.Sprintf("onceplan: %s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// The errors Do returns when it did not run the body, each with the
// server's answer (errors.As to *NotPerformedError).
var (
	// ErrInDoubt: another call holds the key, or its outcome is unknown:
	// do not perform it (Effect.Next says what happens next).
	ErrInDoubt = errors.New("in doubt")
	// ErrAwaitingApproval: a person must approve these args first, at
	// Effect.ApprovalURL.
	ErrAwaitingApproval = errors.New("awaiting approval")
	// ErrArgsMismatch: the key is bound to other args (a changed call
	// under the same event id): give it a new event id.
	ErrArgsMismatch = errors.New("args mismatch")
)

// NotPerformedError is Do's refusal to run the body.
type NotPerformedError struct {
	Kind   error // ErrInDoubt, ErrAwaitingApproval or ErrArgsMismatch
	Effect Effect
	API    *Error // the 422's error
}

func (e *NotPerformedError) Error() string {
	if e.API != nil {
		return e.API.Error()
	}
	return fmt.Sprintf("onceplan: the call was not performed (%s, state %s): %s", e.Kind, e.Effect.State, e.Effect.Next)
}

// Unwrap makes errors.Is(err, ErrInDoubt) (and the others) hold.
func (e *NotPerformedError) Unwrap() error { return e.Kind }

// definite marks a body's error as a definite rejection: nothing was
// performed at the outside system.
type definite struct{ err error }

func (d definite) Error() string { return d.err.Error() }
func (d definite) Unwrap() error { return d.err }

// Rejected wraps a body's error to say the outside system definitely did
// not perform the call (it refused it, or the request never left): Do
// settles it as failed, which frees the key. Any other error of the body
// is settled as unknown — it may or may not have happened.
func Rejected(err error) error { return definite{err} }

// Result is what Do did.
type Result struct {
	Effect Effect
	// Replayed: the call was already done; nothing was performed now, and
	// Receipt and Raw are the recorded result: RawSource says whose (a
	// probe's answer, or a person's evidence when they resolved it, is
	// not the tool's own).
	Replayed  bool
	Receipt   string
	Raw       []byte
	RawSource string
}

// Body performs the call at the outside system with key as its
// idempotency key, and returns the outside system's raw answer and its id
// for the effect (the receipt). ctx ends when the lease is lost.
type Body func(ctx context.Context, key string) (raw []byte, receipt string, err error)

// Do performs the call in.Event/in.Tool/in.Target once: begin; then, only
// when this caller holds the lease, body (heartbeating meanwhile) and the
// settle with its answer. A key already done returns its recorded result
// (Replayed) without running body; in doubt, awaiting approval and args
// mismatch return a *NotPerformedError without running it. The error of
// a body that ran is returned after its outcome is settled.
func (c *Client) Do(ctx context.Context, in Intent, body Body) (Result, error) {
	lease := in.lease()
	eff, status, sent, err := c.begin(ctx, in)
	if err != nil {
		return Result{}, err
	}
	switch status {
	case http.StatusOK:
		res := Result{Effect: eff, Replayed: true, Receipt: eff.Receipt, RawSource: eff.RawSource}
		if eff.Raw != nil {
			res.Raw = []byte(*eff.Raw)
		}
		return res, nil
	case http.StatusAccepted:
		return Result{Effect: eff}, &NotPerformedError{Kind: ErrAwaitingApproval, Effect: eff}
	case http.StatusConflict:
		return Result{Effect: eff}, &NotPerformedError{Kind: ErrInDoubt, Effect: eff}
	}
	// 201: the lease is ours from when the begin was sent (the server's
	// lease runs from its commit, later), so the local deadline is never
	// past the server's.
	bodyCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	deadline := leaseEnd(sent, lease, eff)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		c.heartbeat(bodyCtx, eff, lease, deadline, stop)
	}()
	var raw []byte
	var receipt string
	var bodyErr error
	if time.Until(deadline) <= 0 {
		// Never start a call after the lease: another caller may own it.
		bodyErr = fmt.Errorf("%w: the lease ended before the body could start", ErrInDoubt)
	} else {
		raw, receipt, bodyErr = body(bodyCtx, eff.Key)
	}
	stop(nil)
	<-hbDone
	outcome, reason := "done", ""
	var def definite
	switch {
	case bodyErr != nil && errors.As(bodyErr, &def):
		outcome, reason = "failed", bodyErr.Error()
	case bodyErr != nil:
		outcome, reason = "unknown", bodyErr.Error()
	case strings.TrimSpace(receipt) == "":
		receipt = "ok"
	}
	if raw == nil && outcome != "unknown" {
		raw = []byte{}
	}
	settled, err := c.settleRetrying(context.WithoutCancel(ctx), eff, outcome, receipt, reason, raw)
	if err != nil {
		return Result{Effect: eff, Receipt: receipt, Raw: raw}, errors.Join(bodyErr, err)
	}
	// The settle's answer, with what the begin said of this attempt.
	settled.Takeover, settled.Lease = eff.Takeover, eff.Lease
	if settled.State == "unknown" && outcome != "unknown" {
		// The lease ended before the settle and recovery left the call
		// for a person, who has this answer beside it.
		return Result{Effect: settled, Receipt: receipt, Raw: raw}, errors.Join(bodyErr,
			fmt.Errorf("%w: the lease ended before the settle, so the call stays unknown until a person resolves it (the answer is recorded for them): %s", ErrInDoubt, settled.Next))
	}
	return Result{Effect: settled, Receipt: receipt, Raw: raw}, bodyErr
}

// leaseEnd is the local deadline of a lease of length lease given by an
// answer to a request sent at sent. Both sent+lease and the server's
// lease_seconds counted from sent are never past the server's end of the
// lease, whatever the two clocks say: the lease ran from the server's
// commit, after sent, and lease_seconds is what was left (rounded down)
// when it answered, later still. The later of the two is the deadline;
// lease_seconds is the longer when the lease was longer than asked (a
// heartbeat keeps a longer lease's end).
func leaseEnd(sent time.Time, lease time.Duration, eff Effect) time.Time {
	if eff.LeaseSeconds != nil {
		lease = max(lease, time.Duration(*eff.LeaseSeconds)*time.Second)
	}
	return sent.Add(lease)
}

// heartbeat extends the lease every third of it while the body runs, and
// cancels the body when the lease is lost (refused) or its local deadline
// passes without a successful heartbeat.
func (c *Client) heartbeat(ctx context.Context, eff Effect, lease time.Duration, deadline time.Time, stop context.CancelCauseFunc) {
	every := max(lease/3, 200*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(deadline)):
			stop(fmt.Errorf("%w: the lease ended without a heartbeat", ErrInDoubt))
			return
		case <-t.C:
			sent := time.Now()
			// Never waiting (out a 429) past the local deadline: then the
			// body must stop.
			hctx, cancel := context.WithDeadline(ctx, deadline)
			hb, err := c.Heartbeat(hctx, eff.Key, eff.Lease, lease)
			cancel()
			var apiErr *Error
			switch {
			case err == nil:
				deadline = leaseEnd(sent, lease, hb)
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
				stop(fmt.Errorf("%w: the lease was lost: %s", ErrInDoubt, apiErr.Message))
				return
			}
		}
	}
}

// settleRetrying settles, again after a transport error (a settle that
// committed answers the same when repeated).
func (c *Client) settleRetrying(ctx context.Context, eff Effect, outcome, receipt, reason string, raw []byte) (Effect, error) {
	var err error
	for try := range 5 {
		var out Effect
		out, err = c.Settle(ctx, eff.Key, SettleParams{Lease: eff.Lease, Outcome: outcome, Receipt: receipt, Reason: reason, Raw: raw})
		var apiErr *Error
		if err == nil || errors.As(err, &apiErr) {
			return out, err
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	return Effect{}, err
}

// Begin commits in's intent and answers the server's status: 201 (this
// caller holds Effect.Lease and may perform it), 200 done, 202 awaiting
// approval, 409 in doubt. A 422 (args mismatch) is a *NotPerformedError;
// other failures an *Error.
func (c *Client) Begin(ctx context.Context, in Intent) (Effect, int, error) {
	eff, status, _, err := c.begin(ctx, in)
	return eff, status, err
}

// begin is Begin, and when the answered request was sent: the lease runs
// from the server's commit, later, so a deadline counted from then is
// never past the server's.
func (c *Client) begin(ctx context.Context, in Intent) (Effect, int, time.Time, error) {
	args := in.Args
	if args == nil {
		args = json.RawMessage(`{}`)
	}
	body := map[string]any{"event": in.Event, "tool": in.Tool, "target": in.Target, "args": args,
		"lease_seconds": seconds(in.lease())}
	if in.AmountMinor != 0 {
		body["amount_minor"] = in.AmountMinor
	}
	if in.Scope != "" {
		body["scope"] = in.Scope
	}
	if in.Recovery != "" {
		body["recovery"] = in.Recovery
	}
	var eff Effect
	status, sent, err := c.callSent(ctx, http.MethodPost, "/effects", body, &eff, http.StatusOK, http.StatusCreated, http.StatusAccepted, http.StatusConflict)
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity {
		return Effect{}, status, sent, &NotPerformedError{Kind: ErrArgsMismatch, API: apiErr}
	}
	return eff, status, sent, err
}

// SettleParams is a settle's body.
type SettleParams struct {
	Lease   string
	Outcome string // done, failed or unknown
	Receipt string
	Reason  string
	// Raw is the outside system's answer as received; nil sends none
	// (allowed only with unknown).
	Raw []byte
}

// Settle reports the call's outcome with its raw answer.
func (c *Client) Settle(ctx context.Context, key string, p SettleParams) (Effect, error) {
	body := map[string]any{"lease": p.Lease, "outcome": p.Outcome}
	if p.Receipt != "" {
		body["receipt"] = p.Receipt
	}
	if p.Reason != "" {
		body["reason"] = p.Reason
	}
	if p.Raw != nil {
		body["raw"] = string(p.Raw)
	}
	var eff Effect
	_, err := c.call(ctx, http.MethodPost, "/effects/"+url.PathEscape(key)+"/settle", body, &eff, http.StatusOK)
	return eff, err
}

// Heartbeat extends the lease to lease from now.
func (c *Client) Heartbeat(ctx context.Context, key, leaseID string, lease time.Duration) (Effect, error) {
	var eff Effect
	_, err := c.call(ctx, http.MethodPost, "/effects/"+url.PathEscape(key)+"/heartbeat",
		map[string]any{"lease": leaseID, "lease_seconds": seconds(lease)}, &eff, http.StatusOK)
	return eff, err
}

// Get reads the call's state now (to the user it was begun for, their
// tokens included, and operators and admins; a 404 *Error to others).
func (c *Client) Get(ctx context.Context, key string) (Effect, error) {
	return c.Wait(ctx, key, 0)
}

// MaxWait is the longest Wait the server accepts.
const MaxWait = 60 * time.Second

// Wait reads the call's state once it changes (a settle, Onceplan's
// recovery, a person's resolution or approval), or after wait with it
// unchanged; a call that is not pending, unknown or awaiting approval is
// answered at once. wait is at most MaxWait; 0 is Get.
func (c *Client) Wait(ctx context.Context, key string, wait time.Duration) (Effect, error) {
	path := "/effects/" + url.PathEscape(key)
	if wait > 0 {
		path += "?wait=" + strconv.Itoa(int(min(wait, MaxWait)/time.Second)) + "s"
	}
	var eff Effect
	_, err := c.call(ctx, http.MethodGet, path, nil, &eff, http.StatusOK)
	return eff, err
}

// maxRateLimited bounds how many times call waits out a 429 before it
// returns it.
const maxRateLimited = 5

// call performs one request and decodes an answer with one of the ok
// statuses into out; any other is an *Error. A 429 (the token's rate
// limit) is answered before the request is carried out, so it is sent
// again after the Retry-After the server asks for, a few times.
func (c *Client) call(ctx context.Context, method, path string, in, out any, ok ...int) (int, error) {
	status, _, err := c.callSent(ctx, method, path, in, out, ok...)
	return status, err
}

// callSent is call, and when the request it answers with was sent.
func (c *Client) callSent(ctx context.Context, method, path string, in, out any, ok ...int) (int, time.Time, error) {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, time.Time{}, err
		}
		payload = b
	}
	for try := 1; ; try++ {
		sent := time.Now()
		status, wait, err := c.once(ctx, method, path, payload, in != nil, out, ok...)
		var apiErr *Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || try == maxRateLimited {
			return status, sent, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, sent, err
		case <-t.C:
		}
	}
}

// once performs one request; on a 429, wait is how long the server asks
// the client to wait (its Retry-After, else a second).
func (c *Client) once(ctx context.Context, method, path string, payload []byte, hasBody bool, out any, ok ...int) (int, time.Duration, error) {
	var body io.Reader
	if hasBody {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+"/api/v1"+path, body)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return res.StatusCode, 0, err
	}
	for _, s := range ok {
		if res.StatusCode == s {
			if err := json.Unmarshal(raw, out); err != nil {
				return res.StatusCode, 0, fmt.Errorf("onceplan answered HTTP %d with a body that is not its JSON: %w", res.StatusCode, err)
			}
			return res.StatusCode, 0, nil
		}
	}
	wait := time.Second
	if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && secs > 0 && secs <= 60 {
		wait = time.Duration(secs) * time.Second
	}
	var e struct {
		Error            Error  `json:"error"`
		StoredArgsDigest string `json:"stored_args_digest"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Error.Message == "" {
		e.Error = Error{Code: "http", Message: strings.TrimSpace(string(raw))}
	}
	e.Error.Status, e.Error.StoredArgsDigest = res.StatusCode, e.StoredArgsDigest
	return res.StatusCode, wait, &e.Error
}
