package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// compactOutput is `compact --json`.
type compactOutput struct {
	Tables       []compactTable `json:"tables"`
	Dropped      []string       `json:"dropped"`
	ForSuperuser []string       `json:"for_superuser"`
}

type compactTable struct {
	Table       string `json:"table"`
	BytesBefore int64  `json:"index_bytes_before"`
	BytesAfter  int64  `json:"index_bytes_after"`
}

// runCompact rebuilds the indexes of the ledger's hot tables once archived
// campaigns have left them mostly empty (docs/ARCHITECTURE.md, "The
// archive"). Only the tables' owner may, so this connects as the schema's
// owner, like policy add; servers and workers go on meanwhile.
func runCompact(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	var db dbFlags
	db.registerOwner(fs, env)
	asJSON := fs.Bool("json", false, "print what was rebuilt as JSON")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	return withOwnerDB(ctx, env, db, "compact", func(pool onceplan.DB) error {
		c, err := ledger.NewStore(pool).CompactHotTables(ctx)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == ledger.SQLStateInsufficientPrivilege:
			return notOwnerErr(ctx, pool, "compact", "rebuild the ledger's indexes")
		case err != nil:
			return fmt.Errorf("compact: %w", err)
		}
		return printCompacted(env, c, *asJSON)
	})
}

func printCompacted(env Env, c ledger.Compacted, asJSON bool) error {
	// Empty lists, not null, in the JSON.
	out := compactOutput{Tables: []compactTable{}, Dropped: append([]string{}, c.Dropped...), ForSuperuser: append([]string{}, c.ForSuperuser...)}
	// Said on standard error, in JSON mode too: a person has a step to take.
	for _, index := range c.ForSuperuser {
		fmt.Fprintf(env.Stderr, "compact: %s is the invalid copy of a TOAST index an interrupted compact left, which only a superuser may drop: as one, run DROP INDEX CONCURRENTLY %s;\n", index, index)
	}
	for _, t := range c.Tables {
		out.Tables = append(out.Tables, compactTable{Table: t.Table, BytesBefore: t.Before, BytesAfter: t.After})
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, index := range c.Dropped {
		fmt.Fprintf(env.Stdout, "dropped %s, left by an interrupted compact\n", index)
	}
	for _, t := range c.Tables {
		fmt.Fprintf(env.Stdout, "rebuilt the indexes of %s: %s, were %s\n", t.Table, mebibytes(t.After), mebibytes(t.Before))
	}
	return nil
}

// mebibytes is n bytes in MiB, to one decimal.
func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
