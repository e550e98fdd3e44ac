package notify

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// The SQL of the notification tables (migration 0020), in one place.

// insertNotifications records drafts, each once per source, notifier and
// recipient, and returns those it wrote (none that existed already). The
// rows go in one batch: one round trip however many recipients.
func insertNotifications(ctx context.Context, tx pgx.Tx, drafts []draft) ([]Recorded, error) {
	b := &pgx.Batch{}
	for _, d := range drafts {
		var (
			event, att *int64
			user       *int64
		)
		if d.src.Event != 0 {
			event = &d.src.Event
		} else {
			att = &d.src.Attention
		}
		if d.userID != 0 {
			user = &d.userID
		}
		conflict := `(campaign_event_id, notifier, recipient) WHERE campaign_event_id IS NOT NULL`
		if att != nil {
			conflict = `(attention_id, notifier, recipient) WHERE attention_id IS NOT NULL`
		}
		b.Queue(`
			INSERT INTO notification (event, campaign_event_id, attention_id, campaign_id, notifier, kind, recipient, user_id, subject, body)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT `+conflict+` DO NOTHING RETURNING id`,
			string(d.event), event, att, d.campaign, d.notifier, d.kind, d.recipient, user, clip(d.subject, 1000), d.body)
	}
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	var out []Recorded
	for _, d := range drafts {
		var id int64
		err := res.QueryRow().Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // expanded before
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Recorded{ID: id, Notifier: d.notifier})
	}
	return out, res.Close()
}

// clip bounds s to n bytes, ending in "…" when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}

// optedOut is the set of users who turned e off.
func optedOut(ctx context.Context, db onceplan.DB, e Event, users []auth.User) (map[int64]bool, error) {
	ids := make([]int64, len(users))
	for i, u := range users {
		ids[i] = u.ID
	}
	rows, err := db.Query(ctx, `SELECT user_id FROM notification_preference WHERE event = $1 AND NOT enabled AND user_id = ANY($2)`, string(e), ids)
	if err != nil {
		return nil, err
	}
	off, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	out := make(map[int64]bool, len(off))
	for _, id := range off {
		out[id] = true
	}
	return out, err
}

// Preferences says, for every event, whether it reaches user by email
// (true unless they turned it off).
func Preferences(ctx context.Context, db onceplan.DB, user int64) (map[Event]bool, error) {
	out := make(map[Event]bool, len(Events))
	for _, e := range Events {
		out[e] = true
	}
	rows, err := db.Query(ctx, `SELECT event, enabled FROM notification_preference WHERE user_id = $1`, user)
	if err != nil {
		return nil, err
	}
	var (
		e  string
		on bool
	)
	_, err = pgx.ForEachRow(rows, []any{&e, &on}, func() error {
		out[Event(e)] = on
		return nil
	})
	return out, err
}

// SetPreferences records user's choice for each event in prefs (the
// others stay as they are).
func SetPreferences(ctx context.Context, db onceplan.DB, user int64, prefs map[Event]bool) error {
	for e, on := range prefs {
		if _, err := ParseEvent(string(e)); err != nil {
			return &onceplan.FieldError{Field: "event", Reason: err.Error()}
		}
		if _, err := db.Exec(ctx, `
			INSERT INTO notification_preference (user_id, event, enabled) VALUES ($1, $2, $3)
			ON CONFLICT (user_id, event) DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now()
			WHERE notification_preference.enabled <> EXCLUDED.enabled`, user, string(e), on); err != nil {
			return err
		}
	}
	return nil
}

// The states of a notification: its latest attempt's status, or pending
// before the first.
const (
	StatePending   = "pending"
	StateRetrying  = "retrying"
	StateFailed    = "failed"
	StateDelivered = "delivered"
)

// States lists the states, in the order the admin page and /metrics give
// them.
var States = []string{StatePending, StateRetrying, StateFailed, StateDelivered}

// stateSQL is the SQL expression for notification n's state.
const stateSQL = `coalesce((SELECT a.status FROM notification_attempt a WHERE a.notification_id = n.id ORDER BY a.id DESC LIMIT 1), 'pending')`

// StateCounts counts the notifications of each notifier by state (every
// notifier that has any; notifiers of an earlier configuration too).
func StateCounts(ctx context.Context, db onceplan.DB) (map[string]map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT n.notifier, `+stateSQL+`, count(*) FROM notification n GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	var (
		notifier, state string
		count           int
	)
	_, err = pgx.ForEachRow(rows, []any{&notifier, &state, &count}, func() error {
		if out[notifier] == nil {
			out[notifier] = map[string]int{}
		}
		out[notifier][state] = count
		return nil
	})
	return out, err
}

// Delivery is one notification as the admin page lists it, with its
// latest try.
type Delivery struct {
	ID           int64
	CreatedAt    time.Time
	Event        Event
	CampaignID   string
	CampaignName string
	Notifier     string
	Recipient    string // "" for a webhook
	State        string
	Attempts     int
	// The latest try: when, the HTTP status (0: none), the notifier's
	// answer and the error.
	LastAt     time.Time
	HTTPStatus int
	Answer     string
	Error      string
}

// Undelivered lists the latest notifications not delivered (pending,
// retrying or failed), newest first, at most limit.
func Undelivered(ctx context.Context, db onceplan.DB, limit int) ([]Delivery, error) {
	rows, err := db.Query(ctx, `
		SELECT n.id, n.created_at, n.event, n.campaign_id, n.notifier, n.recipient,
		       coalesce(a.status, 'pending'), (SELECT count(*) FROM notification_attempt x WHERE x.notification_id = n.id),
		       a.created_at, coalesce(a.http_status, 0), coalesce(a.answer, ''), coalesce(a.error, '')
		FROM notification n
		LEFT JOIN LATERAL (SELECT * FROM notification_attempt a WHERE a.notification_id = n.id ORDER BY a.id DESC LIMIT 1) a ON true
		WHERE a.status IS DISTINCT FROM 'delivered'
		ORDER BY n.id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		var last *time.Time
		err := r.Scan(&d.ID, &d.CreatedAt, &d.Event, &d.CampaignID, &d.Notifier, &d.Recipient,
			&d.State, &d.Attempts, &last, &d.HTTPStatus, &d.Answer, &d.Error)
		if last != nil {
			d.LastAt = *last
		}
		return d, err
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(out))
	for _, d := range out {
		ids = append(ids, d.CampaignID)
	}
	names, err := approval.Names(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].CampaignName = names[out[i].CampaignID]
	}
	return out, nil
}

// Email is one email notification as recorded: enough for the audit to
// recognise it in a provider's evidence (its key, MailKey) and to say what
// it is.
type Email struct {
	ID         int64
	CampaignID string
	Event      Event
	Recipient  string
	Key        string
	CreatedAt  time.Time
}

// Emails lists every email notification recorded, oldest first: they go
// through the campaigns' providers, so a maildir or a provider log holds
// them beside the campaigns' own messages.
func Emails(ctx context.Context, db onceplan.DB) ([]Email, error) {
	rows, err := db.Query(ctx, `
		SELECT id, campaign_id::text, event, recipient, created_at FROM notification
		WHERE kind = 'mailto' ORDER BY id`)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Email, error) {
		var (
			e     Email
			event string
		)
		err := r.Scan(&e.ID, &e.CampaignID, &event, &e.Recipient, &e.CreatedAt)
		e.Event = Event(event)
		return e, err
	})
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, e := range out {
		if _, key, err := MailKey(e.ID, e.Recipient); err == nil {
			e.Key = string(key)
			kept = append(kept, e)
		}
	}
	return kept, nil
}
