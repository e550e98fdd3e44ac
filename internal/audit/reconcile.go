package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// DefaultListMax is how many findings each list of a [Report] names one by
// one; the counts always cover every finding.
const DefaultListMax = 1000

// ReconcileParams name the plan and the evidence to hold it against.
type ReconcileParams struct {
	PlanID   int64
	Evidence *Evidence // nil: none gathered (probe only)
	Probe    *ProbeOpts
	// OwnMessages are the test sends and notifications Onceplan recorded
	// (approval.TestMessages, notify.Emails): evidence of one of them is
	// listed in Report.Recognised instead of Report.Strays.
	OwnMessages []OwnMessage
	// ListMax caps each list of findings (default DefaultListMax).
	ListMax int
}

// Reconcile holds a plan's ledger against outside evidence: the metric,
// then every target at its current epoch (and the earlier epochs of bumped
// keys) against the maildir files, log lines and probe answers that name
// it. Evidence no target accounts for is looked up in the whole ledger to
// tell another campaign's effects from strays. The ledger is only read.
func Reconcile(ctx context.Context, db onceplan.DB, p ReconcileParams) (Report, error) {
	ev := p.Evidence
	if ev == nil {
		ev = NewEvidence()
	}
	listMax := p.ListMax
	if listMax <= 0 {
		listMax = DefaultListMax
	}
	if len(ev.Sources()) == 0 && p.Probe == nil {
		return Report{}, errors.New("a reconciliation needs evidence: a maildir, a provider log or a provider to probe")
	}
	m, err := ForPlan(ctx, db, p.PlanID)
	if err != nil {
		return Report{}, err
	}
	rep := Report{
		Maildirs:            ev.maildirs,
		Logs:                ev.logs,
		DoneWithoutEvidence: FindingList{Items: []Finding{}, max: listMax},
		EvidenceNotDone:     FindingList{Items: []Finding{}, max: listMax},
		Duplicates:          FindingList{Items: []Finding{}, max: listMax},
		Strays:              FindingList{Items: []Finding{}, max: listMax},
		Recognised:          FindingList{Items: []Finding{}, max: listMax},
	}
	sources := ev.Sources()
	r := &reconciler{ev: ev, rep: &rep}
	if p.Probe != nil {
		if err := r.startProbes(ctx, *p.Probe); err != nil {
			return rep, err
		}
		sources = append(sources, SourceProbe)
	}
	err = eachTarget(ctx, db, p.PlanID, func(t TargetRow) error { return r.target(ctx, t) })
	if perr := r.stopProbes(); err == nil {
		err = perr
	}
	if err != nil {
		return rep, err
	}
	// Probes finish in any order; the lists read in plan order.
	for _, l := range []*FindingList{&rep.DoneWithoutEvidence, &rep.EvidenceNotDone, &rep.Duplicates} {
		slices.SortStableFunc(l.Items, func(a, b Finding) int {
			return cmp.Or(cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.Epoch, b.Epoch))
		})
	}
	r.recognise(p.OwnMessages)
	if err := r.strays(ctx, db, m.CampaignID); err != nil {
		return rep, err
	}
	if err := r.nameFiles(ctx); err != nil {
		return rep, err
	}
	m.Evidence = sources
	m.Duplicates = r.duplicates
	m.Unconfirmed = rep.DoneWithoutEvidence.Count
	m.Unrecorded = rep.EvidenceNotDone.Count
	m.finish()
	rep.Metric = m
	return rep, nil
}

// reconciler carries one reconciliation. The evidence maps are touched by
// the target loop only; findings are added under mu (probes finish on
// their own goroutines).
type reconciler struct {
	ev  *Evidence
	rep *Report

	mu         sync.Mutex
	duplicates int

	probe    *ProbeOpts
	limit    *rate.Limiter
	jobs     chan probeJob
	wg       sync.WaitGroup
	probeErr error
}

// seen is the evidence a target's current epoch has, before probing.
// A probe adds its verdict and how many messages it found (probed).
type seen struct {
	t            TargetRow
	files, lines int
	sources      []string
	hash         effectHash
}

type probeJob struct{ s seen }

func (r *reconciler) target(ctx context.Context, t TargetRow) error {
	s := seen{t: t, hash: hashOf(t.Key, t.Epoch)}
	for _, x := range []*tally{r.ev.byEffect[s.hash], r.ev.byKey[t.Key], r.receiptTally(t.Receipt)} {
		if x == nil {
			continue
		}
		x.used = true
		s.files += int(x.files)
		s.lines += int(x.lines)
		s.sources = append(s.sources, r.lineSources(x)...)
	}
	// Earlier epochs of a bumped key: their evidence is expected (that is
	// what the bump was for) unless one of them shows two effects.
	for epoch := 0; epoch < t.Epoch; epoch++ {
		h := hashOf(t.Key, epoch)
		x := r.ev.byEffect[h]
		if x == nil {
			continue
		}
		x.used = true
		if x.duplicated() {
			r.mu.Lock()
			r.duplicates++
			r.rep.Duplicates.add(Finding{
				Ordinal: t.Ordinal, Target: t.Target, Key: t.Key, Epoch: epoch, State: "earlier epoch",
				Files: int(x.files), Lines: int(x.lines), Sources: r.lineSources(x), hash: h,
			})
			r.mu.Unlock()
		}
	}
	if r.jobs != nil && (t.State == string(ledger.StateDone) || t.State == string(ledger.StatePending) || t.State == string(ledger.StateUnknown)) {
		select {
		case r.jobs <- probeJob{s: s}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.judge(s, probed{})
	return nil
}

func (r *reconciler) receiptTally(receipt string) *tally {
	if receipt == "" {
		return nil
	}
	return r.ev.byReceipt[receipt]
}

// lineSources names the log lines of x.
func (r *reconciler) lineSources(x *tally) []string {
	var out []string
	for i, ln := range []int32{x.line, x.line2} {
		if int32(i) >= x.lines {
			break
		}
		log := []uint16{x.log, x.log2}[i]
		name := "?"
		if int(log) < len(r.ev.logs) {
			name = r.ev.logs[log].Name
		}
		out = append(out, fmt.Sprintf("provider log %s line %d", name, ln))
	}
	if x.lines > 2 {
		out = append(out, fmt.Sprintf("and %d more log lines", x.lines-2))
	}
	return out
}

// probed is what a probe said of a target: its verdict, "" (not probed),
// "found", "not found" or "error: …", and, when found, how many messages
// with the effect id the provider holds.
type probed struct {
	verdict  string
	provider string
	matches  int
}

// judge files a target's findings.
func (r *reconciler) judge(s seen, p probed) {
	t := s.t
	probe := p.verdict
	evidence := s.files+s.lines > 0 || probe == "found"
	f := Finding{
		Ordinal: t.Ordinal, Target: t.Target, Key: t.Key, Epoch: t.Epoch, State: t.State,
		Files: s.files, Lines: s.lines, Probe: probe, ProbeMatches: p.matches, Sources: s.sources, hash: s.hash,
	}
	if p.matches > 1 {
		// The provider's own count is one source, like a maildir or a
		// log: two messages in it are two effects, whatever the others
		// say.
		f.Sources = append(slices.Clip(f.Sources), fmt.Sprintf("probe %s: %d messages with this effect id", p.provider, p.matches))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.files > 1 || s.lines > 1 || p.matches > 1 {
		r.duplicates++
		r.rep.Duplicates.add(f)
	}
	switch ledger.State(t.State) {
	case ledger.StateDone:
		if !evidence {
			if strings.HasPrefix(probe, "error") {
				f.Note = "the probe failed, and no other evidence shows the effect"
			}
			r.rep.DoneWithoutEvidence.add(f)
		}
	case ledger.StatePending, ledger.StateUnknown, ledger.StateFailed, StateNotStarted:
		if evidence {
			switch ledger.State(t.State) {
			case ledger.StateUnknown:
				f.ResolvableAsDelivered = true
				f.Note = "the evidence shows it delivered: resolve it as delivered"
			case ledger.StatePending:
				f.Note = "an attempt is in flight or its worker died; recovery settles it"
			case ledger.StateFailed:
				f.Note = "the ledger says failed, so the target may be sent again: a second effect"
			default:
				f.Note = "delivered, but the ledger has no attempt at this epoch"
			}
			r.rep.EvidenceNotDone.add(f)
		}
	}
}
