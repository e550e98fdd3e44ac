package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// subcommand is one verb of a command group (`user add`).
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, env Env, args []string) error
}

// dispatch runs the subcommand args[0] of group.
func dispatch(ctx context.Context, env Env, group string, subs []subcommand, args []string) error {
	if len(args) == 0 {
		subUsage(env.Stderr, group, subs)
		return exitError{2}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		subUsage(env.Stdout, group, subs)
		return exitError{0}
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, env, args[1:])
		}
		names[i] = s.name
	}
	return fmt.Errorf("%s: unknown subcommand %q: use one of %s", group, args[0], strings.Join(names, ", "))
}

func subUsage(w io.Writer, group string, subs []subcommand) {
	fmt.Fprintf(w, "Usage: onceplan %s SUBCOMMAND [flags]\n\nSubcommands:\n", group)
	for _, s := range subs {
		fmt.Fprintf(w, "  %-13s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, "\nRun `onceplan %s SUBCOMMAND --help` for a subcommand's flags.\n", group)
}

// roleList is a repeatable --role flag; one value may also list several
// roles separated by commas.
type roleList []auth.Role

func (r *roleList) String() string { return strings.Join(roleNames(*r), ",") }

func (r *roleList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		role, err := auth.ParseRole(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*r = append(*r, role)
	}
	return nil
}

func roleNames(roles []auth.Role) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = string(r)
	}
	return out
}

// withDB opens the database the flags name, runs f on it and closes it.
// On the embedded default it applies migrations first (as serve does);
// against a given URL it requires `onceplan migrate` to have been run.
func withDB(ctx context.Context, env Env, db dbFlags, f func(pool onceplan.DB) error) error {
	// Only warnings: these commands' output is their result, and the
	// embedded cluster's start-up notes would drown it.
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := app.OpenDB(ctx, app.DBOptions{
		URL:     db.databaseURL,
		DataDir: db.dataDir,
		Migrate: db.databaseURL == "",
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	err = f(d.Pool)
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return errors.Join(err, d.Close(closeCtx))
}

// administer runs an administrative action and its entry in the
// administration trail in one transaction: nobody is signed in on the
// command line, so the entry names the operating-system account and host
// that ran the command.
func administer(ctx context.Context, pool onceplan.DB, action func(tx pgx.Tx, who string) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return action(tx, cliActor()) })
}

// cliActor is "account@host" for the process running this command.
func cliActor() string {
	name := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "an unnamed host"
	}
	return name + "@" + host
}

// readPassword reads the first line of stdin, without its line ending.
func readPassword(env Env) (string, error) {
	if env.Stdin == nil {
		return "", errors.New("--password-stdin: there is no standard input")
	}
	line, err := bufio.NewReader(env.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("--password-stdin: reading the password: %w", err)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return "", errors.New("--password-stdin: standard input is empty: give the password on its first line")
	}
	return line, nil
}

func runUser(ctx context.Context, env Env, args []string) error {
	return dispatch(ctx, env, "user", []subcommand{
		{"add", "create a user (prints a generated password unless --password-stdin)", runUserAdd},
		{"list", "list users with their roles", runUserList},
		{"set-roles", "replace a user's roles", runUserSetRoles},
		{"set-password", "replace a user's password and end their sessions", runUserSetPassword},
		{"disable", "stop a user signing in or using tokens", runUserDisable},
		{"enable", "undo disable", runUserEnable},
	}, args)
}

func runUserAdd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("user add", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	email := fs.String("email", "", "the user's email address (required)")
	name := fs.String("name", "", "the user's name, as the UI shows it")
	var roles roleList
	fs.Var(&roles, "role", "a role: admin, proposer, approver, operator or viewer (repeat for several; at least one)")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input (default: generate one and print it once)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *email == "" {
		return errors.New("user add: --email is required")
	}
	if len(roles) == 0 {
		return errors.New("user add: give at least one --role (admin, proposer, approver, operator, viewer)")
	}
	var password, generated string
	if *fromStdin {
		p, err := readPassword(env)
		if err != nil {
			return fmt.Errorf("user add: %w", err)
		}
		password = p
	} else {
		generated = auth.GeneratePassword()
		password = generated
	}
	n := auth.NewUser{Email: *email, Name: *name, Roles: roles, Password: password}
	// Refuse bad input before starting a database.
	if err := n.Validate(); err != nil {
		return fmt.Errorf("user add: %w", err)
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var u auth.User
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			var err error
			if u, err = auth.CreateUser(ctx, tx, n); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, auth.EventUserAdd, u.Email, map[string]any{"roles": u.Roles})
		})
		if err != nil {
			return fmt.Errorf("user add: %w", err)
		}
		fmt.Fprintf(env.Stdout, "created user %s (roles: %s)\n", u.Email, strings.Join(roleNames(u.Roles), ", "))
		if generated != "" {
			fmt.Fprintf(env.Stdout, "password: %s\n", generated)
			fmt.Fprintln(env.Stderr, "the password is shown only now: pass it on safely")
		}
		return nil
	})
}

func runUserList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("user list", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	if err := parse(fs, env, args); err != nil {
		return err
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		users, err := auth.ListUsers(ctx, pool)
		if err != nil {
			return fmt.Errorf("user list: %w", err)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EMAIL\tNAME\tROLES\tCREATED\tDISABLED")
		for _, u := range users {
			disabled := "-"
			if u.DisabledAt != nil {
				disabled = formatTime(*u.DisabledAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Email, dash(u.Name), strings.Join(roleNames(u.Roles), ","),
				formatTime(u.CreatedAt), disabled)
		}
		return tw.Flush()
	})
}

func runUserSetRoles(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("user set-roles", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	email := fs.String("email", "", "the user's email address (required)")
	var roles roleList
	fs.Var(&roles, "role", "a role: admin, proposer, approver, operator or viewer (repeat for several; at least one)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *email == "" {
		return errors.New("user set-roles: --email is required")
	}
	if len(roles) == 0 {
		return errors.New("user set-roles: give at least one --role (admin, proposer, approver, operator, viewer)")
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var u auth.User
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			before, err := auth.GetUserByEmail(ctx, tx, *email)
			if err != nil {
				return err
			}
			if u, err = auth.SetRoles(ctx, tx, *email, roles); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, auth.EventUserRoles, u.Email, map[string]any{"from": before.Roles, "to": u.Roles})
		})
		if err != nil {
			return fmt.Errorf("user set-roles: %w", err)
		}
		fmt.Fprintf(env.Stdout, "user %s now has roles: %s\n", u.Email, strings.Join(roleNames(u.Roles), ", "))
		return nil
	})
}

func runUserSetPassword(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("user set-password", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	email := fs.String("email", "", "the user's email address (required)")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input (default: generate one and print it once)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *email == "" {
		return errors.New("user set-password: --email is required")
	}
	var password, generated string
	if *fromStdin {
		p, err := readPassword(env)
		if err != nil {
			return fmt.Errorf("user set-password: %w", err)
		}
		password = p
	} else {
		generated = auth.GeneratePassword()
		password = generated
	}
	if err := auth.ValidatePassword(password); err != nil {
		return fmt.Errorf("user set-password: %w", err)
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var u auth.User
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			var err error
			if u, err = auth.GetUserByEmail(ctx, tx, *email); err != nil {
				return err
			}
			if err := auth.SetPassword(ctx, tx, u.Email, password); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, auth.EventUserPassword, u.Email, nil)
		})
		if err != nil {
			return fmt.Errorf("user set-password: %w", err)
		}
		fmt.Fprintf(env.Stdout, "set a new password for %s and ended their sessions\n", u.Email)
		if generated != "" {
			fmt.Fprintf(env.Stdout, "password: %s\n", generated)
			fmt.Fprintln(env.Stderr, "the password is shown only now: pass it on safely")
		}
		return nil
	})
}

func runUserDisable(ctx context.Context, env Env, args []string) error {
	return runUserToggle(ctx, env, args, "disable", auth.EventUserDisable, auth.DisableUser)
}

func runUserEnable(ctx context.Context, env Env, args []string) error {
	return runUserToggle(ctx, env, args, "enable", auth.EventUserEnable, auth.EnableUser)
}

func runUserToggle(ctx context.Context, env Env, args []string, verb, event string,
	f func(context.Context, onceplan.DB, string) (auth.User, error),
) error {
	fs := flag.NewFlagSet("user "+verb, flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	email := fs.String("email", "", "the user's email address (required)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *email == "" {
		return fmt.Errorf("user %s: --email is required", verb)
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		var u auth.User
		err := administer(ctx, pool, func(tx pgx.Tx, who string) error {
			var err error
			if u, err = f(ctx, tx, *email); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, who, event, u.Email, nil)
		})
		if err != nil {
			return fmt.Errorf("user %s: %w", verb, err)
		}
		fmt.Fprintf(env.Stdout, "%sd user %s\n", verb, u.Email)
		return nil
	})
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
