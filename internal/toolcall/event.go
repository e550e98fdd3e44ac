package toolcall

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgnotify"
	"github.com/onceplan/onceplan/ledger"
)

// eventParams is one entry of the single effects' trail.
type eventParams struct {
	Key      ledger.Key
	Tool     string
	Event    string
	Action   string
	Actor    *auth.Actor // nil: recovery
	EffectID int64
	State    ledger.State
	Reason   string
	Detail   map[string]any
}

// recordEvent appends an entry to the trail, in tx (write-once).
func recordEvent(ctx context.Context, tx pgx.Tx, p eventParams) error {
	actor, agent := "recovery", false
	var actorID *int64
	if p.Actor != nil {
		actor, agent = p.Actor.String(), p.Actor.Agent
		if p.Actor.UserID != 0 {
			actorID = &p.Actor.UserID
		}
	}
	var effectID *int64
	if p.EffectID != 0 {
		effectID = &p.EffectID
	}
	var state *string
	if p.State != "" {
		s := string(p.State)
		state = &s
	}
	var detail []byte
	if p.Detail != nil {
		var err error
		if detail, err = json.Marshal(p.Detail); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO tool_call_event (key, tool, event, action, actor, actor_id, via_agent, effect_id, state, reason, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::effect_state, $10, $11)`,
		string(p.Key), p.Tool, p.Event, p.Action, actor, actorID, agent, effectID, state, p.Reason, detail)
	if err != nil {
		return err
	}
	// Every change to a call records an event: its waiters (Wait) read
	// the call again once this transaction commits.
	return pgnotify.Notify(ctx, tx, ChangeChannel, string(p.Key))
}

// Event is one entry of a single effect's trail.
type Event struct {
	ID        int64
	Key       ledger.Key
	Tool      string
	Event     string
	Action    string
	Actor     string
	ViaAgent  bool
	EffectID  int64
	State     string
	Reason    string
	Detail    json.RawMessage
	CreatedAt time.Time
}

// EventFilter selects trail entries: by tool, by event id, by key (each
// "" for any), up to Limit (default 200), oldest first.
type EventFilter struct {
	Tool, Event string
	Key         ledger.Key
	Limit       int
}

// Events reads the trail of the single effects a may read (Reader.Call:
// of the call's user, or, before the call has an intent, of the user who
// asked for its approval).
func (s *Service) Events(ctx context.Context, a auth.Actor, f EventFilter) ([]Event, error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 200
	}
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, e.key, e.tool, e.event, e.action, e.actor, e.via_agent, coalesce(e.effect_id, 0), coalesce(e.state::text, ''),
		       e.reason, e.detail, e.created_at
		FROM tool_call_event e
		LEFT JOIN tool_call c ON c.key = e.key
		WHERE ($1 = '' OR e.tool = $1) AND ($2 = '' OR e.event = $2) AND ($3 = '' OR e.key = $3)
		  AND (`+callReadable("c.created_by_user", 5)+` OR (c.key IS NULL AND EXISTS (
			SELECT 1 FROM tool_approval_request r WHERE r.key = e.key AND `+callReadable("r.requested_by_user", 5)+`)))
		ORDER BY e.id LIMIT $4`, append([]any{f.Tool, f.Event, string(f.Key), f.Limit}, ReaderOf(a).callArgs()...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var key string
		err := r.Scan(&e.ID, &key, &e.Tool, &e.Event, &e.Action, &e.Actor, &e.ViaAgent, &e.EffectID, &e.State, &e.Reason, &e.Detail, &e.CreatedAt)
		e.Key = ledger.Key(key)
		return e, err
	})
}
