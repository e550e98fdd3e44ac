package executor

import (
	"context"
	"fmt"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// For the external tests: the claims' gate and the write sessions.
var (
	ClaimGate    = gate
	NewWritePool = newWritePool
)

// StoreCall claims the targets at ordinals of plan planID as one batch
// call of the plan's provider, for owner, composed as performCall composes
// a call (each target rendered from the frozen plan, encodeCall), and
// sends nothing: the call a worker left when it died right after its
// claim.
func (e *Executor) StoreCall(ctx context.Context, planID int64, ordinals []int, owner string) (ledger.Call, []ledger.Effect, error) {
	cp, prov, _, err := e.prepare(ctx, Job{PlanID: planID})
	if err != nil {
		return ledger.Call{}, nil, err
	}
	if prov == nil {
		return ledger.Call{}, nil, fmt.Errorf("plan %d: provider %s not served", planID, cp.plan.Provider)
	}
	b, ok := prov.(provider.Batcher)
	if !ok {
		return ledger.Call{}, nil, fmt.Errorf("provider %s does not send batch calls", prov.Name())
	}
	reqs := map[ledger.Key]provider.Request{}
	crs := make([]ledger.ClaimRequest, len(ordinals))
	for i, o := range ordinals {
		req, key, err := e.request(ctx, cp, o, "", 0)
		if err != nil {
			return ledger.Call{}, nil, err
		}
		reqs[key] = req
		crs[i] = ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: key, Owner: owner, PlanID: planID, Ordinal: o},
			Campaign: cp.plan.CampaignID, Queue: e.queueOf(prov.Name())}
	}
	return e.ledger.ClaimCall(ctx, prov.Name(), crs, gate, func(won []ledger.Effect) (string, []byte, error) {
		rs := make([]provider.Request, len(won))
		for i, eff := range won {
			rs[i] = reqs[eff.Key]
			rs[i].Epoch = eff.Epoch
		}
		return encodeCall(b, rs, won)
	})
}

// RecoverWaiting is recovery as a job that found eff in doubt runs it:
// it may wait for the provider's turn (Recover, maintenance's, never
// does).
func (e *Executor) RecoverWaiting(ctx context.Context, eff ledger.Effect) (Result, error) {
	cp, prov, res, err := e.prepare(ctx, Job{PlanID: eff.PlanID})
	if err != nil || prov == nil {
		return res, err
	}
	return e.recover(ctx, prov, cp, eff, true)
}

// GateOf is the gate recovery checks for effs, each against its own plan:
// open, or why not and the attempt it closed for.
func (e *Executor) GateOf(ctx context.Context, provider string, effs []ledger.Effect) (bool, string, ledger.Effect, error) {
	prov, ok := e.cfg.Providers.Get(provider)
	if !ok {
		return false, "", ledger.Effect{}, fmt.Errorf("provider %s not served", provider)
	}
	_, open, why, closed, err := e.gateOf(ctx, prov, effs)
	return open, why, closed, err
}

// GateAfterWait is what a batch call held by keepPace after its claim does
// before the call: its attempts' gates again, and, if one closed, no call.
func (e *Executor) GateAfterWait(ctx context.Context, provider string, call ledger.Call, effs []ledger.Effect) (Result, bool, error) {
	prov, ok := e.cfg.Providers.Get(provider)
	if !ok {
		return Result{}, false, fmt.Errorf("provider %s not served", provider)
	}
	return e.gateAfterWait(ctx, prov, call, effs)
}
