package toolcall_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// TestKeyFreeIsTheLedgersRule: a call's key is free (key_free in the API)
// exactly when its latest attempt does not hold the key by the ledger's
// own rule (effect_blocks), whichever way the attempt got to its state.
func TestKeyFreeIsTheLedgersRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	check := func(st toolcall.Status, want bool) {
		t.Helper()
		var blocks bool
		require.NoError(t, b.owner.QueryRow(b.ctx, `SELECT effect_blocks(state) FROM effect WHERE id = $1`, st.EffectID).Scan(&blocks))
		require.Equal(t, want, st.KeyFree(), "a call %s", st.State)
		require.Equal(t, !blocks, st.KeyFree(), "a call %s", st.State)
	}
	read := func(key ledger.Key) toolcall.Status {
		t.Helper()
		st, err := b.svc.GetFor(b.ctx, b.oper, key)
		require.NoError(t, err)
		return st
	}
	settle := func(event string, outcome toolcall.SettleOutcome) toolcall.Status {
		t.Helper()
		res := b.begin(t, "crm.none", event, `{}`, time.Minute)
		p := toolcall.SettleParams{Key: res.Status.Key, Lease: res.Status.LeaseID, Outcome: outcome, Reason: "as " + event, Raw: []byte(event)}
		if outcome == toolcall.Done {
			p.Receipt, p.Reason = "r-"+event, ""
		}
		st, err := b.svc.Settle(b.ctx, b.agent, p)
		require.NoError(t, err)
		return st
	}

	pending := b.begin(t, "crm.none", "pending", `{}`, time.Minute)
	check(pending.Status, false)
	done := settle("done", toolcall.Done)
	check(done, false)
	check(settle("failed", toolcall.Failed), true)
	unknown := settle("unknown", toolcall.Unknown)
	check(unknown, false)

	_, err := b.svc.Resolve(b.ctx, b.oper, toolcall.ResolveParams{Key: unknown.Key, Outcome: ledger.NotDelivered, Reason: "the CRM has no such change"})
	require.NoError(t, err)
	check(read(unknown.Key), true)
	_, err = b.svc.Revoke(b.ctx, b.oper, done.Key, "withdrawn by hand")
	require.NoError(t, err)
	check(read(done.Key), true)
}
