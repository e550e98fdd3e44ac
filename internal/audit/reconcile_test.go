package audit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// outbox is a real maildir provider in a fresh directory.
func outbox(t *testing.T) (provider.Provider, string) {
	t.Helper()
	dir := t.TempDir()
	p, err := provider.Parse("outbox", "maildir://"+dir+"?rate=1000/s")
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p, dir
}

// deliver sends the target's message through p, as the executor would.
func deliver(t *testing.T, p provider.Provider, key ledger.Key, epoch int, to string) string {
	t.Helper()
	raw, err := p.Send(context.Background(), provider.Request{Key: string(key), Epoch: epoch, Target: to,
		Message: plan.Message{From: "billing@example.com", To: to, Subject: "Invoice", Text: "Your invoice is due."}})
	require.NoError(t, err)
	v := p.Classify(raw)
	require.Equal(t, provider.OutcomeDone, v.Outcome, string(raw))
	return v.Receipt
}

func randomKey(t *testing.T) ledger.Key {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	target, err := ledger.NewEmailTarget("zed@example.com")
	require.NoError(t, err)
	k, err := ledger.NewKey(ledger.KeyInput{Event: "elsewhere-" + hex.EncodeToString(b[:]), Tool: "email.send", Target: target})
	require.NoError(t, err)
	return k
}

func TestReconcileMaildir(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.f
	p, dir := outbox(t)
	send := func(tg audittest.Target, epoch int) string { return deliver(t, p, tg.Key, epoch, tg.Address) }

	// person9 was a target of version 1 and got its message; version 2
	// drops it.
	c := f.Campaign("maildir", audittest.Addresses(9))
	f.Attempt(c.Targets[8], ledger.StateDone)
	send(c.Targets[8], 0)
	dropped := c.Targets[8].Key
	f.Reimport(&c, audittest.Addresses(8))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }

	// 1: done, read in a mail client (moved to cur/ with flags).
	f.Attempt(tg(1), ledger.StateDone)
	name := send(tg(1), 0)
	require.NoError(t, os.Rename(filepath.Join(dir, "new", name), filepath.Join(dir, "cur", name+":2,S")))
	// 2: done, and a second copy under another name (what a second
	// delivery by another path looks like): a duplicate.
	f.Attempt(tg(2), ledger.StateDone)
	name = send(tg(2), 0)
	body, err := os.ReadFile(filepath.Join(dir, "new", name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "new", "1767225600.M1P2.relay"), body, 0o644))
	// 3: done in the ledger, but the file is gone: a missing effect.
	f.Attempt(tg(3), ledger.StateDone)
	name = send(tg(3), 0)
	require.NoError(t, os.Remove(filepath.Join(dir, "new", name)))
	// 4: unknown in the ledger, delivered in fact.
	f.Attempt(tg(4), ledger.StateUnknown)
	send(tg(4), 0)
	// 5: failed, nothing delivered. 6: failed in the ledger, delivered.
	f.Attempt(tg(5), ledger.StateFailed)
	f.Attempt(tg(6), ledger.StateFailed)
	send(tg(6), 0)
	// 7: never started. 8: sent, bumped, sent again: two files, one per epoch.
	f.Attempt(tg(8), ledger.StateDone)
	send(tg(8), 0)
	require.Equal(t, 1, f.Bump(tg(8)))
	f.Attempt(tg(8), ledger.StateDone)
	send(tg(8), 1)

	// A message for an effect the ledger never claimed: a stray.
	stray := randomKey(t)
	deliver(t, p, stray, 0, "zed@example.com")
	// Another campaign shares the outbox.
	other := f.Campaign("other", []string{"olga@example.com"})
	f.Attempt(other.Targets[0], ledger.StateDone)
	deliver(t, p, other.Targets[0].Key, 0, "olga@example.com")
	// And something that is not Onceplan's at all.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "new", "notes.txt"), []byte("not a message"), 0o644))

	ev := audit.NewEvidence()
	require.NoError(t, ev.ScanMaildir(b.ctx, dir))
	rep, err := audit.Reconcile(b.ctx, f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Evidence: ev})
	require.NoError(t, err)

	m := rep.Metric
	require.Equal(t, []string{audit.SourceMaildir}, m.Evidence)
	require.Equal(t, []int{8, 4, 1, 1, 2, 1, 1, 1, 2}, []int{m.Approved, m.ExactlyOnce, m.Missing, m.Unknown, m.Failed, m.Duplicates, m.Unconfirmed, m.InDoubt, m.Unrecorded})
	require.False(t, m.Holds)
	require.Equal(t, []audit.MaildirSummary{{Dir: dir, Files: 11, Unrecognised: 1}}, rep.Maildirs)

	require.Equal(t, 1, rep.Duplicates.Count)
	dup := rep.Duplicates.Items[0]
	require.Equal(t, []any{2, string(tg(2).Key), 0, "done", 2}, []any{dup.Ordinal, dup.Key, dup.Epoch, dup.State, dup.Files})
	require.Len(t, dup.Sources, 2)
	require.Contains(t, strings.Join(dup.Sources, " "), "1767225600.M1P2.relay")

	require.Equal(t, 1, rep.DoneWithoutEvidence.Count)
	require.Equal(t, 3, rep.DoneWithoutEvidence.Items[0].Ordinal)

	require.Equal(t, 2, rep.EvidenceNotDone.Count)
	unknown, failed := rep.EvidenceNotDone.Items[0], rep.EvidenceNotDone.Items[1]
	require.Equal(t, []any{4, "unknown", true}, []any{unknown.Ordinal, unknown.State, unknown.ResolvableAsDelivered})
	require.Equal(t, []any{6, "failed", false}, []any{failed.Ordinal, failed.State, failed.ResolvableAsDelivered})
	require.Contains(t, failed.Note, "a second effect")
	require.Len(t, unknown.Sources, 1)

	require.Equal(t, 2, rep.Strays.Count)
	byNote := map[string]audit.Finding{}
	for _, s := range rep.Strays.Items {
		byNote[s.Note] = s
	}
	s := byNote["no attempt in the ledger has this effect"]
	require.Equal(t, provider.MessageID(string(stray), 0), s.ID)
	require.Equal(t, 1, s.Files)
	require.Len(t, s.Sources, 1)
	s = byNote["an effect of this campaign that is not a target of this plan at this epoch (an earlier version's, or a stale epoch)"]
	require.Equal(t, []any{string(dropped), 0, "", 1}, []any{s.Key, s.Epoch, s.ID, s.Files})
	require.Equal(t, 1, rep.OtherCampaigns)
}

func TestReconcileProviderLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.f
	c := f.Campaign("log", audittest.Addresses(5))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }
	for _, o := range []int{1, 2, 3} {
		f.Attempt(tg(o), ledger.StateDone)
	}
	f.Attempt(tg(4), ledger.StateUnknown)
	e5 := f.Attempt(tg(5), ledger.StateDone)
	other := f.Campaign("other", []string{"olga@example.com"})
	f.Attempt(other.Targets[0], ledger.StateDone)

	log := strings.Join([]string{
		"message_id,recipient,timestamp",
		provider.MessageID(string(tg(1).Key), 0) + ",person1@example.com,2026-03-01T10:00:00Z",
		string(tg(2).Key) + ":0,person2@example.com,2026-03-01T10:00:01Z",
		string(tg(2).Key) + ":0,person2@example.com,2026-03-01T10:05:00Z",
		string(tg(4).Key) + ",person4@example.com,2026-03-01T10:00:02Z",
		e5.Receipt + ",person5@example.com,2026-03-01T10:00:03Z",
		"queue-999,stranger@example.com,2026-03-01T10:00:04Z",
		string(other.Targets[0].Key) + ":0,olga@example.com,2026-03-01T10:00:05Z",
	}, "\n") + "\n"
	ev := audit.NewEvidence()
	require.NoError(t, ev.ImportLog(strings.NewReader(log), "deliveries.csv"))
	rep, err := audit.Reconcile(b.ctx, f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Evidence: ev})
	require.NoError(t, err)

	m := rep.Metric
	require.Equal(t, []string{audit.SourceProviderLog}, m.Evidence)
	require.Equal(t, []int{1, 1, 1}, []int{m.Duplicates, m.Unconfirmed, m.Unrecorded})
	require.Equal(t, []audit.LogSummary{{Name: "deliveries.csv", Lines: 7, ProviderIDs: 2}}, rep.Logs)

	dup := rep.Duplicates.Items[0]
	require.Equal(t, []any{2, 2}, []any{dup.Ordinal, dup.Lines})
	require.Equal(t, []string{"provider log deliveries.csv line 3", "provider log deliveries.csv line 4"}, dup.Sources)
	require.Equal(t, 3, rep.DoneWithoutEvidence.Items[0].Ordinal)
	nd := rep.EvidenceNotDone.Items[0]
	require.Equal(t, []any{4, true, []string{"provider log deliveries.csv line 5"}}, []any{nd.Ordinal, nd.ResolvableAsDelivered, nd.Sources})
	require.Equal(t, 1, rep.Strays.Count)
	require.Equal(t, []any{"queue-999", "no receipt in the ledger matches this provider id", []string{"provider log deliveries.csv line 7"}},
		[]any{rep.Strays.Items[0].ID, rep.Strays.Items[0].Note, rep.Strays.Items[0].Sources})
	require.Equal(t, 1, rep.OtherCampaigns)
}

// Evidence that agrees with the ledger: the metric holds.
func TestReconcileHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, dir := outbox(t)
	c := b.f.Campaign("clean", audittest.Addresses(3))
	for _, tg := range c.Targets {
		b.f.Attempt(tg, ledger.StateDone)
		deliver(t, p, tg.Key, 0, tg.Address)
	}
	ev := audit.NewEvidence()
	require.NoError(t, ev.ScanMaildir(b.ctx, dir))
	rep, err := audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Evidence: ev, Probe: &audit.ProbeOpts{Provider: p, Rate: 1000}})
	require.NoError(t, err)
	require.True(t, rep.Metric.Holds, "%+v", rep)
	require.Equal(t, []string{audit.SourceMaildir, audit.SourceProbe}, rep.Metric.Evidence)
	require.Equal(t, &audit.ProbeSummary{Provider: "outbox", Probed: 3, Found: 3}, rep.Probe)
	require.Zero(t, rep.Strays.Count+rep.Duplicates.Count+rep.DoneWithoutEvidence.Count+rep.EvidenceNotDone.Count)
}

func TestReconcileProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, _ := outbox(t)
	c := b.f.Campaign("probe", audittest.Addresses(5))
	tg := func(ordinal int) audittest.Target { return c.Targets[ordinal-1] }
	b.f.Attempt(tg(1), ledger.StateDone)
	deliver(t, p, tg(1).Key, 0, tg(1).Address)
	b.f.Attempt(tg(2), ledger.StateDone) // nothing at the provider
	b.f.Attempt(tg(3), ledger.StateUnknown)
	deliver(t, p, tg(3).Key, 0, tg(3).Address)
	b.f.Attempt(tg(4), ledger.StatePending)
	b.f.Attempt(tg(5), ledger.StateFailed) // not probed

	rep, err := audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Probe: &audit.ProbeOpts{Provider: p, Rate: 1000, Concurrency: 2}})
	require.NoError(t, err)
	require.Equal(t, &audit.ProbeSummary{Provider: "outbox", Probed: 4, Found: 2, NotFound: 2}, rep.Probe)
	m := rep.Metric
	require.Equal(t, []string{audit.SourceProbe}, m.Evidence)
	require.Equal(t, []int{0, 1, 1}, []int{m.Duplicates, m.Unconfirmed, m.Unrecorded})
	require.Equal(t, []any{2, "not found"}, []any{rep.DoneWithoutEvidence.Items[0].Ordinal, rep.DoneWithoutEvidence.Items[0].Probe})
	require.Equal(t, []any{3, "found", true}, []any{rep.EvidenceNotDone.Items[0].Ordinal, rep.EvidenceNotDone.Items[0].Probe, rep.EvidenceNotDone.Items[0].ResolvableAsDelivered})

	// A provider that cannot be probed is refused up front.
	smtp, err := provider.Parse("relay", "smtp://127.0.0.1:2525")
	require.NoError(t, err)
	defer smtp.Close()
	_, err = audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Probe: &audit.ProbeOpts{Provider: smtp}})
	require.ErrorIs(t, err, provider.ErrNoProbe)
	require.EqualError(t, err, "provider relay (smtp) cannot be probed")
}

// TestReconcileProbeCountsProviderDuplicates: the provider holds two
// messages with one target's effect id — Postmark's search answers
// TotalCount 2 (through its API and its SMTP relay), Mailjet's message
// list Count and Total 2: the probe is evidence of a duplicate, and
// exactly-once does not hold.
func TestReconcileProbeCountsProviderDuplicates(t *testing.T) {
	t.Parallel()
	for _, service := range []string{"postmark", "postmark-smtp", "mailjet"} {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var (
				u       string
				effects func() map[string]int
				twice   func(send func())
			)
			switch service {
			case "postmark":
				pm := sink.NewPostmark(sink.PostmarkOpts{})
				t.Cleanup(pm.Close)
				u, effects = pm.URL(), pm.Effects
				// The stand-in accepts the one request twice.
				twice = func(send func()) { pm.AcceptTwice(1); send() }
			default:
				relay, err := sink.NewSMTP()
				require.NoError(t, err)
				t.Cleanup(relay.Close)
				if service == "mailjet" {
					mj := sink.NewMailjet(sink.MailjetOpts{SMTP: relay})
					t.Cleanup(mj.Close)
					u, effects = mj.SMTPURL(), mj.Effects
				} else {
					pm := sink.NewPostmark(sink.PostmarkOpts{SMTP: relay})
					t.Cleanup(pm.Close)
					u, effects = pm.SMTPURL(), pm.Effects
				}
				// A relay that cannot deduplicate takes a repeat.
				twice = func(send func()) { send(); send() }
			}
			p, err := provider.Parse("outbox", u)
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			c := b.f.Campaign(service, audittest.Addresses(3))
			for i, tg := range c.Targets {
				b.f.Attempt(tg, ledger.StateDone)
				send := func() { deliver(t, p, tg.Key, 0, tg.Address) }
				if i == 1 {
					twice(send)
				} else {
					send()
				}
			}
			require.Equal(t, 2, effects()[provider.EffectID(string(c.Targets[1].Key), 0)], "the service holds the duplicate")

			rep, err := audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Probe: &audit.ProbeOpts{Provider: p, Rate: 1000}})
			require.NoError(t, err)
			m := rep.Metric
			require.Equal(t, 1, m.Duplicates, "%+v", rep)
			require.False(t, m.Holds)
			require.Equal(t, []string{"1 target has more than one effect in the provider's evidence: see the reconciliation's duplicates."}, m.Reasons)
			require.Equal(t, &audit.ProbeSummary{Provider: "outbox", Probed: 3, Found: 3, Duplicated: 1}, rep.Probe)
			require.Equal(t, 1, rep.Duplicates.Count)
			dup := rep.Duplicates.Items[0]
			require.Equal(t, []any{2, "found", 2}, []any{dup.Ordinal, dup.Probe, dup.ProbeMatches})
			require.Equal(t, []string{"probe outbox: 2 messages with this effect id"}, dup.Sources)
			require.Zero(t, rep.DoneWithoutEvidence.Count+rep.EvidenceNotDone.Count+rep.Strays.Count)
		})
	}
}

func TestReconcileNeedsEvidence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.f.Campaign("none", audittest.Addresses(1))
	_, err := audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: c.PlanID, Evidence: audit.NewEvidence()})
	require.EqualError(t, err, "a reconciliation needs evidence: a maildir, a provider log or a provider to probe")
	_, err = audit.Reconcile(b.ctx, b.f.Pool, audit.ReconcileParams{PlanID: 4242, Probe: &audit.ProbeOpts{Provider: must(outbox(t))}})
	require.ErrorIs(t, err, onceplan.ErrNotFound)
}

func must(p provider.Provider, _ string) provider.Provider { return p }

func TestScanMaildirErrors(t *testing.T) {
	t.Parallel()
	ev := audit.NewEvidence()
	dir := t.TempDir()
	err := ev.ScanMaildir(context.Background(), dir)
	require.EqualError(t, err, dir+" is not a maildir: it has neither a new/ nor a cur/ directory")
	err = ev.ScanMaildir(context.Background(), filepath.Join(dir, "nope"))
	require.EqualError(t, err, fmt.Sprintf("maildir %s: no such file or directory", filepath.Join(dir, "nope")))
	require.Empty(t, ev.Sources())
}
