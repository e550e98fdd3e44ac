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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

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
