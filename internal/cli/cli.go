// Package cli implements the onceplan command line: it parses arguments,
// builds the configuration and runs one command. It holds no state of its
// own; cmd/onceplan/main.go only hands it the process's environment.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
)

// Env is the process environment a command runs in.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env Env, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the web UI, the JSON API and the workers in one process", runServe},
		{"worker", "run workers only, for more processes or machines on the same database", runWorker},
		{"migrate", "apply the database migrations (Onceplan's and River's)", runMigrate},
		{"user", "manage users: add, list, set-roles, set-password, disable, enable", runUser},
		{"token", "manage API tokens: create (prints the token alone on stdout), list, revoke", runToken},
		{"policy", "manage bump policies (what may give a key a new epoch): add (as the schema's owner role, like migrate), list", runPolicy},
		{"tool", "manage the tools of single effects (agent tool calls): add (recovery and approval; as the schema's owner role, like migrate), list", runTool},
		{"audit", "check that every approved target got exactly one effect (exit 0 only when it holds)", runAudit},
		{"archive", "move a finished campaign's ledger rows out of the tables running campaigns use; the audit and the UI still read them", runArchive},
		{"compact", "rebuild the indexes of the tables running campaigns use, after archiving (as the schema's owner role, like migrate)", runCompact},
		{"suppression", "manage the suppression list (addresses no campaign mails): add, remove, list, import", runSuppression},
		{"resolve", "propose resolutions for a campaign's unknown targets from a provider's event export (--evidence FILE); --yes or --only to confirm", runResolve},
		{"campaign", "create, import, submit, approve, start, pause, resume, cancel and show campaigns on a running server", runCampaign},
		{"mcp", "serve the Model Context Protocol on stdin/stdout for an AI agent (with an agent token)", runMCP},
	}
}

// exitError carries a specific exit status without a message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// ExitCode reports a command's requested exit status, for errors that are
// not failures to print (such as --help).
func ExitCode(err error) (int, bool) {
	var e exitError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}

// statusError is a failure to report with its message and a specific
// exit status (audit: 2 for "could not tell", 1 being "does not hold").
type statusError struct {
	err  error
	code int
}

func (e statusError) Error() string { return e.err.Error() }
func (e statusError) Unwrap() error { return e.err }

// Status is the exit status for err, a failure whose message is printed:
// the status the command asked for, else 1.
func Status(err error) int {
	var e statusError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// Run runs the command named by args[0].
func Run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.Stdout)
		if len(args) == 0 {
			return exitError{2}
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
	}
	usage(env.Stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "onceplan executes human-approved bulk side effects exactly once per target.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: onceplan COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `onceplan COMMAND --help` for a command's flags.")
}

// dbFlags are the database flags every command that touches the database takes.
type dbFlags struct {
	databaseURL string
	dataDir     string
}

func (d *dbFlags) register(fs *flag.FlagSet, env Env) {
	fs.StringVar(&d.databaseURL, "database-url", env.Getenv("DATABASE_URL"),
		"PostgreSQL URL (default $DATABASE_URL; empty: the embedded default under --data-dir)")
	fs.StringVar(&d.dataDir, "data-dir", "./.onceplan",
		"where Onceplan keeps its data: the embedded PostgreSQL cluster (DIR/pg) and the maildir outbox")
}

// parse parses a command's flags, printing usage for --help and turning a
// flag error into one line.
func parse(fs *flag.FlagSet, env Env, args []string) error {
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (see `onceplan %s --help`)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return nil
}

// parseFlags parses flags up to the first positional argument.
func parseFlags(fs *flag.FlagSet, env Env, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(env.Stdout)
			fmt.Fprintf(env.Stdout, "Usage: onceplan %s [flags]\n\nFlags:\n", fs.Name())
			fs.PrintDefaults()
			return exitError{0}
		}
		return fmt.Errorf("%s: %v (see `onceplan %s --help`)", fs.Name(), err, fs.Name())
	}
	return nil
}

// newLogger logs text to a terminal and JSON otherwise (for collectors).
func newLogger(w io.Writer) *slog.Logger {
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// Message renders err as the one line the command prints: multi-line
// causes (a driver's per-host details, a server log excerpt) are folded
// into it rather than spilling over the terminal.
func Message(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
