package audit

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// DefaultListMax is how many findings each list of a [Report] names one by
// one; the counts always cover every finding.
const DefaultListMax = 1000

// ProbeOpts asks [Reconcile] to probe the provider for every target whose
// newest attempt is done, pending or unknown.
type ProbeOpts struct {
	// Provider is the campaign's provider; it must be able to probe.
	Provider provider.Provider
	// Rate caps probes per second, on top of the provider's own rate limit
	// (0: the provider's limit alone).
	Rate float64
	// Concurrency is how many probes run at once (default 4); the
	// provider's own concurrency bound applies as well.
	Concurrency int
}

// OwnMessage is a message Onceplan sent that is no target's effect: a
// test send to a reviewer, or a notification. Its key's event is
// "test:…" or "notify:…", never a campaign's id, so it is no target's key
// and the ledger has no attempt at it; a maildir or a provider log that
// holds it is still the provider's honest record. [Reconcile] reports its
// evidence as what it is (Report.Recognised), not as a stray.
type OwnMessage struct {
	// Kind says what it is: "test send" or "notification".
	Kind string
	// Key is the key it was sent under (at epoch 0).
	Key string
	// Receipt is the provider's id for it, when the trail kept one.
	Receipt string
	// Campaign names the campaign it was about (its name, else its id).
	Campaign string
	To       string
	At       time.Time
}

// describe is the note a recognised message's finding carries.
func (m OwnMessage) describe() string {
	s := "a " + m.Kind
	if m.Campaign != "" {
		s += " of campaign " + strconv.Quote(m.Campaign)
	}
	if m.To != "" {
		s += " to " + m.To
	}
	if !m.At.IsZero() {
		s += ", " + m.At.UTC().Format("2006-01-02 15:04 UTC")
	}
	return s + ": not a target's effect"
}

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

// Finding is one target (or one piece of stray evidence) the
// reconciliation reports.
type Finding struct {
	Ordinal int    `json:"ordinal,omitempty"`
	Target  string `json:"target,omitempty"`
	Key     string `json:"key,omitempty"`
	// Epoch is the epoch of Key (meaningless when Key is empty).
	Epoch int `json:"epoch"`
	// ID is how the evidence named the effect when it is not a key: a
	// Message-ID, or the provider's own id.
	ID string `json:"id,omitempty"`
	// State is the ledger's state of the newest attempt at Key and Epoch
	// (not_started when none; empty for a stray).
	State string `json:"state,omitempty"`
	// Files and Lines count the maildir files and log lines naming it.
	Files int `json:"maildir_files"`
	Lines int `json:"log_lines"`
	// Probe is "found", "not found" or "error: …"; empty when not probed.
	Probe string `json:"probe,omitempty"`
	// ProbeMatches is how many messages with the effect id the probe
	// found at the provider (more than one: a duplicate); 0 when not
	// found or not probed.
	ProbeMatches int `json:"probe_matches,omitempty"`
	// Sources name the pieces of evidence (maildir files, log lines).
	Sources []string `json:"sources,omitempty"`
	// ResolvableAsDelivered marks an unknown effect the evidence shows
	// delivered: a person may resolve it as delivered
	// (POST /api/v1/effects/{key}/resolve).
	ResolvableAsDelivered bool   `json:"resolvable_as_delivered,omitempty"`
	Note                  string `json:"note,omitempty"`

	hash effectHash // for naming maildir files
}

// FindingList is a count and the first findings.
type FindingList struct {
	Count     int       `json:"count"`
	Items     []Finding `json:"items"`
	Truncated bool      `json:"truncated,omitempty"`
	max       int
}

func (l *FindingList) add(f Finding) {
	l.Count++
	if len(l.Items) < l.max {
		l.Items = append(l.Items, f)
	} else {
		l.Truncated = true
	}
}

// ProbeSummary says what probing found.
type ProbeSummary struct {
	Provider string `json:"provider"`
	Probed   int    `json:"probed"`
	Found    int    `json:"found"`
	NotFound int    `json:"not_found"`
	Errors   int    `json:"errors"`
	// Duplicated counts the probes that found the effect more than once.
	Duplicated int `json:"duplicated"`
}

// Report is a plan's reconciliation against outside evidence.
type Report struct {
	// Metric is the plan's metric with Duplicates, Unconfirmed, Unrecorded
	// and Evidence filled in from the evidence. It is left out of the
	// report's JSON: the external contract puts the metric's fields at the
	// top level, and callers print it beside the report.
	Metric   Metric           `json:"-"`
	Maildirs []MaildirSummary `json:"maildirs,omitempty"`
	Logs     []LogSummary     `json:"provider_logs,omitempty"`
	Probe    *ProbeSummary    `json:"probe,omitempty"`
	// DoneWithoutEvidence: done in the ledger, nothing in the evidence.
	DoneWithoutEvidence FindingList `json:"done_without_evidence"`
	// EvidenceNotDone: delivered according to the evidence, but pending,
	// unknown, failed or not started in the ledger.
	EvidenceNotDone FindingList `json:"evidence_not_done"`
	// Duplicates: more than one piece of evidence in one source for one
	// key and epoch of the plan's targets (a probe that found the effect
	// more than once at the provider included).
	Duplicates FindingList `json:"duplicates"`
	// Strays: evidence for effects that are not the plan's targets: keys
	// of this campaign outside the plan, and ids no attempt in the ledger
	// has.
	Strays FindingList `json:"strays"`
	// Recognised: evidence of Onceplan's own messages that are no target's
	// effect (ReconcileParams.OwnMessages): test sends and notifications,
	// of any campaign. They neither count for nor against the plan.
	Recognised FindingList `json:"recognised"`
	// OtherCampaigns counts pieces of evidence for other campaigns'
	// effects (a shared outbox or log); they are not this plan's business.
	OtherCampaigns int `json:"other_campaigns"`
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

// startProbes starts the probing goroutines.
func (r *reconciler) startProbes(ctx context.Context, o ProbeOpts) error {
	if o.Provider == nil {
		return errors.New("probing needs a provider")
	}
	if !o.Provider.Capabilities().Probe {
		return &noProbeError{name: o.Provider.Name(), kind: o.Provider.Kind()}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	r.probe = &o
	r.rep.Probe = &ProbeSummary{Provider: o.Provider.Name()}
	if o.Rate > 0 {
		r.limit = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	r.jobs = make(chan probeJob, o.Concurrency)
	for range o.Concurrency {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for j := range r.jobs {
				res, err := r.probeOne(ctx, j.s.t)
				if err != nil && ctx.Err() != nil {
					r.mu.Lock()
					if r.probeErr == nil {
						r.probeErr = ctx.Err()
					}
					r.mu.Unlock()
					continue
				}
				r.mu.Lock()
				r.rep.Probe.Probed++
				p := probed{verdict: "not found", provider: o.Provider.Name()}
				switch {
				case err != nil:
					r.rep.Probe.Errors++
					p.verdict = "error: " + oneLine(err.Error())
				case res.Found:
					r.rep.Probe.Found++
					p.verdict, p.matches = "found", res.Count()
					if p.matches > 1 {
						r.rep.Probe.Duplicated++
					}
				default:
					r.rep.Probe.NotFound++
				}
				r.mu.Unlock()
				r.judge(j.s, p)
			}
		}()
	}
	return nil
}

func (r *reconciler) probeOne(ctx context.Context, t TargetRow) (provider.ProbeResult, error) {
	if r.limit != nil {
		if err := r.limit.Wait(ctx); err != nil {
			return provider.ProbeResult{}, err
		}
	}
	release, err := r.probe.Provider.Acquire(ctx)
	if err != nil {
		return provider.ProbeResult{}, err
	}
	defer release()
	return r.probe.Provider.Probe(ctx, t.Key, t.Epoch)
}

// noProbeError refuses to probe a provider that cannot be asked; it
// wraps provider.ErrNoProbe.
type noProbeError struct{ name, kind string }

func (e *noProbeError) Error() string {
	return fmt.Sprintf("provider %s (%s) cannot be probed", e.name, e.kind)
}

func (e *noProbeError) Unwrap() error { return provider.ErrNoProbe }

// stopProbes waits for the probes in flight.
func (r *reconciler) stopProbes() error {
	if r.jobs == nil {
		return nil
	}
	close(r.jobs)
	r.wg.Wait()
	return r.probeErr
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// recognise files the evidence no target used that names one of
// Onceplan's own messages (by its effect, its key or its receipt) in
// Recognised, and marks it used, so that strays does not list it.
func (r *reconciler) recognise(own []OwnMessage) {
	for _, m := range own {
		var f Finding
		h := hashOf(m.Key, 0)
		for _, x := range []*tally{r.ev.byEffect[h], r.ev.byKey[m.Key], r.receiptTally(m.Receipt)} {
			if x == nil || x.used {
				continue
			}
			x.used = true
			f.Files += int(x.files)
			f.Lines += int(x.lines)
			f.Sources = append(f.Sources, r.lineSources(x)...)
		}
		if f.Files+f.Lines == 0 {
			continue
		}
		f.Key, f.Target, f.State, f.Note, f.hash = m.Key, m.To, m.Kind, m.describe(), h
		r.rep.Recognised.add(f)
	}
}

// leftover is evidence no target of the plan accounted for, and what the
// ledger knows of it.
type leftover struct {
	t        *tally
	key      string
	epoch    int
	campaign string
	resolved bool
}

// strays names the evidence no target used: another campaign's (counted),
// or a stray (listed).
func (r *reconciler) strays(ctx context.Context, db onceplan.DB, campaign string) error {
	byHash := map[effectHash]*leftover{}
	for h, t := range r.ev.byEffect {
		if !t.used {
			byHash[h] = &leftover{t: t}
		}
	}
	byKey := map[string]*leftover{}
	for k, t := range r.ev.byKey {
		if !t.used {
			byKey[k] = &leftover{t: t, key: k}
		}
	}
	byReceipt := map[string]*leftover{}
	for id, t := range r.ev.byReceipt {
		if !t.used {
			byReceipt[id] = &leftover{t: t}
		}
	}
	if len(byHash)+len(byKey)+len(byReceipt) == 0 {
		return nil
	}
	rows, err := db.Query(ctx, ledgerIdentities)
	if err != nil {
		return err
	}
	var (
		key, receipt, camp string
		epoch              int
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &epoch, &receipt, &camp}, func() error {
		resolve := func(l *leftover) {
			if l != nil && !l.resolved {
				l.key, l.epoch, l.campaign, l.resolved = key, epoch, camp, true
			}
		}
		if len(byHash) > 0 {
			resolve(byHash[hashOf(key, epoch)])
		}
		resolve(byKey[key])
		if receipt != "" {
			resolve(byReceipt[receipt])
		}
		return nil
	})
	if err != nil {
		return err
	}

	var found []Finding
	file := func(l *leftover, f Finding, unknown string) {
		if l.resolved && l.campaign != campaign {
			r.rep.OtherCampaigns += l.t.pieces()
			return
		}
		f.Key, f.Epoch = l.key, l.epoch
		f.Files, f.Lines, f.Sources = int(l.t.files), int(l.t.lines), r.lineSources(l.t)
		f.Note = unknown
		if l.resolved {
			f.ID = ""
			f.Note = "an effect of this campaign that is not a target of this plan at this epoch (an earlier version's, or a stale epoch)"
		}
		found = append(found, f)
	}
	for h, l := range byHash {
		file(l, Finding{hash: h, ID: "<" + hex.EncodeToString(h[:]) + "@onceplan>"}, "no attempt in the ledger has this effect")
	}
	for _, l := range byKey {
		file(l, Finding{}, "no attempt in the ledger has this key")
	}
	for id, l := range byReceipt {
		file(l, Finding{ID: id}, "no receipt in the ledger matches this provider id")
	}
	slices.SortFunc(found, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.ID, b.ID))
	})
	for _, f := range found {
		r.rep.Strays.add(f)
	}
	return nil
}

// nameFiles fills in the maildir files behind the listed findings: a second
// pass over the maildirs, reading only names (and the headers of files not
// named by the provider).
func (r *reconciler) nameFiles(ctx context.Context) error {
	wanted := map[effectHash][]*Finding{}
	for _, l := range []*FindingList{&r.rep.Duplicates, &r.rep.EvidenceNotDone, &r.rep.Strays, &r.rep.Recognised} {
		for i := range l.Items {
			if f := &l.Items[i]; f.Files > 0 {
				wanted[f.hash] = append(wanted[f.hash], f)
			}
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	for _, md := range r.ev.maildirs {
		for _, sub := range []string{"new", "cur"} {
			err := walkMaildir(ctx, filepath.Join(md.Dir, sub), func(name string) error {
				h, ok := maildirName(name)
				if !ok {
					var err error
					if h, ok, err = headerEffect(filepath.Join(md.Dir, sub, name)); err != nil || !ok {
						return err
					}
				}
				for _, f := range wanted[h] {
					f.Sources = append(f.Sources, "maildir "+filepath.Join(md.Dir, sub, name))
				}
				return nil
			})
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("reading maildir %s: %w", md.Dir, err)
			}
		}
	}
	return nil
}
