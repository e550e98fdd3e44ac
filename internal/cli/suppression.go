package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/migrations"
)

// The suppression list is admin data, like users: these commands take the
// database flags and act as the operating-system account running them
// (cliActor), which each entry and removal records.

func runSuppression(ctx context.Context, env Env, args []string) error {
	return dispatch(ctx, env, "suppression", []subcommand{
		{"add", "suppress an address: no campaign mails it", runSuppressionAdd},
		{"remove", "take an address off the list, with a reason (recorded)", runSuppressionRemove},
		{"list", "list suppressed addresses, newest first", runSuppressionList},
		{"import", "suppress every address of a CSV FILE (an email or address column, optional reason)", runSuppressionImport},
	}, args)
}

func runSuppressionAdd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("suppression add", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	address := fs.String("address", "", "the address to suppress (required)")
	reason := fs.String("reason", string(suppression.Manual), "why: "+suppression.ReasonNames())
	note := fs.String("note", "", "a note kept with the entry")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *address == "" {
		return errors.New("suppression add: --address is required")
	}
	if _, err := suppression.Normalize(*address); err != nil {
		return fmt.Errorf("suppression add: %w", err)
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		e, added, err := suppression.Add(ctx, pool, suppression.AddParams{Address: *address, Reason: suppression.Reason(*reason),
			Source: suppression.FromActor, Actor: cliActor(), Note: *note})
		if err != nil {
			return fmt.Errorf("suppression add: %w", err)
		}
		if !added {
			fmt.Fprintf(env.Stdout, "%s was already suppressed (%s, since %s); nothing changed\n", e.Address, e.Reason, e.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"))
			return nil
		}
		fmt.Fprintf(env.Stdout, "suppressed %s (%s)\n", e.Address, e.Reason)
		return nil
	})
}

func runSuppressionRemove(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("suppression remove", flag.ContinueOnError)
	var db dbFlags
	db.registerOwner(fs, env)
	address := fs.String("address", "", "the address to take off the list (required)")
	reason := fs.String("reason", "", "why it may be mailed again (required; recorded with who ran this)")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	switch {
	case *address == "":
		return errors.New("suppression remove: --address is required")
	case strings.TrimSpace(*reason) == "":
		return errors.New("suppression remove: --reason is required: say why the address may be mailed again")
	}
	// As the schema's owner, like policy add: the server's role takes an
	// address off only in the name of an enabled admin (migration 0024),
	// and on the command line nobody is signed in; the removal names the
	// operating-system account instead.
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := app.OpenOwnerDB(ctx, app.DBOptions{URL: db.databaseURL, DataDir: db.dataDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("suppression remove: %w", err)
	}
	e, err := suppression.Remove(ctx, d.Pool, *address, cliActor(), *reason)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "OP006":
		err = fmt.Errorf("suppression remove: the database role of this URL may take an address off only in the name of an enabled admin: use the URL of the schema's owner role (%s), as for `onceplan migrate`, or remove it on the Suppressions page as an admin",
			migrations.OwnerRole)
	case err != nil:
		err = fmt.Errorf("suppression remove: %w", err)
	default:
		fmt.Fprintf(env.Stdout, "%s is no longer suppressed (removal recorded by %s)\n", e.Address, e.Removed.Actor)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return errors.Join(err, d.Close(closeCtx))
}

func runSuppressionList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("suppression list", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	prefix := fs.String("address", "", "only addresses starting with this")
	removed := fs.Bool("include-removed", false, "also entries that were taken off")
	limit := fs.Int("limit", 100, "at most this many entries (1–1000)")
	asJSON := fs.Bool("json", false, "print the entries as a JSON array")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return fmt.Errorf("suppression list: --limit must be from 1 to 1000, not %d", *limit)
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		entries, _, err := suppression.List(ctx, pool, suppression.ListParams{Address: *prefix, IncludeRemoved: *removed, Limit: *limit})
		if err != nil {
			return fmt.Errorf("suppression list: %w", err)
		}
		if *asJSON {
			if entries == nil {
				entries = []suppression.Entry{}
			}
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(entries)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ADDRESS\tREASON\tSOURCE\tBY\tSINCE\tREMOVED")
		for _, e := range entries {
			by := e.Actor
			if by == "" {
				by = "-"
			}
			rm := "-"
			if e.Removed != nil {
				rm = e.Removed.CreatedAt.UTC().Format("2006-01-02 15:04") + " by " + e.Removed.Actor + ": " + e.Removed.Reason
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Address, e.Reason, e.Source, by, e.CreatedAt.UTC().Format("2006-01-02 15:04"), rm)
		}
		return tw.Flush()
	})
}

// suppressionLine is one data line of an imported suppression file.
type suppressionLine struct {
	Line    int
	Address string
	Reason  suppression.Reason // "" when the file has no reason column or leaves it blank
}

// lineRejection is a line of the file that was not imported, and why.
type lineRejection struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// maxSuppressionLines bounds one import file.
const maxSuppressionLines = 1_000_000

// readSuppressionCSV reads a CSV whose header names an email (or address)
// column and optionally a reason column. Lines are numbered as in the
// file (the header is line 1). A line without an address is rejected
// here; the addresses themselves are checked by the list (Add).
func readSuppressionCSV(r io.Reader) ([]suppressionLine, []lineRejection, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil, errors.New("the file is empty: it needs a header line naming an email (or address) column")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("line 1: %w", err)
	}
	addrCol, reasonCol := -1, -1
	for i, h := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\uFEFF"))) {
		case "email", "address":
			if addrCol < 0 {
				addrCol = i
			}
		case "reason":
			reasonCol = i
		}
	}
	if addrCol < 0 {
		return nil, nil, errors.New("line 1: the header names no email or address column")
	}
	var (
		lines    []suppressionLine
		rejected []lineRejection
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return lines, rejected, fmt.Errorf("line %d: %v", pe.Line, pe.Err)
		}
		if err != nil {
			return lines, rejected, err
		}
		line, _ := cr.FieldPos(0) // only after a record was read: it panics otherwise
		if len(lines)+len(rejected) >= maxSuppressionLines {
			return lines, rejected, fmt.Errorf("line %d: the file has more than %d lines; split it", line, maxSuppressionLines)
		}
		if addrCol >= len(rec) || strings.TrimSpace(rec[addrCol]) == "" {
			rejected = append(rejected, lineRejection{Line: line, Reason: "no address"})
			continue
		}
		l := suppressionLine{Line: line, Address: strings.TrimSpace(rec[addrCol])}
		if reasonCol >= 0 && reasonCol < len(rec) {
			l.Reason = suppression.Reason(strings.ToLower(strings.TrimSpace(rec[reasonCol])))
		}
		lines = append(lines, l)
	}
	return lines, rejected, nil
}

// suppressionImport is what an import did.
type suppressionImport struct {
	Lines             int             `json:"lines"`
	Added             int             `json:"added"`
	AlreadySuppressed []int           `json:"already_suppressed"`
	Rejected          []lineRejection `json:"rejected"`
}

func runSuppressionImport(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("suppression import", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	reason := fs.String("reason", string(suppression.Manual), "the reason of lines that give none: "+suppression.ReasonNames())
	note := fs.String("note", "", "a note kept with every entry (default: the file's name)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseWithArgs(fs, env, args, "FILE")
	if err != nil {
		return err
	}
	if !slices.Contains(suppression.Reasons, suppression.Reason(*reason)) {
		return fmt.Errorf("suppression import: --reason must be one of %s, not %q", suppression.ReasonNames(), *reason)
	}
	var in io.Reader = env.Stdin
	name := "standard input"
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return fmt.Errorf("suppression import: %w", err)
		}
		defer f.Close()
		in, name = f, pos[0]
	}
	lines, rejected, err := readSuppressionCSV(in)
	if err != nil {
		return fmt.Errorf("suppression import: %s: %w", name, err)
	}
	if *note == "" {
		*note = "imported from " + name
	}
	rep := suppressionImport{Lines: len(lines) + len(rejected), Rejected: rejected, AlreadySuppressed: []int{}}
	err = withDB(ctx, env, db, func(pool onceplan.DB) error {
		// One transaction: the file is imported whole or not at all (a
		// refused line is reported, not a failure).
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			who := cliActor()
			for _, l := range lines {
				r := l.Reason
				if r == "" {
					r = suppression.Reason(*reason)
				}
				_, added, err := suppression.Add(ctx, tx, suppression.AddParams{Address: l.Address, Reason: r,
					Source: suppression.FromImport, Actor: who, Note: *note})
				switch {
				case errors.Is(err, onceplan.ErrInvalid):
					rep.Rejected = append(rep.Rejected, lineRejection{Line: l.Line, Reason: err.Error()})
				case err != nil:
					return fmt.Errorf("line %d: %w", l.Line, err)
				case added:
					rep.Added++
				default:
					rep.AlreadySuppressed = append(rep.AlreadySuppressed, l.Line)
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("suppression import: %w", err)
	}
	slices.SortFunc(rep.Rejected, func(a, b lineRejection) int { return a.Line - b.Line })
	if *asJSON {
		if rep.Rejected == nil {
			rep.Rejected = []lineRejection{}
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(env.Stdout, "%d lines: %d added, %d already suppressed, %d rejected\n", rep.Lines, rep.Added, len(rep.AlreadySuppressed), len(rep.Rejected))
	for _, l := range rep.AlreadySuppressed {
		fmt.Fprintf(env.Stdout, "line %d: already suppressed\n", l)
	}
	for _, r := range rep.Rejected {
		fmt.Fprintf(env.Stdout, "line %d: rejected: %s\n", r.Line, r.Reason)
	}
	return nil
}
