package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

func runToken(ctx context.Context, env Env, args []string) error {
	return dispatch(ctx, env, "token", []subcommand{
		{"create", "make an API token (personal, or --agent) and print it alone on stdout", runTokenCreate},
		{"list", "list a user's API tokens", runTokenList},
		{"revoke", "revoke an API token by --prefix or --id", runTokenRevoke},
	}, args)
}

func runTokenCreate(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	user := fs.String("user", "", "email of the user the token acts for (required)")
	name := fs.String("name", "", "what will use the token, e.g. \"ci\" or \"claude\" (required)")
	agent := fs.Bool("agent", false, "an agent token: acts with the user's roles but may only propose and read, never decide")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token create: --user is required")
	}
	if *name == "" {
		return errors.New("token create: --name is required (say what will use the token)")
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var (
			secret string
			t      auth.Token
		)
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			var err error
			if secret, t, err = auth.CreateToken(ctx, tx, *user, *name, *agent); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, auth.EventTokenCreate, t.UserEmail,
				map[string]any{"token": t.Prefix, "name": t.Name, "agent": t.Agent})
		})
		if err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		// The token alone on stdout, so `TOKEN=$(onceplan token create …)`
		// works; the rest goes to stderr.
		fmt.Fprintln(env.Stdout, secret)
		fmt.Fprintf(env.Stderr, "created %s token %d %q for %s (prefix %s); it is shown only now: store it safely\n",
			tokenKind(t), t.ID, t.Name, t.UserEmail, t.Prefix)
		return nil
	})
}

func tokenKind(t auth.Token) string {
	if t.Agent {
		return "agent"
	}
	return "personal"
}

func runTokenList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("token list", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	user := fs.String("user", "", "email of the user whose tokens to list (required)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token list: --user is required")
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		tokens, err := auth.ListTokens(ctx, pool, *user)
		if err != nil {
			return fmt.Errorf("token list: %w", err)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tKIND\tNAME\tCREATED\tLAST USED\tREVOKED")
		for _, t := range tokens {
			used, revoked := "-", "-"
			if t.LastUsedAt != nil {
				used = formatTime(*t.LastUsedAt)
			}
			if t.RevokedAt != nil {
				revoked = formatTime(*t.RevokedAt)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Prefix, tokenKind(t), t.Name,
				formatTime(t.CreatedAt), used, revoked)
		}
		return tw.Flush()
	})
}

func runTokenRevoke(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("token revoke", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	prefix := fs.String("prefix", "", "the token's first 8 characters, as `token list` shows them")
	id := fs.Int64("id", 0, "the token's id, as `token list` shows it")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if (*prefix == "") == (*id == 0) {
		return errors.New("token revoke: give either --prefix or --id")
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var t auth.Token
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			var err error
			if *id != 0 {
				t, err = auth.RevokeToken(ctx, tx, *id)
			} else {
				t, err = auth.RevokeTokenByPrefix(ctx, tx, *prefix)
			}
			if err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, auth.EventTokenRevoke, t.UserEmail, map[string]any{"token": t.Prefix, "name": t.Name})
		})
		if err != nil {
			return fmt.Errorf("token revoke: %w", err)
		}
		fmt.Fprintf(env.Stdout, "revoked %s token %d %q of %s (prefix %s)\n", tokenKind(t), t.ID, t.Name, t.UserEmail, t.Prefix)
		return nil
	})
}
