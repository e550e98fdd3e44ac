package inbound

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// Unknown is a target whose effect is unknown, as the read model shows it
// (audit.TargetRow with state unknown).
type Unknown struct {
	Ordinal int
	Target  string // the normalised address
	Key     string
	Epoch   int
	Receipt string
	// FirstAt is when the first attempt at the key and epoch started
	// (zero when not known): an event from before it cannot be about it.
	FirstAt time.Time
}

// Proposal is a resolution the evidence proposes for one unknown target;
// a person confirms it (or not). Nothing is resolved by proposing.
type Proposal struct {
	Unknown
	Outcome ledger.Outcome
	// Proof is the event that decides; Others counts the further events
	// about the same effect.
	Proof  Proof
	Others int
	// ByAddress is set when no event names the effect by its id and the
	// proposal rests on the recipient address (and the time) alone.
	ByAddress bool
}

// Reason is what the resolution records: "evidence: SES Delivery, message id …, at …".
func (p Proposal) Reason() string {
	r := "evidence: " + p.Proof.Describe()
	if p.ByAddress {
		r += "; matched by the recipient address and time alone (the event names no Onceplan message id)"
	}
	if p.Others > 0 {
		r += "; " + plural(p.Others, "more event agrees", "more events agree")
	}
	return r
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// names says how a proof names an effect.
type names int

const (
	namesNothing names = iota // no Onceplan id: only its address can match
	namesOther                // an Onceplan id of another effect
	namesThis                 // this effect's Message-ID, effect id or receipt
)

func (p Proof) names(u Unknown) names {
	ours := false
	if p.MessageID != "" {
		if strings.EqualFold(p.MessageID, provider.MessageID(u.Key, u.Epoch)) {
			return namesThis
		}
		ours = ours || strings.HasSuffix(strings.ToLower(p.MessageID), "@onceplan>")
	}
	if p.EffectID != "" {
		if p.EffectID == provider.EffectID(u.Key, u.Epoch) {
			return namesThis
		}
		ours = ours || strings.HasPrefix(p.EffectID, "v1:")
	}
	if receiptMatches(u.Receipt, p.ProviderMessageID) {
		return namesThis
	}
	if ours {
		return namesOther
	}
	return namesNothing
}

// Propose matches proofs to unknown targets. A proof is about a target
// when it names the target's effect: our deterministic Message-ID
// (provider.MessageID of its key and epoch), its effect id, or the
// provider's message id its receipt holds. A proof that names no Onceplan
// id at all is about a target only when its recipient is the target's
// address and it happened after the target's first attempt (an older
// message to the same person is not this one); a proof naming another
// effect's id is never about it. Where proofs about one target disagree,
// delivered wins: proposing "not delivered" for a message the provider
// did accept would send it twice. Targets no proof is about get no
// proposal: they stay unknown. The proposals come in the order of unknowns.
func Propose(unknowns []Unknown, proofs []Proof) []Proposal {
	byAddr := map[string][]int{}
	for i, p := range proofs {
		if t, err := ledger.NewEmailTarget(p.Address); err == nil {
			byAddr[t.Value] = append(byAddr[t.Value], i)
		}
	}
	var out []Proposal
	for _, u := range unknowns {
		var strong, weak []Proof
		for _, p := range proofs {
			if p.names(u) == namesThis {
				strong = append(strong, p)
			}
		}
		if len(strong) == 0 {
			for _, i := range byAddr[u.Target] {
				p := proofs[i]
				if p.names(u) == namesNothing && !p.At.IsZero() && !u.FirstAt.IsZero() && !p.At.Before(u.FirstAt.Add(-time.Minute)) {
					weak = append(weak, p)
				}
			}
		}
		use, byAddress := strong, false
		if len(use) == 0 {
			use, byAddress = weak, true
		}
		if len(use) == 0 {
			continue
		}
		// Delivered first, then the earliest.
		slices.SortStableFunc(use, func(a, b Proof) int {
			if a.Outcome != b.Outcome {
				if a.Outcome == ledger.Delivered {
					return -1
				}
				return 1
			}
			return a.At.Compare(b.At)
		})
		out = append(out, Proposal{Unknown: u, Outcome: use[0].Outcome, Proof: use[0], Others: len(use) - 1, ByAddress: byAddress})
	}
	return out
}

// ReceivedProofs are the provider events already received at
// /webhooks/{kind} and tied to one of the keys' effects: each is a
// bounce or a complaint, which proves the provider accepted the message
// (delivered, for exactly-once).
func ReceivedProofs(ctx context.Context, db onceplan.DB, keys []string) ([]Proof, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT `+recordedCols+` FROM inbound_event WHERE key = ANY ($1::text[]) ORDER BY id`, keys)
	if err != nil {
		return nil, err
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Recorded, error) { return scanRecorded(r) })
	if err != nil {
		return nil, err
	}
	out := make([]Proof, 0, len(recs))
	for _, r := range recs {
		if r.EffectID == 0 {
			continue
		}
		out = append(out, Proof{
			Source: "received webhook events", EventID: r.ID, Kind: r.Kind, Event: receivedEventName(r.Type),
			Outcome: ledger.Delivered, Address: r.Address, MessageID: r.MessageID,
			EffectID: provider.EffectID(r.Key, r.Epoch), ProviderMessageID: r.ProviderMessageID, At: r.At, Detail: r.Detail,
		})
	}
	return out, nil
}

func receivedEventName(t Type) string {
	switch t {
	case HardBounce:
		return "hard bounce"
	case SoftBounce:
		return "soft bounce"
	case Complaint:
		return "complaint"
	}
	return string(t)
}
