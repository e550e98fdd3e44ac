package migrations_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/ledger"
)

// firstUse records tool's first use as the server does, and returns a
// single effect's key and identity for event on it.
func (h *toolHostile) firstUse(t *testing.T, tool, event string) (string, string) {
	t.Helper()
	_, err := h.app.Exec(h.ctx, `INSERT INTO tool_policy (tool, registered_by) VALUES ($1, 'agent:pat@example.com') ON CONFLICT DO NOTHING`, tool)
	require.NoError(t, err)
	key, identity, err := toolcall.KeyOf(h.mallory.UserID, ledger.KeyInput{Event: event, Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "vendor-7"}})
	require.NoError(t, err)
	return string(key), string(identity)
}

// TestHostileToolAttemptUnderAnOldPolicy: a transaction of the
// application role whose snapshot predates the admin's registration of a
// policy that requires approval records an attempt — which an old
// snapshot would put under the first-use policy, without approval.
// PostgreSQL refuses it at every isolation level: at READ COMMITTED the
// policy is read after a lock every registration takes; the others may
// not record an attempt at all.
func TestHostileToolAttemptUnderAnOldPolicy(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	for i, iso := range isolationLevels {
		tool := fmt.Sprintf("pay.send-%d", i)
		key, identity := h.firstUse(t, tool, "invoice-42")

		// The old snapshot: a real second connection of the role, in a
		// transaction that read the policies before the registration.
		old, err := h.app.Acquire(h.ctx)
		require.NoError(t, err)
		tx, err := old.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		var n int
		require.NoError(t, tx.QueryRow(h.ctx, `SELECT count(*) FROM tool_policy WHERE tool = $1`, tool).Scan(&n))
		require.Equal(t, 1, n)

		_, err = h.owner.Exec(h.ctx, `INSERT INTO tool_policy (tool, approval_required, first_use, description, registered_by)
			VALUES ($1, true, false, 'pays a vendor', 'admin')`, tool)
		require.NoError(t, err)
		before := h.contents(t)

		stmts := holdKey(tool, "invoice-42", key, identity)[1:]
		var pgErr *pgconn.PgError
		for _, s := range stmts {
			if _, err = tx.Exec(h.ctx, s); err != nil {
				break
			}
		}
		if err == nil {
			err = tx.Commit(h.ctx)
		} else {
			require.NoError(t, tx.Rollback(h.ctx))
		}
		old.Release()
		require.Truef(t, errors.As(err, &pgErr), "at %s: an attempt under the first-use policy after the admin required approval: want PostgreSQL to refuse, got %v", iso, err)
		require.Containsf(t, []string{"OP007", "40001"}, pgErr.Code, "at %s: %s", iso, pgErr.Message)
		require.Equal(t, before, h.contents(t), "at %s: nothing changed", iso)
		var attempts int
		require.NoError(t, h.admin.QueryRow(h.ctx, `SELECT count(*) FROM tool_attempt WHERE key = $1`, key).Scan(&attempts))
		require.Zero(t, attempts, "at %s", iso)
	}
}

// TestHostileToolAttemptRacingARegistration: at READ COMMITTED, an
// attempt recorded while the admin's registration (which requires
// approval) is in progress waits for it, and is refused once it commits:
// a lock decides, not which statement read first.
func TestHostileToolAttemptRacingARegistration(t *testing.T) {
	t.Parallel()
	h := newToolHostile(t)
	key, identity := h.firstUse(t, "pay.send", "invoice-42")
	reg, err := h.owner.Begin(h.ctx)
	require.NoError(t, err)
	defer reg.Rollback(h.ctx)
	var regPID int
	require.NoError(t, reg.QueryRow(h.ctx, `SELECT pg_backend_pid()`).Scan(&regPID))
	_, err = reg.Exec(h.ctx, `INSERT INTO tool_policy (tool, approval_required, first_use, registered_by) VALUES ('pay.send', true, false, 'admin')`)
	require.NoError(t, err)
	before := h.contents(t)

	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(h.ctx, h.app, func(tx pgx.Tx) error {
			for _, s := range holdKey("pay.send", "invoice-42", key, identity)[1:] {
				if _, err := tx.Exec(h.ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	await.Until(t, 10*time.Second, "the attempt to wait for the registration's lock", func() bool {
		var waiting bool
		return h.admin.QueryRow(h.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, regPID).Scan(&waiting) == nil && waiting
	})
	require.NoError(t, reg.Commit(h.ctx))
	err = await.Recv(t, done, 10*time.Second, "the attempt's answer")
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "want PostgreSQL to refuse the attempt, got %v", err)
	require.Equal(t, "OP007", pgErr.Code, pgErr.Message)
	require.Contains(t, pgErr.Message, "requires a person's approval")
	after := h.contents(t)
	delete(before, "tool_policy")
	delete(after, "tool_policy")
	require.Equal(t, before, after, "nothing but the registration changed")
}
