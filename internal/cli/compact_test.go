package cli

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit/audittest"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/ledger"
)

// TestCompactCommand rebuilds the hot tables' indexes after an archive, as
// the schema's owner: the indexes shrink to the rows still there, every
// index is the one it was (name and definition), the invalid copy an
// interrupted rebuild left is dropped, and the audits answer as before.
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

	// What an interrupted REINDEX CONCURRENTLY leaves: an invalid index
	// named *_ccnew, kept up to date on every write and never read.
	_, err = admin.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY effect_key_history_ccnew ON effect (state)`)
	require.Error(t, err, "the state repeats, so the unique build fails and leaves the index invalid")
	require.Equal(t, []string{"effect_key_history_ccnew"}, invalidIndexes(t, admin))

	indexes := func() map[string]string {
		rows, err := admin.Query(ctx, `SELECT indexname::text, indexdef FROM pg_indexes
			WHERE schemaname = current_schema() AND tablename IN ('effect', 'effect_response', 'effect_bump', 'effect_batch', 'effect_batch_member', 'effect_batch_response')
			  AND indexname <> 'effect_key_history_ccnew'`)
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
	require.Equal(t, "compact: the database role onceplan_app may not rebuild the ledger's indexes: use the URL of the schema's owner role (onceplan_owner), as for `onceplan migrate` (see the README, \"Database roles\")", r.err.Error())
	require.Equal(t, []string{"effect_key_history_ccnew"}, invalidIndexes(t, admin))
	_, err = appPool.Exec(ctx, `REINDEX TABLE effect`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, sqlstateInsufficientPrivilege, pgErr.Code, pgErr.Message)

	r = owner.run(t, runCompact, "", "--json")
	require.NoError(t, r.err, r.stderr)
	var out compactOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, []string{"effect_key_history_ccnew"}, out.Dropped)
	var tables []string
	for _, tb := range out.Tables {
		tables = append(tables, tb.Table)
	}
	require.Equal(t, []string{"effect", "effect_batch", "effect_batch_member", "effect_batch_response", "effect_bump", "effect_response"}, tables,
		"every table with an _archive twin")
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
func invalidIndexes(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE NOT i.indisvalid ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}
