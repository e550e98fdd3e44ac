package notify_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// requireSQLState runs sql in a transaction that is rolled back and
// requires PostgreSQL to refuse it with code.
func requireSQLState(t *testing.T, pool *pgxpool.Pool, code, sql string) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, err = tx.Exec(ctx, sql)
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s: want SQLSTATE %s, got %v", sql, code, err)
	require.Equalf(t, code, pgErr.Code, "%s: %s", sql, pgErr.Message)
}

// TestNotificationRecordsAreWriteOnce: what a notifier was sent and what
// it answered is never changed. The application role may only read and
// append (PostgreSQL refuses it the privilege, 42501); the owner, who
// holds every privilege, is refused by the triggers (OP001).
func TestNotificationRecordsAreWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	urls := pgtest.Database(t)
	app := pgtest.NewPool(t, urls.App)
	owner := pgtest.NewPool(t, urls.Owner)

	// As the running system writes them, as the application role.
	for _, sql := range []string{
		`INSERT INTO app_user (email, roles) VALUES ('pat@example.com', '{proposer}'), ('amy@example.com', '{approver}')`,
		`INSERT INTO campaign (name, provider, created_by) SELECT 'spring', 'outbox', id FROM app_user WHERE email = 'pat@example.com'`,
		`INSERT INTO campaign_event (campaign_id, action, reason) SELECT id, 'create', 'seed' FROM campaign`,
		`INSERT INTO notification (event, campaign_event_id, campaign_id, notifier, kind, recipient, user_id, subject, body)
		 SELECT 'submitted', e.id, e.campaign_id, 'ops', 'mailto', u.email, u.id, 'Approval needed', 'Review it'
		 FROM campaign_event e, app_user u WHERE u.email = 'amy@example.com'`,
		`INSERT INTO notification (event, campaign_event_id, campaign_id, notifier, kind, subject, body)
		 SELECT 'submitted', e.id, e.campaign_id, 'hook', 'webhook', 'Approval needed', '{"text":"Approval needed"}' FROM campaign_event e`,
		`INSERT INTO notification_attempt (notification_id, attempt, status, http_status, answer, error, duration_ms)
		 SELECT id, 1, 'retrying', 500, 'down', 'answered 500 Internal Server Error', 12 FROM notification WHERE kind = 'webhook'`,
		`INSERT INTO notification_attempt (notification_id, attempt, status, http_status, answer, duration_ms)
		 SELECT id, 2, 'delivered', 200, 'ok', 9 FROM notification WHERE kind = 'webhook'`,
		`INSERT INTO notification_attention (campaign_id, kind, unknown, stranded, failed) SELECT id, 'notified', 50, 0, 0 FROM campaign`,
		`INSERT INTO notification_preference (user_id, event, enabled) SELECT id, 'submitted', false FROM app_user WHERE email = 'amy@example.com'`,
		// A preference is a setting: the user changes it.
		`UPDATE notification_preference SET enabled = true, updated_at = now()`,
	} {
		_, err := app.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}

	for _, sql := range []string{
		`UPDATE notification SET body = 'rewritten'`,
		`UPDATE notification SET recipient = 'mallory@example.com' WHERE kind = 'mailto'`,
		`DELETE FROM notification`,
		`TRUNCATE notification CASCADE`,
		`UPDATE notification_attempt SET status = 'delivered'`,
		`UPDATE notification_attempt SET answer = 'forged'`,
		`DELETE FROM notification_attempt`,
		`TRUNCATE notification_attempt`,
		`UPDATE notification_attention SET unknown = 0`,
		`DELETE FROM notification_attention`,
		`TRUNCATE notification_attention CASCADE`,
		`DELETE FROM notification_preference`,
	} {
		requireSQLState(t, app, "42501", sql)
	}
	for _, sql := range []string{
		`UPDATE notification SET body = 'rewritten'`,
		`DELETE FROM notification WHERE kind = 'mailto'`,
		`UPDATE notification_attempt SET answer = 'forged'`,
		`DELETE FROM notification_attempt`,
		`TRUNCATE notification_attempt`,
		`UPDATE notification_attention SET unknown = 0`,
		`DELETE FROM notification_attention`,
	} {
		requireSQLState(t, owner, "OP001", sql)
	}

	// One notification per source, notifier and recipient; one delivered
	// try per notification.
	requireSQLState(t, app, "23505", `INSERT INTO notification (event, campaign_event_id, campaign_id, notifier, kind, recipient, subject, body)
		SELECT event, campaign_event_id, campaign_id, notifier, kind, recipient, subject, body FROM notification WHERE kind = 'mailto'`)
	requireSQLState(t, app, "23505", `INSERT INTO notification_attempt (notification_id, attempt, status, duration_ms)
		SELECT id, 3, 'delivered', 1 FROM notification WHERE kind = 'webhook'`)
	// Exactly one source; a webhook has no recipient address.
	requireSQLState(t, app, "23514", `INSERT INTO notification (event, campaign_id, notifier, kind, subject, body)
		SELECT 'attention', id, 'hook', 'webhook', 's', 'b' FROM campaign`)
	requireSQLState(t, app, "23514", `INSERT INTO notification (event, campaign_event_id, campaign_id, notifier, kind, recipient, subject, body)
		SELECT 'submitted', e.id, e.campaign_id, 'hook2', 'webhook', 'x@example.com', 's', 'b' FROM campaign_event e`)

	var bodies []string
	rows, err := app.Query(ctx, `SELECT body FROM notification ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var b string
		require.NoError(t, rows.Scan(&b))
		bodies = append(bodies, b)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"Review it", `{"text":"Approval needed"}`}, bodies, "nothing was changed")
}
