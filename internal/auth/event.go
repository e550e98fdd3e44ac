package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Administrative actions, as the admin audit trail names them.
const (
	EventUserAdd     = "user_add"
	EventUserRoles   = "user_roles"
	EventUserDisable = "user_disable"
	EventUserEnable  = "user_enable"
	// EventUserPassword: a password set on the command line, or changed
	// by its own user in the web UI (ChangePassword).
	EventUserPassword = "user_password"
	EventTokenCreate  = "token_create"
	EventTokenRevoke  = "token_revoke"
)

// Event is one entry of the administration audit trail. Either a signed-in
// user acted (ActorID, ActorEmail) or the command line did (ActorCLI).
type Event struct {
	ID         int64
	ActorID    int64
	ActorEmail string
	ActorCLI   string
	Action     string
	Subject    string
	Detail     string // JSON
	CreatedAt  time.Time
}

// Who says who acted, for people: the user's email, or "command line
// (account@host)".
func (e Event) Who() string {
	if e.ActorCLI != "" {
		return "command line (" + e.ActorCLI + ")"
	}
	return e.ActorEmail
}

// RecordEvent appends an administrative action of the signed-in user
// actorID to the audit trail (write-once: the database refuses UPDATE and
// DELETE). Call it in the transaction of the action it records.
func RecordEvent(ctx context.Context, db onceplan.DB, actorID int64, action, subject string, detail any) error {
	return recordEvent(ctx, db, actorID, "", action, subject, detail)
}

// RecordCLIEvent appends an administrative action taken on the command
// line, where nobody is signed in: who names the operating-system account
// and host that ran it. Call it in the transaction of the action.
func RecordCLIEvent(ctx context.Context, db onceplan.DB, who, action, subject string, detail any) error {
	return recordEvent(ctx, db, 0, who, action, subject, detail)
}

func recordEvent(ctx context.Context, db onceplan.DB, actorID int64, cli, action, subject string, detail any) error {
	b := []byte("{}")
	if detail != nil {
		var err error
		if b, err = json.Marshal(detail); err != nil {
			return err
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO admin_event (actor_id, actor_cli, action, subject, detail) VALUES (nullif($1, 0), nullif($2, ''), $3, $4, $5)`,
		actorID, cli, action, subject, b); err != nil {
		return fmt.Errorf("recording %s of %s: %w", action, subject, err)
	}
	return nil
}

// RecentEvents lists the latest administrative actions, newest first.
func RecentEvents(ctx context.Context, db onceplan.DB, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `
		SELECT e.id, coalesce(e.actor_id, 0), coalesce(u.email, ''), coalesce(e.actor_cli, ''), e.action, e.subject, e.detail::text, e.created_at
		FROM admin_event e LEFT JOIN app_user u ON u.id = e.actor_id
		ORDER BY e.id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.ActorID, &e.ActorEmail, &e.ActorCLI, &e.Action, &e.Subject, &e.Detail, &e.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
