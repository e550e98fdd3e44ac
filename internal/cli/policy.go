package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/migrations"
)

// registerOwner is register for a command that connects as the schema's
// owner, as migrate does (policy add, tool add).
func (d *dbFlags) registerOwner(fs *flag.FlagSet, env Env) {
	d.register(fs, env)
	fs.Lookup("database-url").Usage = "PostgreSQL URL of the schema's owner role (" + migrations.OwnerRole +
		"), as for migrate (default $DATABASE_URL; empty: the embedded default under --data-dir, as its owner)"
}

// withOwnerDB runs f on a short-lived pool of the schema's owner
// (app.OpenOwnerDB), as withDB does on the application role's; command
// names the command in an error opening it.
func withOwnerDB(ctx context.Context, env Env, db dbFlags, command string, f func(pool onceplan.DB) error) error {
	// Only warnings, as for the other scriptable commands (withDB).
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := app.OpenOwnerDB(ctx, app.DBOptions{URL: db.databaseURL, DataDir: db.dataDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	err = f(d.Pool)
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return errors.Join(err, d.Close(closeCtx))
}

func runPolicy(ctx context.Context, env Env, args []string) error {
	return dispatch(ctx, env, "policy", []subcommand{
		{"add", "register a bump policy, as the schema's owner role like migrate (policies are write-once)", runPolicyAdd},
		{"list", "list the registered bump policies", runPolicyList},
	}, args)
}

// runPolicyAdd registers a bump policy. The application role may read
// policies and bump under them but never add one (migration 0014;
// docs/ARCHITECTURE.md, "The guarantee against the server's own role"), so
// this connects as the schema's owner: on the embedded default by itself, as
// migrations do; otherwise through the owner's URL.
func runPolicyAdd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("policy add", flag.ContinueOnError)
	var db dbFlags
	db.registerOwner(fs, env)
	name := fs.String("name", "", "the policy's name, as bumps cite it: 1 to 64 of a-z, 0-9, _, . and -, starting with a letter or digit (required)")
	description := fs.String("description", "", "what the policy bumps and when, e.g. \"one reminder per calendar month\" (required)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	// Refuse bad input before starting or reaching a database.
	desc := strings.TrimSpace(*description)
	switch {
	case *name == "":
		return errors.New("policy add: --name is required")
	case !ledger.ValidPolicyName(*name):
		return fmt.Errorf("policy add: --name %q is not a policy name: use 1 to 64 lower-case letters, digits, _, . and -, starting with a letter or digit", *name)
	case desc == "":
		return errors.New("policy add: --description is required (say what the policy bumps and when)")
	}
	return withOwnerDB(ctx, env, db, "policy add", func(pool onceplan.DB) error {
		who := cliActor()
		err := explainPolicyAdd(ctx, pool, *name, ledger.NewStore(pool).RegisterPolicy(ctx, *name, desc, who))
		if err == nil {
			fmt.Fprintf(env.Stdout, "registered bump policy %s (by %s)\n", *name, who)
		}
		return err
	})
}

// explainPolicyAdd turns RegisterPolicy's refusals into one sentence each.
func explainPolicyAdd(ctx context.Context, pool onceplan.DB, name string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, onceplan.ErrConflict):
		return fmt.Errorf("policy add: a bump policy named %q already exists, and policies are write-once: register the new one under another name", name)
	case errors.As(err, &pgErr) && pgErr.Code == ledger.SQLStateInsufficientPrivilege:
		return notOwnerErr(ctx, pool, "policy add", "register bump policies")
	}
	return fmt.Errorf("policy add: %w", err)
}

// notOwnerErr says that the role db connects as may not do what only the
// schema's owner does (`policy add`, `tool add`, `compact`), naming it:
// what is the deed, as "register bump policies".
func notOwnerErr(ctx context.Context, db onceplan.DB, command, what string) error {
	role := "of this URL"
	var current string
	if db.QueryRow(ctx, `SELECT current_user`).Scan(&current) == nil {
		role = current
	}
	return fmt.Errorf("%s: the database role %s may not %s: use the URL of the schema's owner role (%s), as for `onceplan migrate` (see docs/guide/secure.md, \"Database roles\")",
		command, role, what, migrations.OwnerRole)
}

// policyJSON is one policy in `policy list --json`, named as the table's columns.
type policyJSON struct {
	Name         string    `json:"name"`
	Description  string    `json:"description"`
	RegisteredBy string    `json:"registered_by"`
	CreatedAt    time.Time `json:"created_at"`
}

// runPolicyList only reads, so it works as the application role, like
// user list.
func runPolicyList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("policy list", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	asJSON := fs.Bool("json", false, "print the policies as a JSON array instead of a table")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		policies, err := ledger.NewStore(pool).Policies(ctx)
		if err != nil {
			return fmt.Errorf("policy list: %w", err)
		}
		if *asJSON {
			out := make([]policyJSON, len(policies))
			for i, p := range policies {
				out[i] = policyJSON{Name: p.Name, Description: p.Description, RegisteredBy: p.RegisteredBy, CreatedAt: p.CreatedAt.UTC()}
			}
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREGISTERED BY\tCREATED\tDESCRIPTION")
		for _, p := range policies {
			// A description is free text: one line of it, so the table stays one.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.RegisteredBy, formatTime(p.CreatedAt),
				strings.Join(strings.Fields(p.Description), " "))
		}
		return tw.Flush()
	})
}
