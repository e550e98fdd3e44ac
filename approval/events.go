package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Event is one entry of a campaign's audit trail.
type Event struct {
	ID         int64           `json:"id"`
	CampaignID string          `json:"campaign_id"`
	Action     string          `json:"action"`
	ActorID    int64           `json:"actor_id,omitempty"` // 0: the system
	ViaAgent   bool            `json:"via_agent"`
	Version    int             `json:"version,omitempty"`
	PlanHash   string          `json:"plan_hash,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Detail     json.RawMessage `json:"detail,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
}

// appendEvent appends e to the audit trail (write-once in PostgreSQL) and
// returns the new entry's id (a decision that is announced names its
// entry: package notify).
func appendEvent(ctx context.Context, tx pgx.Tx, e Event) (int64, error) {
	var actor *int64
	if e.ActorID != 0 {
		actor = &e.ActorID
	}
	var version *int
	if e.Version != 0 {
		version = &e.Version
	}
	var hash *string
	if e.PlanHash != "" {
		hash = &e.PlanHash
	}
	var detail any
	if len(e.Detail) > 0 {
		detail = e.Detail
	}
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO campaign_event (campaign_id, action, actor_id, via_agent, version, plan_hash, reason, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		e.CampaignID, e.Action, actor, e.ViaAgent, version, hash, e.Reason, detail).Scan(&id)
	return id, err
}

const eventCols = `id, campaign_id, action, coalesce(actor_id, 0), via_agent, coalesce(version, 0),
	coalesce(plan_hash, ''), reason, detail, created_at`

func scanEvent(r pgx.Row) (Event, error) {
	var e Event
	var detail []byte
	err := r.Scan(&e.ID, &e.CampaignID, &e.Action, &e.ActorID, &e.ViaAgent, &e.Version, &e.PlanHash, &e.Reason, &detail, &e.CreatedAt)
	e.Detail = detail
	return e, err
}

// Events returns a campaign's audit trail, oldest first.
func Events(ctx context.Context, db onceplan.DB, campaignID string) ([]Event, error) {
	rows, err := db.Query(ctx, `SELECT `+eventCols+` FROM campaign_event WHERE campaign_id = $1 ORDER BY id`, campaignID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
}

// GetEvent reads one entry of a trail by its id.
func GetEvent(ctx context.Context, db onceplan.DB, id int64) (Event, error) {
	e, err := scanEvent(db.QueryRow(ctx, `SELECT `+eventCols+` FROM campaign_event WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("%w: no trail entry %d", onceplan.ErrNotFound, id)
	}
	return e, err
}

// LastEventAt returns the time of each campaign's latest audit event, by
// campaign id; a campaign without events (or unknown) is absent.
func LastEventAt(ctx context.Context, db onceplan.DB, campaignIDs []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(campaignIDs) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT c.id::text, (SELECT e.created_at FROM campaign_event e WHERE e.campaign_id = c.id ORDER BY e.id DESC LIMIT 1)
		FROM campaign c WHERE c.id = ANY($1::uuid[])`, campaignIDs)
	if err != nil {
		return nil, err
	}
	var id string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		if at != nil {
			out[id] = *at
		}
		return nil
	})
	return out, err
}
