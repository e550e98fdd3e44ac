package ledger_test

// Each test here tries to break one of the ledger's rules
// (docs/ARCHITECTURE.md, "The ledger: exactly-once lives in PostgreSQL")
// with plain SQL, as a buggy program or a person at psql would, and requires
// PostgreSQL to refuse it.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

// requireSQLState asserts err is a PostgreSQL error with the given SQLSTATE.
func requireSQLState(t *testing.T, err error, code string, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
	require.Equal(t, code, pgErr.Code, "%s: %v", pgErr.Message, msgAndArgs)
}

// effectIn inserts an effect and drives it to state with plain SQL through
// legal steps only, returning its id.
func (b *bundle) effectIn(t *testing.T, key ledger.Key, state ledger.State) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'sql') RETURNING id`, string(key)).Scan(&id))
	respond := func() {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect_response (effect_id, kind, body) VALUES ($1, 'send', 'raw')`, id)
		require.NoError(t, err)
	}
	exec := func(sql string) {
		_, err := b.pool.Exec(b.ctx, sql, id)
		require.NoError(t, err, sql)
	}
	switch state {
	case ledger.StatePending:
	case ledger.StateDone:
		respond()
		exec(`UPDATE effect SET state = 'done', receipt = 'r' WHERE id = $1`)
	case ledger.StateFailed:
		respond()
		exec(`UPDATE effect SET state = 'failed', reason = 'r', failure = 'rejected' WHERE id = $1`)
	case ledger.StateUnknown:
		exec(`UPDATE effect SET state = 'unknown', reason = 'r' WHERE id = $1`)
	case ledger.StateStranded:
		respond()
		exec(`UPDATE effect SET state = 'stranded', reason = 'r' WHERE id = $1`)
	case ledger.StateRevoked:
		respond()
		exec(`UPDATE effect SET state = 'done', receipt = 'r' WHERE id = $1`)
		exec(`UPDATE effect SET state = 'revoked', revoked_by = 'u', revoke_reason = 'r' WHERE id = $1`)
	}
	return id
}

// Rule 1: at most one blocking row per (key, epoch).
func TestRuleOneBlockingRowPerKeyEpoch(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, blocking := range []ledger.State{ledger.StatePending, ledger.StateDone, ledger.StateUnknown, ledger.StateStranded} {
		key := newKey(t)
		b.effectIn(t, key, blocking)
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'intruder')`, string(key))
		requireSQLState(t, err, "23505", "second row beside a %s one", blocking)
	}

	// Two inserts in one statement: still one.
	key := newKey(t)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'a'), ($1, 'b')`, string(key))
	requireSQLState(t, err, "23505")

	// Non-blocking rows do not hold the key.
	for _, free := range []ledger.State{ledger.StateFailed, ledger.StateRevoked} {
		key := newKey(t)
		b.effectIn(t, key, free)
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'next')`, string(key))
		require.NoError(t, err, "a %s row leaves the key free", free)
	}

	// Reviving a failed row into a second blocking one is a transition, and illegal.
	key = newKey(t)
	failed := b.effectIn(t, key, ledger.StateFailed)
	b.effectIn(t, key, ledger.StateDone)
	_, err = b.pool.Exec(b.ctx, `UPDATE effect SET state = 'done' WHERE id = $1`, failed)
	require.Error(t, err)
}

// Rule 2: only the legal transitions.
func TestRuleOnlyLegalTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t)

	all := []ledger.State{ledger.StatePending, ledger.StateDone, ledger.StateUnknown, ledger.StateFailed, ledger.StateStranded, ledger.StateRevoked}
	legal := map[[2]ledger.State]bool{
		{ledger.StatePending, ledger.StateDone}:     true,
		{ledger.StatePending, ledger.StateFailed}:   true,
		{ledger.StatePending, ledger.StateUnknown}:  true,
		{ledger.StatePending, ledger.StateStranded}: true,
		{ledger.StateUnknown, ledger.StateDone}:     true,
		{ledger.StateUnknown, ledger.StateFailed}:   true,
		{ledger.StateDone, ledger.StateRevoked}:     true,
		{ledger.StateStranded, ledger.StateRevoked}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if legal[[2]ledger.State{from, to}] {
				continue
			}
			id := b.effectIn(t, newKey(t), from)
			// Supply every field any transition could want, so only the
			// transition itself is at fault.
			_, err := b.pool.Exec(b.ctx, `
				UPDATE effect SET state = $2,
				  receipt = coalesce(receipt, 'r'), reason = coalesce(reason, 'r'),
				  resolved_by = coalesce(resolved_by, 'u'), resolution = coalesce(resolution, 'r'),
				  revoked_by = coalesce(revoked_by, 'u'), revoke_reason = coalesce(revoke_reason, 'r')
				WHERE id = $1`, id, string(to))
			requireSQLState(t, err, "OP002", "%s -> %s", from, to)
		}
	}

	// And the legal ones go through with what they need.
	for pair := range legal {
		id := b.effectIn(t, newKey(t), pair[0])
		if pair[0] == ledger.StatePending {
			_, err := b.pool.Exec(b.ctx, `INSERT INTO effect_response (effect_id, kind, body) VALUES ($1, 'send', 'x')`, id)
			require.NoError(t, err)
		}
		_, err := b.pool.Exec(b.ctx, `
			UPDATE effect SET state = $2::effect_state, receipt = coalesce(receipt, 'r'), reason = coalesce(reason, 'r'),
			  resolved_by = CASE WHEN state = 'unknown' THEN 'u' END, resolution = CASE WHEN state = 'unknown' THEN 'r' END,
			  revoked_by = CASE WHEN $2::text = 'revoked' THEN 'u' END, revoke_reason = CASE WHEN $2::text = 'revoked' THEN 'r' END,
			  failure = CASE WHEN $2::text = 'failed' THEN 'retry' END
			WHERE id = $1`, id, string(pair[1]))
		require.NoError(t, err, "%s -> %s", pair[0], pair[1])
	}

	// Every attempt is born pending.
	for _, st := range all[1:] {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, owner, state, receipt, reason) VALUES ($1, 'sql', $2, 'r', 'r')`, string(newKey(t)), string(st))
		requireSQLState(t, err, "OP002", "insert as %s", st)
	}

	// An unknown is settled only by a named resolver.
	id := b.effectIn(t, newKey(t), ledger.StateUnknown)
	_, err := b.pool.Exec(b.ctx, `UPDATE effect SET state = 'failed' WHERE id = $1`, id)
	requireSQLState(t, err, "OP004")

	// A revocation needs who and why.
	id = b.effectIn(t, newKey(t), ledger.StateDone)
	_, err = b.pool.Exec(b.ctx, `UPDATE effect SET state = 'revoked' WHERE id = $1`, id)
	requireSQLState(t, err, "OP004")

	// Ledger rows are never deleted, nor the table emptied.
	_, err = b.pool.Exec(b.ctx, `DELETE FROM effect WHERE id = $1`, id)
	requireSQLState(t, err, "OP001")
	_, err = b.pool.Exec(b.ctx, `TRUNCATE effect CASCADE`)
	requireSQLState(t, err, "OP001")

	// Identity columns never change.
	for _, set := range []string{"key = 'v1:" + fmt.Sprintf("%064d", 0) + "'", "attempt = 9", "owner = 'other'", "job_id = 99", "created_at = now() - interval '1 day'"} {
		_, err = b.pool.Exec(b.ctx, `UPDATE effect SET `+set+` WHERE id = $1`, id)
		requireSQLState(t, err, "OP003", set)
	}
}

// Rule 3: the raw provider response is written once, and committed before a
// worker's verdict.
func TestRuleRawResponseWrittenOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.effectIn(t, newKey(t), ledger.StatePending)

	// No verdict without the answer it is drawn from.
	_, err := b.pool.Exec(b.ctx, `UPDATE effect SET state = 'done', receipt = 'r' WHERE id = $1`, id)
	requireSQLState(t, err, "OP004")

	var rid int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO effect_response (effect_id, kind, body) VALUES ($1, 'send', '250 ok') RETURNING id`, id).Scan(&rid))

	_, err = b.pool.Exec(b.ctx, `UPDATE effect_response SET body = 'forged' WHERE id = $1`, rid)
	requireSQLState(t, err, "OP001")
	_, err = b.pool.Exec(b.ctx, `DELETE FROM effect_response WHERE id = $1`, rid)
	requireSQLState(t, err, "OP001")
	_, err = b.pool.Exec(b.ctx, `TRUNCATE effect_response`)
	requireSQLState(t, err, "OP001")

	_, err = b.pool.Exec(b.ctx, `UPDATE effect SET state = 'done', receipt = 'r' WHERE id = $1`, id)
	require.NoError(t, err)

	// The recorded outcome never changes either.
	_, err = b.pool.Exec(b.ctx, `UPDATE effect SET state = 'revoked', receipt = 'other', revoked_by = 'u', revoke_reason = 'r' WHERE id = $1`, id)
	requireSQLState(t, err, "OP001")

	var body []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT body FROM effect_response WHERE id = $1`, rid).Scan(&body))
	require.Equal(t, "250 ok", string(body))
}

// Keys are 'v1:' and 64 lower-case hex digits wherever the database keeps
// one (the ledger, the bumps, the frozen targets), whoever writes them:
// every near miss is refused, and the well-formed key is taken.
func TestRuleKeysAreWellFormed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hex64 := strings.Repeat("0123456789abcdef", 4)
	bad := map[string]string{
		"63 digits":            "v1:" + hex64[:63],
		"65 digits":            "v1:" + hex64 + "0",
		"upper-case digit":     "v1:" + hex64[:63] + "A",
		"not a hex digit":      "v1:" + hex64[:63] + "g",
		"two-byte character":   "v1:" + hex64[:62] + "é",
		"other version":        "v2:" + hex64,
		"upper-case prefix":    "V1:" + hex64,
		"trailing newline":     "v1:" + hex64[:63] + "\n",
		"leading space":        " v1:" + hex64[:63],
		"no prefix, 67 digits": hex64 + "012",
		"empty":                "",
	}
	for name, key := range bad {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, owner) VALUES ($1, 'sql')`, key)
		requireSQLState(t, err, "23514", "effect, %s", name)
		_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 1, 'human', 'u', 'r')`, key)
		requireSQLState(t, err, "23514", "effect_bump, %s", name)
		_, err = b.pool.Exec(b.ctx, `INSERT INTO target (list_id, ordinal, target, key, line) VALUES (-1, 1, 'ann@example.com', $1, 2)`, key)
		requireSQLState(t, err, "23514", "target, %s", name)
	}

	for table, sql := range map[string]string{
		"effect":      `INSERT INTO effect (key, owner) VALUES ($1, 'sql')`,
		"effect_bump": `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 1, 'human', 'u', 'r')`,
	} {
		_, err := b.pool.Exec(b.ctx, sql, string(newKey(t)))
		require.NoError(t, err, table)
	}
}

// Rule 5: an epoch above 0 only behind a recorded bump.
func TestRuleEpochNeedsRecordedBump(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := newKey(t)

	_, err := b.pool.Exec(b.ctx, `INSERT INTO effect (key, epoch, owner) VALUES ($1, 1, 'sql')`, string(key))
	requireSQLState(t, err, "23503")

	id := b.effectIn(t, key, ledger.StateDone)
	_, err = b.pool.Exec(b.ctx, `UPDATE effect SET epoch = 1 WHERE id = $1`, id)
	requireSQLState(t, err, "OP003")

	// Bumps need who and why, go one at a time, and stay as recorded.
	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 1, 'human', 'u', '')`, string(key))
	requireSQLState(t, err, "23514")
	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 2, 'human', 'u', 'skip one')`, string(key))
	requireSQLState(t, err, "OP005")
	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 1, 'model', 'gpt', 'because')`, string(key))
	requireSQLState(t, err, "23514")
	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, policy, reason) VALUES ($1, 1, 'policy', 'p', 'unregistered', 'r')`, string(key))
	requireSQLState(t, err, "23503")

	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason) VALUES ($1, 1, 'human', 'user:op', 'resend the corrected text')`, string(key))
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO effect (key, epoch, owner) VALUES ($1, 1, 'sql')`, string(key))
	require.NoError(t, err)

	_, err = b.pool.Exec(b.ctx, `UPDATE effect_bump SET reason = 'rewritten' WHERE key = $1`, string(key))
	requireSQLState(t, err, "OP001")
	_, err = b.pool.Exec(b.ctx, `DELETE FROM effect_bump WHERE key = $1`, string(key))
	requireSQLState(t, err, "OP001")
	_, err = b.pool.Exec(b.ctx, `TRUNCATE effect_bump CASCADE`)
	requireSQLState(t, err, "OP001")
}

// Timestamps come from the database: a client cannot backdate a record.
func TestTimestampsComeFromTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var age float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		WITH e AS (INSERT INTO effect (key, owner, created_at, updated_at) VALUES ($1, 'sql', '2001-01-01', '2001-01-01') RETURNING created_at)
		SELECT extract(epoch FROM now() - created_at) FROM e`, string(newKey(t))).Scan(&age))
	require.Less(t, age, 60.0)

	// A raw answer's time too (its trigger runs only when a client
	// supplies a time; the column's default is the database clock).
	var answered []float64
	for _, at := range []string{"2001-01-01", "2999-01-01"} {
		require.NoError(t, b.pool.QueryRow(b.ctx, `
			WITH e AS (INSERT INTO effect (key, owner) VALUES ($1, 'sql') RETURNING id),
			r AS (INSERT INTO effect_response (effect_id, kind, body, created_at) SELECT id, 'send', '250 ok', $2::timestamptz FROM e RETURNING created_at)
			SELECT abs(extract(epoch FROM now() - created_at)) FROM r`, string(newKey(t)), at).Scan(&age))
		answered = append(answered, age)
	}
	require.Equal(t, []float64{0, 0}, answered, "a raw answer is stamped with the transaction's clock")
}
