package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Compacted is what rebuilding the hot tables' indexes did: each table's
// indexes' size before and after, in bytes, and the leftovers of an
// interrupted rebuild it dropped.
type Compacted struct {
	Tables  []CompactedTable
	Dropped []string
	// ForSuperuser names the leftovers in schema pg_toast, which only a
	// superuser may drop (DROP INDEX CONCURRENTLY name): the owner may not
	// even name them.
	ForSuperuser []string
}

// SQLStateInsufficientPrivilege is PostgreSQL's refusal of a statement the
// role holds no privilege for.
const SQLStateInsufficientPrivilege = "42501"

// CompactedTable is one hot table's indexes before and after.
type CompactedTable struct {
	Table         string
	Before, After int64
}

// HotTables lists the ledger's hot tables: those archive_campaign()
// empties of a finished campaign's rows, each with a twin of the same
// shape named with "_archive" (migrations 0034, 0035), which holds every
// column the hot table has (campaign_archive, a register of archived
// campaigns, is no twin of campaign). The schema is the one author of the
// list.
func (s *Store) HotTables(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `
		SELECT h.relname::text FROM pg_class h
		JOIN pg_class a ON a.relname = h.relname || '_archive' AND a.relnamespace = h.relnamespace AND a.relkind = 'r'
		WHERE h.relkind = 'r' AND h.relnamespace = current_schema()::regnamespace
		  AND NOT EXISTS (
		      SELECT FROM pg_attribute c WHERE c.attrelid = h.oid AND c.attnum > 0 AND NOT c.attisdropped
		      AND NOT EXISTS (SELECT FROM pg_attribute ac WHERE ac.attrelid = a.oid AND ac.attname = c.attname AND ac.atttypid = c.atttypid AND NOT ac.attisdropped))
		ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CompactHotTables rebuilds the indexes of the ledger's hot tables
// (REINDEX TABLE CONCURRENTLY) once archived campaigns have left them
// mostly empty (docs/ARCHITECTURE.md, "The archive"): VACUUM makes the
// space reusable but keeps the files, so a new campaign's keys, which are
// hashes, land on leaves spread over the whole of them; rebuilt, the
// indexes hold only the rows still there. Reads and writes go on
// meanwhile: CONCURRENTLY builds each new index beside the old one and
// swaps them.
//
// Only the tables' owner may rebuild them (migrations.OwnerRole): the
// store's pool must be the owner's. A rebuild that was interrupted
// (killed, its connection lost) leaves an invalid copy of an index behind,
// named with "_ccnew" or "_ccold" (for the table's TOAST index too), which
// PostgreSQL keeps up to date but never reads; this drops those first, so
// compacting again finishes the job, but for a TOAST index's copy, which
// only a superuser may drop: those it names in ForSuperuser.
func (s *Store) CompactHotTables(ctx context.Context) (Compacted, error) {
	var c Compacted
	tables, err := s.HotTables(ctx)
	if err != nil {
		return c, err
	}
	// The table's TOAST table's index is rebuilt with its own, so it may be
	// left over too (in schema pg_toast).
	rows, err := s.db.Query(ctx, `
		SELECT i.indexrelid::regclass::text FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_class t ON t.relname = ANY($1) AND t.relnamespace = current_schema()::regnamespace
		                AND i.indrelid IN (t.oid, t.reltoastrelid)
		WHERE NOT i.indisvalid AND ic.relname ~ '_cc(new|old)[0-9]*$'
		ORDER BY 1`, tables)
	if err != nil {
		return c, err
	}
	leftovers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return c, err
	}
	for _, index := range leftovers {
		_, err := s.db.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+index)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			c.Dropped = append(c.Dropped, index)
		case strings.HasPrefix(index, "pg_toast.") && errors.As(err, &pgErr) && pgErr.Code == SQLStateInsufficientPrivilege:
			// Only a superuser may name what is in schema pg_toast.
			c.ForSuperuser = append(c.ForSuperuser, index)
		default:
			return c, fmt.Errorf("dropping %s, left by an interrupted rebuild: %w", index, err)
		}
	}
	size := func(table string) (n int64, err error) {
		err = s.db.QueryRow(ctx, `SELECT pg_indexes_size(format('%I', $1::text)::regclass)`, table).Scan(&n)
		return n, err
	}
	for _, table := range tables {
		t := CompactedTable{Table: table}
		if t.Before, err = size(table); err != nil {
			return c, err
		}
		// Not in a transaction: PostgreSQL runs REINDEX CONCURRENTLY only
		// outside one.
		if _, err := s.db.Exec(ctx, `REINDEX TABLE CONCURRENTLY `+pgx.Identifier{table}.Sanitize()); err != nil {
			return c, fmt.Errorf("rebuilding the indexes of %s: %w", table, err)
		}
		if t.After, err = size(table); err != nil {
			return c, err
		}
		c.Tables = append(c.Tables, t)
	}
	return c, nil
}
