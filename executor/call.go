package executor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/onceplan/onceplan/internal/metrics"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Batch calls (docs/ARCHITECTURE.md, "Batch sending"). A provider that
// sends several effects in one call (provider.Batcher, option batch=N)
// takes a job's targets up to N at a time: their pending rows and the
// call's composition — the attempts in order and the exact request — are
// one commit (ledger.ClaimCall); then the one call; then its raw answer and
// every attempt's settle, by its own result, one commit
// (ledger.AnswerCall). Each target keeps its own row and key, and its gate
// is decided at the claim, as for a call of its own. A crash leaves at most
// the call in hand in doubt, and recovery sends it again under its key —
// only the bytes its attempts' frozen plan derives, which must be the
// stored ones (deriveCall) — or asks about each attempt by its effect id
// (recoverCall).

// performCalls is PerformRange for a provider that sends in batch calls:
// the targets ts (from j.Ordinal on) go out batch by batch, each batch
// started only inside the job's budget.
func (e *Executor) performCalls(ctx context.Context, j Job, cp *cachedPlan, prov provider.Batcher, ts []targetRes, budget time.Duration) (Progress, error) {
	started := time.Now()
	size := prov.BatchSize()
	prog := Progress{Next: j.Ordinal}
	for first := 0; first < len(ts); {
		prog.Next = j.Ordinal + first
		if first > 0 && !e.goOn(started, budget) {
			prog.Rest = Result{Action: Snooze, Outcome: "time budget used, or the process is stopping: the rest goes on at once"}
			return prog, nil
		}
		n, res, split, err := e.performCall(ctx, j, cp, prov, j.Ordinal+first, ts[first:min(first+size, len(ts))])
		prog.Split = append(prog.Split, split...)
		if err != nil {
			// The job goes on from the call's first target: the error may
			// have come before the call's claim committed (then nothing of
			// it is in the ledger), and a target claimed is found pending
			// and its call recovered (recoverCall).
			return prog, err
		}
		if res.Action == Snooze {
			prog.Rest = res
			return prog, nil
		}
		first += n
	}
	prog.Next, prog.Rest = j.Ordinal+len(ts), Result{Action: Complete}
	return prog, nil
}

// member is one target of a batch call being made.
type member struct {
	ordinal int
	req     provider.Request
	key     ledger.Key
	eff     ledger.Effect
}

// performCall sends the targets ts, from ordinal first on, in one call, and
// returns how many of them it dealt with (n: the targets before the first
// that cannot be rendered or no longer fits in the call's bytes, left to
// the next call), the queue's next step, and the targets to retry on jobs
// of their own. On an error none of them counts as dealt with.
//
// A target the call's claim did not win (suppressed, its key held, the
// gate closed), and one that cannot be put into a call, takes the one-call
// path afterwards (perform), which says why or sends it alone.
func (e *Executor) performCall(ctx context.Context, j Job, cp *cachedPlan, prov provider.Batcher, first int, ts []targetRes) (n int, res Result, split []int, err error) {
	var ms []member
	for i, t := range ts {
		req, key, err := e.render(ctx, cp, first+i, t, "", 0)
		if err != nil {
			if i == 0 {
				return 0, Result{}, nil, err
			}
			break
		}
		ms = append(ms, member{ordinal: first + i, req: req, key: key})
	}
	n = len(ms)
	// A target that cannot be put into a call goes alone: its own call
	// records why it was not sent.
	var alone []member
	var encoded error
	for len(ms) > 0 {
		_, encoded = prov.EncodeBatch(requests(ms))
		var bad *provider.BatchMemberError
		if !errors.As(encoded, &bad) || bad.Position < 0 || bad.Position >= len(ms) {
			break
		}
		alone = append(alone, ms[bad.Position])
		ms = append(ms[:bad.Position:bad.Position], ms[bad.Position+1:]...)
	}
	// More bytes than the service takes in one call (the last encoding
	// above says so): the first that fit go now, the rest (from the first
	// left out) in the next calls. A target too large for any call goes
	// alone, where the service's answer says why.
	var big *provider.CallTooLargeError
	if errors.As(encoded, &big) && big.Fits < len(ms) {
		carried, next := ms[:big.Fits], big.Fits
		if big.Fits == 0 {
			alone, next = append(alone, ms[0]), 1
		}
		if next < len(ms) {
			n = ms[next].ordinal - first
			alone = slices.DeleteFunc(alone, func(m member) bool { return m.ordinal >= first+n })
		}
		ms = carried
	}
	res = Result{Action: Complete}
	if len(ms) > 0 {
		var left []member
		res, split, left, err = e.call1(ctx, j, cp, prov, ms)
		if err != nil || res.Action == Snooze {
			return n, res, split, err
		}
		alone = append(alone, left...)
	}
	for _, m := range sortedByOrdinal(alone) {
		one := j
		one.Ordinal, one.Count = m.ordinal, 1
		r, err := e.perform(ctx, one, cp, prov, m.req, m.key, nil, nil)
		if err != nil {
			return n, Result{}, split, err
		}
		switch r.Action {
		case Snooze:
			return n, r, split, nil
		case Retry:
			split = append(split, m.ordinal)
		}
	}
	return n, res, split, nil
}

func requests(ms []member) []provider.Request {
	reqs := make([]provider.Request, len(ms))
	for i, m := range ms {
		reqs[i] = m.req
	}
	return reqs
}

func sortedByOrdinal(ms []member) []member {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b member) int { return cmp.Compare(a.ordinal, b.ordinal) })
	return out
}

// call1 claims ms with their call's composition in one commit, makes the
// call, and commits its raw answer with every attempt's settle. It returns
// the queue's next step (a Snooze when the provider is busy, over quota,
// or still working on the call), the targets to retry on jobs of their
// own, and the members the claim did not win.
func (e *Executor) call1(ctx context.Context, j Job, cp *cachedPlan, prov provider.Batcher, ms []member) (Result, []int, []member, error) {
	// Before the claim: everything that can wait.
	release, ok, err := acquire(ctx, prov, time.Now())
	if err != nil {
		return Result{}, nil, nil, err
	}
	if !ok {
		return Result{Action: Snooze, After: busySnooze, Outcome: "provider busy"}, nil, nil, nil
	}
	defer release()
	turned := time.Now()
	e.crash.at(pointBeforeClaim)

	crs := make([]ledger.ClaimRequest, len(ms))
	byKey := make(map[ledger.Key]*member, len(ms))
	for i := range ms {
		one := j
		one.Ordinal, one.Count = ms[i].ordinal, 1
		crs[i] = e.claimRequest(one, cp, prov, ms[i].key)
		byKey[ms[i].key] = &ms[i]
	}
	var sent []*member
	call, won, err := e.ledger.ClaimCall(ctx, prov.Name(), crs, gate, func(won []ledger.Effect) (string, []byte, error) {
		sent = sent[:0]
		reqs := make([]provider.Request, len(won))
		for i, eff := range won {
			m := byKey[eff.Key]
			m.eff = eff
			m.req.Epoch = eff.Epoch
			reqs[i] = m.req
			sent = append(sent, m)
		}
		return encodeCall(prov, reqs, won)
	})
	if err != nil {
		return Result{}, nil, nil, err
	}
	var left []member
	for _, m := range ms {
		if m.eff.ID == 0 {
			left = append(left, m)
		}
	}
	if len(won) == 0 {
		// A closed gate (a paused campaign or queue: after a 429) keeps
		// every target out: they wait for it to open and go together,
		// not one call each the moment it does. Targets left out while
		// it is open are held or suppressed, which the one-call path says.
		r, open, err := e.campaignGate(ctx, cp.plan, e.queueOf(prov.Name()))
		if err != nil || !open {
			return r, nil, nil, err
		}
		return Result{Action: Complete}, nil, left, nil
	}
	e.crash.at(pointAfterClaim)
	for _, m := range sent {
		one := j
		one.Ordinal = m.ordinal
		e.logClaimed(ctx, cp.plan, one, m.eff)
	}
	effs := make([]ledger.Effect, len(sent))
	for i, m := range sent {
		effs[i] = m.eff
	}
	if keepPace(ctx, prov, turned) {
		// The claim checked the gate; a wait came since. The gate again,
		// with nothing left to wait for before the call: a target
		// suppressed, or a campaign paused or cancelled, meanwhile is not
		// sent (docs/ARCHITECTURE.md, "The gate").
		if res, sentNone, err := e.gateAfterWait(ctx, prov, call, effs); sentNone || err != nil {
			return res, nil, left, err
		}
	}

	began := time.Now()
	raw, err := prov.SendBatch(ctx, provider.BatchRequest{Key: call.Key, Body: call.Request})
	metrics.CallSeconds.WithLabelValues(prov.Name(), string(ledger.ResponseSend)).Observe(time.Since(began).Seconds())
	var vs []provider.Verdict
	if err != nil {
		// Nothing left the process: every attempt is ours to settle.
		raw = []byte("onceplan: not sent: " + err.Error())
		vs = make([]provider.Verdict, len(sent))
		for i := range vs {
			vs[i] = provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true, Reason: "not sent: " + err.Error()}
		}
	} else {
		e.crash.at(pointAfterSend)
		vs = classifyBatch(prov, raw, len(sent))
	}
	ps, results := e.judgeAll(ctx, effs, vs, !j.LastTry)
	if _, err := e.ledger.AnswerCall(context.WithoutCancel(ctx), call.ID, ledger.ResponseSend, raw, call.Members, ps); err != nil {
		return Result{}, nil, nil, err
	}
	e.crash.at(pointAfterRaw)
	e.settledAll(context.WithoutCancel(ctx), prov, ps, vs)

	res := Result{Action: Complete, Outcome: "sent in a batch call"}
	var split []int
	for i, r := range results {
		switch r.Action {
		case Retry:
			split = append(split, sent[i].ordinal)
		case Snooze:
			// Over quota (nothing was created: the keys are free), or
			// still being worked on (the rows stay pending, the job's
			// own: its next run recovers them): the job starts again
			// from this call's first target.
			if res.Action != Snooze || r.After > res.After {
				res = r
			}
		}
	}
	return res, split, left, nil
}

// keepPace holds a call whose rate turn came at turned until one turn's
// interval (at most a second) after it. A call's claim commit writes its
// composition and may take a good part of an interval on a busy database,
// and unevenly: calls sent the moment their claims commit would reach the
// service closer together than their turns, and over its limit. Held
// behind their turns by the same interval, they keep the turns' spacing.
// It returns early when ctx ends (the send then finds ctx done), and says
// whether it waited.
func keepPace(ctx context.Context, prov provider.Provider, turned time.Time) bool {
	perSecond, _ := provider.RateOf(prov)
	if perSecond <= 0 {
		return false
	}
	lag := min(time.Duration(float64(time.Second)/perSecond), time.Second)
	wait := time.Until(turned.Add(lag))
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return true
}

// gateAfterWait checks the gate of a call's claimed attempts effs again
// after a wait between their claim and the call (gateOf, each against its
// own plan). When it closed meanwhile, the call is not made: every attempt
// is failed, not sent (a temporary failure, so the key is free), with the
// reason recorded as the call's answer, and the job snoozes — for the
// pause, or at once, when its next run's claims record a suppressed
// target as suppressed or find the campaign no longer running.
func (e *Executor) gateAfterWait(ctx context.Context, prov provider.Provider, call ledger.Call, effs []ledger.Effect) (Result, bool, error) {
	res, open, why, closed, err := e.gateOf(ctx, prov, effs)
	if err != nil || open {
		return Result{}, false, err
	}
	if why == "" {
		why = res.Outcome
	}
	reason := fmt.Sprintf("not sent: while batch call %d waited for its turn, for target %d (key %s) %s", call.ID, closed.Ordinal, closed.Key, why)
	ps := make([]ledger.SettleParams, len(effs))
	for i, eff := range effs {
		ps[i] = ledger.SettleParams{EffectID: eff.ID, State: ledger.StateFailed, Failure: ledger.FailureRetry, Reason: reason}
	}
	if _, err := e.ledger.AnswerCall(context.WithoutCancel(ctx), call.ID, ledger.ResponseSend, []byte("onceplan: "+reason), call.Members, ps); err != nil {
		return Result{}, true, err
	}
	for range ps {
		metrics.Settled.WithLabelValues(prov.Name(), string(ledger.StateFailed)).Inc()
	}
	e.cfg.Logger.InfoContext(ctx, "a batch call's gate closed while it waited for its turn; it is not sent", "call", call.ID, "reason", reason)
	after := time.Duration(0)
	if res.Action == Snooze {
		after = res.After
	}
	return Result{Action: Snooze, After: after, Outcome: "gate closed before the call"}, true, nil
}

// encodeCall is the call of the attempts won, whose requests are reqs (in
// the same order): the bytes b encodes of them and the call's key
// (callKey). performCall stores it with the claims; recovery derives it
// again before it sends a call again (deriveCall).
func encodeCall(b provider.Batcher, reqs []provider.Request, won []ledger.Effect) (key string, body []byte, err error) {
	enc, err := b.EncodeBatch(reqs)
	if err != nil {
		return "", nil, err
	}
	return callKey(enc.Key, won), enc.Body, nil
}

// callKey is the service's key for a call of the attempts won (the
// provider's, "" for a service that takes none). The provider's key is a
// function of the effect ids, which a target's next attempt shares; the
// attempts' own ids make it the call's: a call whose answer said nothing
// was created (over quota, refused) is followed by a new call of new
// attempts, which must not be taken for a repeat of the first.
func callKey(provided string, won []ledger.Effect) string {
	if provided == "" {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(provided))
	for _, e := range won {
		h.Write([]byte("\n" + strconv.FormatInt(e.ID, 10)))
	}
	return "onceplan-batch-" + hex.EncodeToString(h.Sum(nil))
}

// classifyBatch is prov.ClassifyBatch for a call of n attempts, made safe:
// an answer it cannot classify (it panics, or gives another number of
// verdicts) is unknown for each attempt and does not match the call
// (Unmatched: recovery never sends the call again), for a person to read
// in the recorded raw answer.
func classifyBatch(prov provider.Batcher, raw []byte, n int) (vs []provider.Verdict) {
	unknown := func(why string) []provider.Verdict {
		vs := make([]provider.Verdict, n)
		for i := range vs {
			vs[i] = provider.Verdict{Outcome: provider.OutcomeUnknown, Unmatched: true, Reason: why}
		}
		return vs
	}
	defer func() {
		if r := recover(); r != nil {
			vs = unknown(fmt.Sprintf("classifying %s's answer to a batch call failed (%v); the raw answer is recorded for a person to read", prov.Name(), r))
		}
	}()
	vs = prov.ClassifyBatch(raw, n)
	if len(vs) != n {
		return unknown(fmt.Sprintf("%s's answer to a batch call of %d gave %d verdicts; the raw answer is recorded for a person to read", prov.Name(), n, len(vs)))
	}
	return vs
}

// judgeAll is judge for each attempt of a call: the settles to commit
// (attempts left pending have none) and each attempt's next step.
func (e *Executor) judgeAll(ctx context.Context, effs []ledger.Effect, vs []provider.Verdict, retry bool) ([]ledger.SettleParams, []Result) {
	var ps []ledger.SettleParams
	results := make([]Result, len(effs))
	for i, eff := range effs {
		p, r := e.judge(ctx, eff, vs[i], retry)
		if p != nil {
			ps = append(ps, *p)
		}
		results[i] = r
	}
	return ps, results
}

// settledAll is settled for the settles of one call: the metric for each,
// and one pause of the provider's queue for an "over quota" answer.
func (e *Executor) settledAll(ctx context.Context, prov provider.Provider, ps []ledger.SettleParams, vs []provider.Verdict) {
	var quota provider.Verdict
	for _, v := range vs {
		if v.Outcome == provider.OutcomeQuota {
			quota = v
		}
	}
	paused := false
	for i := range ps {
		if ps[i].Failure == ledger.FailureQuota && !paused {
			paused = true
			e.settled(ctx, prov, &ps[i], quota)
			continue
		}
		metrics.Settled.WithLabelValues(prov.Name(), string(ps[i].State)).Inc()
	}
}

// recoverCall recovers attempt eff, which batch call c carried at position
// pos (docs/ARCHITECTURE.md, "Batch sending"): the call's attempts share
// one fate, so it settles every attempt of the call still open from the
// call's recorded answer; or, with none, sends the call again under its key
// while the provider's window is open — only the call its attempts' frozen
// plan derives, byte for byte, and only while every open attempt's gate,
// each judged against its own plan, still is, checked again after the wait
// for the provider's turn and right before the send. Else each open
// attempt is unknown, for a person, with the reason; a call whose stored
// request or key is not what its plan derives, or whose answer does not
// match it, is refused and a person is alerted. A provider that can be
// asked about each attempt by its effect id is asked about eff alone
// (handled false: recover goes on with its probe). mayWait says whether
// it may wait for the provider's turn (recoveryTurn).
func (e *Executor) recoverCall(ctx context.Context, prov provider.Provider, cp *cachedPlan, eff ledger.Effect, c ledger.Call, pos int, mayWait bool) (res Result, handled bool, err error) {
	members, err := e.ledger.Members(ctx, c)
	if err != nil {
		return Result{}, true, err
	}
	if pos >= len(members) || members[pos].ID != eff.ID {
		return Result{}, true, fmt.Errorf("batch call %d: effect %d is not at position %d", c.ID, eff.ID, pos)
	}
	if st := members[pos].State; st != ledger.StatePending && st != ledger.StateUnknown {
		return Result{Action: Complete, Outcome: "settled meanwhile (" + string(st) + ")"}, true, nil
	}
	b, isBatcher := prov.(provider.Batcher)
	log := e.cfg.Logger.With("call", c.ID, "effect", eff.ID, "key", string(eff.Key), "provider", prov.Name())
	wctx := context.WithoutCancel(ctx)

	// The answer is recorded: settle every pending attempt from it (the
	// call's attempts left pending by a "still working on it" wait for the
	// next answer). An unknown attempt the answer settles is resolved from
	// it: that is what the recovery that recorded it was doing, one attempt
	// after the other, when it stopped.
	answers, err := e.ledger.CallAnswers(ctx, c.ID)
	if err != nil {
		return Result{}, true, err
	}
	var recorded []provider.Verdict
	if n := len(answers); n > 0 && isBatcher {
		last := answers[n-1]
		recorded = classifyBatch(b, last.Body, len(members))
		if answered(recorded[pos], members[pos].State) {
			log.Info("recovering a batch call from its recorded answer", "outcome", string(recorded[pos].Outcome))
			for i, m := range members {
				if !answered(recorded[i], m.State) {
					continue
				}
				var r Result
				if m.State == ledger.StateUnknown {
					r, err = e.resolveUnknown(wctx, cp, m, recorded[i], "recovery:"+string(last.Kind))
				} else {
					r, err = e.settle(wctx, prov, cp, m, recorded[i])
				}
				if err != nil && !errors.Is(err, ledger.ErrIllegalTransition) {
					return Result{}, true, err
				}
				if m.ID == eff.ID {
					res = r
				}
			}
			return res, true, nil
		}
	}

	caps := prov.Capabilities()
	now := e.cfg.Now()
	var open []ledger.Effect
	for _, m := range members {
		if m.State == ledger.StatePending || m.State == ledger.StateUnknown {
			open = append(open, m)
		}
	}
	switch {
	case isBatcher && caps.CanResend(c.CreatedAt, now):
		// The same bytes, under the same key, or nothing. A target of the
		// call a person has resolved since has moved on (resolved as not
		// delivered, it is sent again on its own): if the call never
		// reached the service, sending it now would reach that target a
		// second time.
		for _, m := range members {
			if m.ResolvedBy != "" {
				reason := fmt.Sprintf("batch call %d was answered without a result for its targets, and target %d of that call (key %s) was resolved by %s since: the call cannot be sent again under its key without it, so a person decides whether each of its other messages was delivered",
					c.ID, m.Ordinal, m.Key, m.ResolvedBy)
				return e.unknownAll(wctx, open, reason, log)
			}
		}
		// The service answered the call, and its answer does not match
		// it: sending it again cannot tell more (a repeat under its key is
		// answered alike; without one it would be a second call).
		if len(recorded) > 0 && recorded[pos].Unmatched {
			reason := fmt.Sprintf("%s answered batch call %d of %d messages with an answer that does not match it (%s): which message was sent cannot be told, and sending the call again cannot tell, so it is not sent again; a person reads the recorded answer and decides whether each of its messages was delivered",
				prov.Name(), c.ID, len(members), recorded[pos].Reason)
			return e.refuseCall(wctx, c, members, open, reason, log)
		}
		if reason, ok := e.refusedBefore(c.ID); ok {
			return e.unknownAll(wctx, open, reason, log)
		}
		// A stored call is a record, not an authority: what is sent again
		// is what the attempts' frozen plan derives, or nothing.
		why, err := e.deriveCall(ctx, b, c, members)
		if err != nil {
			return Result{}, true, err
		}
		if why != "" {
			reason := fmt.Sprintf("batch call %d is not sent again: %s; a person decides whether each of its %d messages was delivered", c.ID, why, len(members))
			return e.refuseCall(wctx, c, members, open, reason, log)
		}
		// Every open attempt's gate, each against its own plan: before
		// the wait for a turn (no turn is spent on a closed gate) and
		// again after it, with nothing left between the check and the
		// send.
		if r, stop, err := e.callGate(ctx, prov, c, eff, members, open, log); stop || err != nil {
			return r, true, err
		}
		release, ok, err := e.recoveryTurn(ctx, prov, mayWait)
		if err != nil {
			return Result{}, true, err
		}
		if !ok {
			return Result{Action: Snooze, After: busySnooze, Outcome: "provider busy"}, true, nil
		}
		defer release()
		if r, stop, err := e.callGate(ctx, prov, c, eff, members, open, log); stop || err != nil {
			return r, true, err
		}
		log.Info("recovering a batch call by sending its request again under its key", "attempts", len(members))
		raw, err := b.SendBatch(ctx, provider.BatchRequest{Key: c.Key, Body: c.Request})
		if err != nil {
			return Result{Action: Retry, Err: err, Outcome: "recovery resend not sent"}, true, nil
		}
		vs := classifyBatch(b, raw, len(members))
		// Each pending attempt judged once: its settle, its next step and
		// the attempts it has left.
		type judged struct {
			eff  ledger.Effect
			res  Result
			left int
		}
		var ps []ledger.SettleParams
		var pvs []provider.Verdict
		var settled []judged
		for i, m := range members {
			if m.State != ledger.StatePending {
				continue
			}
			left, err := e.attemptsLeft(ctx, m)
			if err != nil {
				return Result{}, true, err
			}
			if p, r := e.judge(ctx, m, vs[i], left > 0); p != nil {
				ps, pvs = append(ps, *p), append(pvs, vs[i])
				settled = append(settled, judged{eff: m, res: r, left: left})
			}
		}
		ids := make([]int64, len(open))
		for i, m := range open {
			ids[i] = m.ID
		}
		if _, err := e.ledger.AnswerCall(wctx, c.ID, ledger.ResponseResend, raw, ids, ps); err != nil {
			return Result{}, true, err
		}
		e.settledAll(wctx, prov, ps, pvs)
		res = Result{Action: Complete, Outcome: "recovered by sending the batch call again"}
		for _, j := range settled {
			r, err := e.afterRecovery(wctx, cp, j.eff, j.res, j.left)
			if err != nil {
				return Result{}, true, err
			}
			if j.eff.ID == eff.ID {
				res = r
			}
		}
		for i, m := range members {
			if m.State != ledger.StateUnknown {
				continue
			}
			r, err := e.resolveUnknown(wctx, cp, m, vs[i], "recovery:resend")
			if err != nil {
				return Result{}, true, err
			}
			e.crash.at(pointAfterResolve)
			if m.ID == eff.ID {
				res = r
			}
		}
		if vs[pos].Outcome == provider.OutcomeRetryLater {
			res = Result{Action: Snooze, After: vs[pos].RetryAfter, Outcome: "retry later"}
		}
		return res, true, nil

	case caps.CanProbe(eff.CreatedAt, now):
		// Each attempt carries its own effect id: ask about this one.
		return Result{}, false, nil

	default:
		if eff.State == ledger.StateUnknown {
			return Result{Action: Complete, Outcome: "unknown: waits for a human"}, true, nil
		}
		reason := fmt.Sprintf("the worker %s stopped during batch call %d and %s (%s) can neither deduplicate it nor be asked about it", eff.Owner, c.ID, prov.Name(), prov.Kind())
		if caps.Dedupe {
			reason = fmt.Sprintf("the worker %s stopped during batch call %d, and %s's window to deduplicate it, from the call at %s, has closed: sending it again could be a second message to each of its %d targets",
				eff.Owner, c.ID, prov.Name(), c.CreatedAt.UTC().Format(time.RFC3339), len(members))
		}
		return e.unknownAll(wctx, open, reason, log)
	}
}

// callGate is the gate of a first claim for every open attempt of call c
// that recovery is about to send again, each judged against its own plan
// (recoveryGate): stop is true when the call is not to be sent now — a
// Snooze while a campaign is paused, or every open attempt unknown, for a
// person, when one's gate closed for good (the call cannot be sent again
// under its key without it).
func (e *Executor) callGate(ctx context.Context, prov provider.Provider, c ledger.Call, eff ledger.Effect, members, open []ledger.Effect, log *slog.Logger) (res Result, stop bool, err error) {
	r, ok, why, closed, err := e.gateOf(ctx, prov, open)
	if err != nil || ok {
		return Result{}, err != nil, err
	}
	if r.Action == Snooze {
		return r, true, nil
	}
	reason := fmt.Sprintf("the worker %s stopped during batch call %d, and for target %d of that call (key %s) %s since: the call cannot be sent again under its key without it, so a person decides whether each of its %d messages was delivered",
		eff.Owner, c.ID, closed.Ordinal, closed.Key, why, len(members))
	res, _, err = e.unknownAll(context.WithoutCancel(ctx), open, reason, log)
	return res, true, err
}

// deriveCall says how call c, as stored, differs from the call its
// attempts (members, by position) derive from their frozen plan — each
// rendered from its plan's payload and its target's row as performCall
// renders it, encoded by b (EncodeBatch), under the key callKey makes of
// them — or "" when it does not: the same provider, one plan, each
// attempt's key its target's, the same bytes and the same key. An
// attempt outside any plan, or of another plan than the call's, is a
// difference. An error is a failed read, to try again.
func (e *Executor) deriveCall(ctx context.Context, b provider.Batcher, c ledger.Call, members []ledger.Effect) (string, error) {
	if c.Provider != b.Name() {
		return fmt.Sprintf("it was stored for provider %s, not %s", c.Provider, b.Name()), nil
	}
	for i, m := range members {
		switch {
		case m.PlanID == 0:
			return fmt.Sprintf("its attempt at position %d (effect %d) was made outside any plan", i, m.ID), nil
		case c.PlanID != 0 && m.PlanID != c.PlanID:
			return fmt.Sprintf("it names plan %d, and its attempt at position %d (effect %d) is of plan %d", c.PlanID, i, m.ID, m.PlanID), nil
		case i > 0 && m.PlanID != members[0].PlanID:
			return fmt.Sprintf("it carries targets of two plans (%d and %d): a call carries one plan's", members[0].PlanID, m.PlanID), nil
		}
	}
	cp, err := e.planFor(ctx, members[0].PlanID)
	if err != nil {
		return "", err
	}
	if cp.plan.Provider != b.Name() {
		return fmt.Sprintf("its plan %d sends through provider %s, not %s", cp.plan.ID, cp.plan.Provider, b.Name()), nil
	}
	ordinals := make([]int32, len(members))
	for i, m := range members {
		ordinals[i] = int32(m.Ordinal)
	}
	read, err := plan.TargetsAt(ctx, e.cfg.Pool, cp.plan.ListID, ordinals)
	if err != nil {
		return "", err
	}
	byOrdinal := make(map[int]plan.Target, len(read))
	for _, t := range read {
		byOrdinal[t.Ordinal] = t
	}
	reqs := make([]provider.Request, len(members))
	for i, m := range members {
		t, ok := byOrdinal[m.Ordinal]
		if !ok {
			return fmt.Sprintf("its attempt at position %d names target %d, which plan %d does not have", i, m.Ordinal, cp.plan.ID), nil
		}
		if ledger.Key(t.Key) != m.Key {
			return fmt.Sprintf("its attempt at position %d has key %s, not its target's (%s)", i, m.Key, t.Key), nil
		}
		req, _, err := e.render(ctx, cp, m.Ordinal, targetRes{to: t.Address, key: t.Key, vars: t.Vars}, "", 0)
		if err != nil {
			return "", err
		}
		req.Epoch = m.Epoch
		reqs[i] = req
	}
	key, body, err := encodeCall(b, reqs, members)
	if err != nil {
		return "its attempts cannot be put into one call now: " + err.Error(), nil
	}
	if !bytes.Equal(body, c.Request) {
		return fmt.Sprintf("its stored request (%d bytes) is not the one its targets' frozen plan derives (%d bytes; they differ from byte %d)",
			len(c.Request), len(body), firstDifference(body, c.Request)), nil
	}
	switch {
	case key == c.Key:
	case c.Key == "":
		return fmt.Sprintf("it was stored without a key, and %s's calls take one (%s)", b.Name(), key), nil
	default:
		return fmt.Sprintf("its stored key %q is not the one its attempts derive (%q)", c.Key, key), nil
	}
	return "", nil
}

// firstDifference is the offset of the first byte where a and b differ
// (the shorter's length when one is the other's start).
func firstDifference(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// refuseCall leaves call c's open attempts to a person, unknown with
// reason, and alerts the campaigns its attempts belong to (Config.Alerter):
// recovery found a call it will not send again, a record that does not
// derive from the plan or an answer that does not match the call.
func (e *Executor) refuseCall(ctx context.Context, c ledger.Call, members, open []ledger.Effect, reason string, log *slog.Logger) (Result, bool, error) {
	res, handled, err := e.unknownAll(ctx, open, reason, log)
	if err != nil {
		return res, handled, err
	}
	ids := make([]int64, len(members))
	campaigns := map[string]bool{}
	for i, m := range members {
		ids[i] = m.ID
		if m.PlanID == 0 {
			continue
		}
		mcp, err := e.planFor(ctx, m.PlanID)
		if err != nil {
			return Result{}, true, err
		}
		campaigns[mcp.plan.CampaignID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(campaigns)) {
		if err := e.alert(ctx, Alert{CampaignID: id, Subject: fmt.Sprintf("batch call %d", c.ID), Reason: reason, Effects: ids}); err != nil {
			return Result{}, true, err
		}
	}
	e.mu.Lock()
	if len(e.refused) > 4096 { // the map only saves work; it bounds memory
		clear(e.refused)
	}
	e.refused[c.ID] = reason
	e.mu.Unlock()
	return res, handled, nil
}

// refusedBefore is why this process's recovery refused call id before,
// once its campaigns were alerted (refuseCall); ok false when it did not.
func (e *Executor) refusedBefore(id int64) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	reason, ok := e.refused[id]
	return reason, ok
}

// answered reports whether recovery settles an attempt in state from v, its
// part of the call's recorded answer: a pending attempt by anything but a
// "retry later"; an unknown one only by a verdict, done or failed.
func answered(v provider.Verdict, state ledger.State) bool {
	switch state {
	case ledger.StatePending:
		return v.Outcome != provider.OutcomeRetryLater
	case ledger.StateUnknown:
		return v.Outcome == provider.OutcomeDone || v.Outcome == provider.OutcomeFailed
	}
	return false
}

// unknownAll settles the pending attempts of open as unknown, for a person,
// with reason.
func (e *Executor) unknownAll(ctx context.Context, open []ledger.Effect, reason string, log *slog.Logger) (Result, bool, error) {
	if !slices.ContainsFunc(open, func(m ledger.Effect) bool { return m.State == ledger.StatePending }) {
		return Result{Action: Complete, Outcome: "unknown: waits for a human"}, true, nil
	}
	log.Warn("in doubt: a batch call cannot be confirmed or sent again; a human must resolve its attempts", "reason", reason)
	for _, m := range open {
		if m.State != ledger.StatePending {
			continue
		}
		_, err := e.ledger.Settle(ctx, ledger.SettleParams{EffectID: m.ID, State: ledger.StateUnknown, Reason: reason})
		if err != nil && !errors.Is(err, ledger.ErrIllegalTransition) {
			return Result{}, true, err
		}
	}
	return Result{Action: Complete, Outcome: "unknown"}, true, nil
}

// callOf is the batch call that carried eff (ok false: none).
func (e *Executor) callOf(ctx context.Context, eff ledger.Effect) (ledger.Call, int, bool, error) {
	c, pos, err := e.ledger.CallOf(ctx, eff.ID)
	if errors.Is(err, onceplan.ErrNotFound) {
		return ledger.Call{}, 0, false, nil
	}
	return c, pos, err == nil, err
}
