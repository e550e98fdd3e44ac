package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// TestCompactCommand rebuilds the hot tables' indexes after an archive, as
// the schema's owner: the indexes shrink to the rows still there, every
// index is the one it was (name and definition), the invalid copies an
// interrupted rebuild left are dropped, and the audits answer as before.
// The application role is refused in one sentence, with nothing changed,
// and PostgreSQL refuses it the rebuild in plain SQL.
func TestCompactCommand(t *testing.T) {
	t.Parallel()
	urls := pgtest.Database(t)
	ctx := context.Background()
	admin, appPool := pgtest.NewPool(t, urls.Admin), pgtest.NewPool(t, urls.App)
	owner := &cliBundle{ctx: ctx, url: urls.Owner, pool: admin}
	app := &cliBundle{ctx: ctx, url: urls.App, pool: appPool}

	archived, err := audittest.Seed(ctx, admin, 2000)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(ctx, admin, archived))
	kept, err := audittest.Seed(ctx, admin, 500)
	require.NoError(t, err)
	require.NoError(t, audittest.Finish(ctx, admin, kept))
	_, err = ledger.NewStore(appPool).ArchiveCampaign(ctx, archived.CampaignID, "test")
	require.NoError(t, err)

	leftovers := interruptedReindex(t, admin, "effect")
	require.NotEmpty(t, leftovers)
	for _, index := range leftovers {
		require.Regexp(t, `^(effect\w*|pg_toast\.pg_toast_\d+_index)_ccnew$`, index)
	}

	// Every table with an _archive twin.
	hot := []string{"effect", "effect_batch", "effect_batch_member", "effect_batch_response", "effect_bump", "effect_response"}
	indexes := func() map[string]string {
		rows, err := admin.Query(ctx, `SELECT indexname::text, indexdef FROM pg_indexes
			WHERE schemaname = current_schema() AND tablename = ANY($1) AND indexname !~ '_ccnew$'`, hot)
		require.NoError(t, err)
		m := map[string]string{}
		for rows.Next() {
			var name, def string
			require.NoError(t, rows.Scan(&name, &def))
			m[name] = def
		}
		require.NoError(t, rows.Err())
		return m
	}
	definitions := indexes()
	auditBefore := []string{owner.run(t, runAudit, "", archived.CampaignID, "--json").stdout, owner.run(t, runAudit, "", kept.CampaignID, "--json").stdout}

	// The application role: refused, in one sentence, before anything changed.
	r := app.run(t, runCompact, "")
	requireOneLine(t, r.err)
	require.Equal(t, "compact: the database role onceplan_app may not rebuild the ledger's indexes: use the URL of the schema's owner role (onceplan_owner), as for `onceplan migrate` (see docs/guide/secure.md, \"Database roles\")", r.err.Error())
	require.Equal(t, leftovers, invalidIndexes(t, admin))
	_, err = appPool.Exec(ctx, `REINDEX TABLE effect`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, ledger.SQLStateInsufficientPrivilege, pgErr.Code, pgErr.Message)

	r = owner.run(t, runCompact, "", "--json")
	require.NoError(t, r.err, r.stderr)
	var out compactOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	var toast, own []string
	for _, index := range leftovers {
		if strings.HasPrefix(index, "pg_toast.") {
			toast = append(toast, index)
		} else {
			own = append(own, index)
		}
	}
	require.NotEmpty(t, own)
	require.Equal(t, own, out.Dropped)
	// The owner may not name a TOAST index: a superuser drops its copy,
	// with the statement compact gave.
	require.Equal(t, toast, out.ForSuperuser)
	for _, index := range toast {
		statement := "DROP INDEX CONCURRENTLY " + index
		require.Contains(t, r.stderr, "compact: "+index+" is the invalid copy of a TOAST index an interrupted compact left, which only a superuser may drop: as one, run "+statement+";\n")
		_, err := admin.Exec(ctx, statement)
		require.NoError(t, err)
	}
	var tables []string
	for _, tb := range out.Tables {
		tables = append(tables, tb.Table)
	}
	require.Equal(t, hot, tables, "every table with an _archive twin")
	require.Less(t, out.Tables[0].BytesAfter, out.Tables[0].BytesBefore, "effect's indexes hold only the campaign still there")
	require.Less(t, out.Tables[5].BytesAfter, out.Tables[5].BytesBefore, "so do effect_response's")
	require.Empty(t, invalidIndexes(t, admin))
	require.Equal(t, definitions, indexes(), "the same indexes, rebuilt")
	auditAfter := []string{owner.run(t, runAudit, "", archived.CampaignID, "--json").stdout, owner.run(t, runAudit, "", kept.CampaignID, "--json").stdout}
	require.Equal(t, auditBefore, auditAfter)

	// Again: nothing left over, and the same tables.
	r = owner.run(t, runCompact, "")
	require.NoError(t, r.err, r.stderr)
	require.Regexp(t, `^(rebuilt the indexes of effect\w*: [0-9.]+ MiB, were [0-9.]+ MiB\n){6}$`, r.stdout)
}

// invalidIndexes names the invalid indexes of the database pool reaches.
func invalidIndexes(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// interruptedReindex leaves what a REINDEX TABLE CONCURRENTLY of table
// that was interrupted leaves, by interrupting one: a writer's open
// transaction holds the rebuild after it has created its new indexes, and
// the rebuild is cancelled there. It returns the invalid indexes left.
func interruptedReindex(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	ctx := context.Background()
	writer, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	_, err = writer.Exec(ctx, `LOCK TABLE `+table+` IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `REINDEX TABLE CONCURRENTLY `+table)
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')
			AND EXISTS (SELECT FROM pg_class WHERE relname ~ '_ccnew$')`, pid).Scan(&waiting))
		if waiting {
			break
		}
		require.True(t, time.Now().Before(deadline), "the rebuild never waited for the writer")
		time.Sleep(10 * time.Millisecond)
	}
	_, err = pool.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid)
	require.NoError(t, err)
	require.ErrorContains(t, <-done, "canceling statement due to user request")
	return invalidIndexes(t, pool)
}
