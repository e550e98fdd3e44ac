package inbound

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Recorded is an event as stored.
type Recorded struct {
	ID                int64
	Kind              Kind
	ProviderEventID   string
	Type              Type
	Address           string
	MessageID         string
	ProviderMessageID string
	Detail            string
	At                time.Time // zero when the provider gave no time
	EffectID          int64     // 0 when not tied to an effect
	Key               string
	Epoch             int
	CampaignID        string
	CreatedAt         time.Time
}

// Result says what Record did with a request's events.
type Result struct {
	Recorded   int // new events stored
	Duplicate  int // events already stored (re-deliveries)
	Tied       int // new events tied to an effect
	Suppressed int // addresses newly suppressed
}

// Beginner is a database Record can open a transaction on (a pool, or a
// transaction for a savepoint).
type Beginner interface {
	onceplan.DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxCandidates bounds the effects an event's address is compared with.
const maxCandidates = 1000

// Record stores events, in one transaction: each new one raw with what
// was parsed from it, tied to its effect where it can be, and a hard
// bounce or complaint suppresses its address (suppression.Add, source
// provider_event, pointing at the event). An event already stored (same
// kind and provider event id) changes nothing: a re-delivery is recorded
// once, and its suppression was made with the first.
func Record(ctx context.Context, db Beginner, events []Event) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		res = Result{}
		return recordAll(ctx, tx, events, &res)
	})
	return res, err
}

// recordAll is Record's work, in the caller's transaction.
func recordAll(ctx context.Context, tx pgx.Tx, events []Event, res *Result) error {
	r := recorder{tx: tx}
	for _, e := range events {
		if err := r.recordOne(ctx, e, res); err != nil {
			return err
		}
	}
	return nil
}

// recorder is one Record call's transaction, with what its events share:
// the campaigns, read once however many events the request carries.
type recorder struct {
	tx        pgx.Tx
	campaigns []campaignTool
	loaded    bool
}

// campaignTool is what a target key is a function of, besides the address.
type campaignTool struct{ id, tool string }

// campaignList reads every campaign's id and tool, the first time an
// event needs them.
func (r *recorder) campaignList(ctx context.Context) ([]campaignTool, error) {
	if r.loaded {
		return r.campaigns, nil
	}
	all, err := approval.CampaignTools(ctx, r.tx)
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		r.campaigns = append(r.campaigns, campaignTool{id: c.ID, tool: c.Tool})
	}
	r.loaded = true
	return r.campaigns, nil
}

func (r *recorder) recordOne(ctx context.Context, e Event, res *Result) error {
	tx := r.tx
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbound_event WHERE kind = $1 AND provider_event_id = $2)`,
		e.Kind, e.ProviderEventID).Scan(&exists); err != nil {
		return err
	}
	if exists {
		res.Duplicate++
		return nil
	}
	addr, err := suppression.Normalize(e.Address)
	valid := err == nil
	if !valid {
		// Kept as the provider wrote it, to be read; never suppressed.
		addr = strings.ToLower(strings.TrimSpace(e.Address))
	}
	var t tie
	if valid {
		if t, err = r.tieOf(ctx, addr, e); err != nil {
			return err
		}
	}
	var at *time.Time
	if !e.At.IsZero() {
		at = &e.At
	}
	var id int64
	err = tx.QueryRow(ctx, `
		INSERT INTO inbound_event (kind, provider_event_id, type, address, message_id, provider_message_id, detail,
		                           occurred_at, raw, effect_id, key, epoch, campaign_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, 0), nullif($11, ''), CASE WHEN $10 = 0 THEN NULL ELSE $12::int END,
		        nullif($13, '')::uuid)
		ON CONFLICT (kind, provider_event_id) DO NOTHING
		RETURNING id`,
		e.Kind, e.ProviderEventID, e.Type, addr, e.MessageID, e.ProviderMessageID, e.Detail,
		at, e.Raw, t.effectID, t.key, t.epoch, t.campaignID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		res.Duplicate++ // a concurrent delivery of the same event won
		return nil
	}
	if err != nil {
		return err
	}
	res.Recorded++
	if t.effectID != 0 {
		res.Tied++
	}
	if !valid || !e.Type.Suppresses() {
		return nil
	}
	reason := suppression.HardBounce
	if e.Type == Complaint {
		reason = suppression.Complaint
	}
	note := string(e.Kind) + ": " + e.Detail
	if len(note) > 1000 {
		note = strings.ToValidUTF8(note[:1000], "")
	}
	_, added, err := suppression.Add(ctx, tx, suppression.AddParams{
		Address: addr, Reason: reason, Source: suppression.FromProviderEvent,
		EventID: id, CampaignID: t.campaignID, Note: note,
	})
	if err != nil {
		return err
	}
	if added {
		res.Suppressed++
	}
	return nil
}

// tie is the effect an event reports on.
type tie struct {
	effectID   int64
	key        string
	epoch      int
	campaignID string
}

// tieOf finds the effect an event is about: among the effects of the
// address's targets, the newest whose deterministic Message-ID
// (provider.MessageID) is the one the event names, or whose receipt is
// the provider's message id. A target's key is a function of its
// campaign, tool and address (plan.TargetKey), so the candidates are the
// effects at the address's key in each campaign, which the ledger looks
// up by key (ledger.Store.Newest): no index of targets by address across lists is needed, and the
// import, which writes a million target rows at a time, pays for none.
func (r *recorder) tieOf(ctx context.Context, addr string, e Event) (tie, error) {
	if e.MessageID == "" && e.ProviderMessageID == "" {
		return tie{}, nil
	}
	campaigns, err := r.campaignList(ctx)
	if err != nil {
		return tie{}, err
	}
	var (
		keys       []ledger.Key
		campaignOf = map[string]string{}
	)
	for _, c := range campaigns {
		if _, key, err := plan.TargetKey(c.id, c.tool, addr); err == nil {
			keys = append(keys, key)
			campaignOf[string(key)] = c.id
		}
	}
	if len(keys) == 0 {
		return tie{}, nil
	}
	effects, err := ledger.NewStore(r.tx).Newest(ctx, keys, maxCandidates)
	if err != nil {
		return tie{}, err
	}
	for _, eff := range effects {
		c := tie{effectID: eff.ID, key: string(eff.Key), epoch: eff.Epoch, campaignID: campaignOf[string(eff.Key)]}
		if e.MessageID != "" && strings.EqualFold(provider.MessageID(c.key, c.epoch), e.MessageID) {
			return c, nil
		}
		if receiptMatches(eff.Receipt, e.ProviderMessageID) {
			return c, nil
		}
	}
	return tie{}, nil
}

// receiptMatches reports whether an effect's receipt names the provider's
// message id: equal, the receipt inside an SMTP reply ("250 Ok <id>"), or
// SendGrid's sg_message_id extending the X-Message-Id it answered with.
func receiptMatches(receipt, pmid string) bool {
	receipt = strings.Trim(strings.TrimSpace(receipt), "<>")
	pmid = strings.Trim(strings.TrimSpace(pmid), "<>")
	if receipt == "" || pmid == "" {
		return false
	}
	if receipt == pmid {
		return true
	}
	const minID = 12 // shorter ids could match by accident
	if len(pmid) >= minID && strings.Contains(receipt, pmid) {
		return true
	}
	return len(receipt) >= minID && strings.HasPrefix(pmid, receipt+".")
}

const recordedCols = `id, kind, provider_event_id, type, address, message_id, provider_message_id, detail,
	occurred_at, coalesce(effect_id, 0), coalesce(key, ''), coalesce(epoch, 0), coalesce(campaign_id::text, ''), created_at`

func scanRecorded(row pgx.Row) (Recorded, error) {
	var (
		r  Recorded
		at *time.Time
	)
	err := row.Scan(&r.ID, &r.Kind, &r.ProviderEventID, &r.Type, &r.Address, &r.MessageID, &r.ProviderMessageID, &r.Detail,
		&at, &r.EffectID, &r.Key, &r.Epoch, &r.CampaignID, &r.CreatedAt)
	if at != nil {
		r.At = *at
	}
	return r, err
}

// maxEventsShown bounds the events EventsAbout returns (the newest).
const maxEventsShown = 200

// EventsAbout returns what providers reported about a target, oldest
// first (the newest maxEventsShown): the events tied to its effect key
// (any epoch), and those reported for its address — a bounce that named
// no message of ours, or another campaign's message — since a hard
// bounce or a complaint suppresses the address whichever message it was
// about. address is the target's normalised address.
func EventsAbout(ctx context.Context, db onceplan.DB, key, address string) ([]Recorded, error) {
	rows, err := db.Query(ctx, `
		SELECT * FROM (
			SELECT `+recordedCols+` FROM inbound_event WHERE id IN (
				(SELECT id FROM inbound_event WHERE key = $1 ORDER BY id DESC LIMIT $3)
				UNION
				(SELECT id FROM inbound_event WHERE address = $2 ORDER BY id DESC LIMIT $3))
			ORDER BY id DESC LIMIT $3) x
		ORDER BY id`, key, address, maxEventsShown)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Recorded, error) { return scanRecorded(r) })
}
