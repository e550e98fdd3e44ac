package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Administrative actions, as the admin audit trail names them.
const (
	EventUserAdd     = "user_add"
	EventUserRoles   = "user_roles"
	EventUserDisable = "user_disable"
	EventUserEnable  = "user_enable"
	EventTokenCreate = "token_create"
	EventTokenRevoke = "token_revoke"
)

// Event is one entry of the administration audit trail.
type Event struct {
	ID         int64
	ActorID    int64
	ActorEmail string
	Action     string
	Subject    string
	Detail     string // JSON
	CreatedAt  time.Time
}

// RecordEvent appends an administrative action to the audit trail (write-
// once: the database refuses UPDATE and DELETE). Call it in the transaction
// of the action it records.
func RecordEvent(ctx context.Context, db DB, actorID int64, action, subject string, detail any) error {
	b := []byte("{}")
	if detail != nil {
		var err error
		if b, err = json.Marshal(detail); err != nil {
			return err
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO admin_event (actor_id, action, subject, detail) VALUES ($1, $2, $3, $4)`,
		actorID, action, subject, b); err != nil {
		return fmt.Errorf("recording %s of %s: %w", action, subject, err)
	}
	return nil
}

// RecentEvents lists the latest administrative actions, newest first.
func RecentEvents(ctx context.Context, db DB, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `
		SELECT e.id, e.actor_id, u.email, e.action, e.subject, e.detail::text, e.created_at
		FROM admin_event e JOIN app_user u ON u.id = e.actor_id
		ORDER BY e.id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.ActorID, &e.ActorEmail, &e.Action, &e.Subject, &e.Detail, &e.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
