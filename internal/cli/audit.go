package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/plan"
)

// auditListMax is how many findings of each kind the human report prints;
// --json carries up to audit.DefaultListMax.
const auditListMax = 20

// auditOutput is `audit --json`: the metric's fields at the top level (the
// external contract), and the reconciliation when evidence was gathered.
type auditOutput struct {
	audit.Metric
	Campaign       string        `json:"campaign"`
	Reconciliation *audit.Report `json:"reconciliation,omitempty"`
}

// runAudit exits 0 when exactly-once holds, 1 when it does not, and 2 when
// it could not tell (bad flags, an unreadable log, no database), so that a
// script can tell a finding from a failure.
func runAudit(ctx context.Context, env Env, args []string) error {
	err := auditCommand(ctx, env, args)
	if _, ok := ExitCode(err); err == nil || ok {
		return err
	}
	return statusError{err: err, code: 2}
}

func auditCommand(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	asJSON := fs.Bool("json", false, "print the metric (and the reconciliation) as JSON instead of a table")
	var maildirs, logs, providers listFlag
	fs.Var(&maildirs, "maildir", "DIR: count the campaign's messages in this maildir (repeatable)")
	fs.Var(&logs, "provider-log", "FILE: reconcile against a provider's delivery log, CSV with a header naming message id (or key), recipient and timestamp columns; - reads standard input (repeatable)")
	probe := fs.Bool("probe", false, "probe the campaign's provider for every done, pending and unknown target")
	fs.Var(&providers, "provider", "NAME=URL of a provider for --probe, repeatable (default $ONCEPLAN_PROVIDERS, else outbox=maildir://DATA-DIR/outbox)")
	probeRate := fs.Float64("probe-rate", 100, "at most this many probes per second; 0: only the provider's own rate option")
	export := fs.String("export", "", "csv or json: write every target's row to standard output; the summary then goes to standard error")

	campaign, err := auditArgs(fs, env, args)
	if err != nil {
		return err
	}
	var format audit.ExportFormat
	if *export != "" {
		if format, err = audit.ParseExportFormat(*export); err != nil {
			return fmt.Errorf("audit: --export: %w", err)
		}
	}
	if *probeRate < 0 {
		return errors.New("audit: --probe-rate cannot be negative")
	}
	stdinLogs := 0
	for _, l := range logs {
		if l == "-" {
			stdinLogs++
		}
	}
	if stdinLogs > 1 {
		return errors.New("audit: --provider-log - (standard input) can be given once")
	}

	// Read the outside evidence before touching the database: a bad log
	// line is reported without starting anything.
	var ev *audit.Evidence
	if len(maildirs) > 0 || len(logs) > 0 {
		ev = audit.NewEvidence()
		for _, dir := range maildirs {
			if err := ev.ScanMaildir(ctx, dir); err != nil {
				return fmt.Errorf("audit: %w", err)
			}
		}
		for _, name := range logs {
			if err := importLog(ev, env, name); err != nil {
				return fmt.Errorf("audit: %w", err)
			}
		}
	}

	summary := env.Stdout
	if format != "" {
		summary = env.Stderr
	}
	var holds bool
	err = withDB(ctx, env, db, func(pool onceplan.DB) error {
		c, err := audit.FindCampaign(ctx, pool, campaign)
		if err != nil {
			return err
		}
		if c.PlanID == 0 {
			return fmt.Errorf("campaign %q (%s) has not been approved yet, so there is nothing to audit", c.Name, c.ID)
		}
		out := auditOutput{Campaign: c.Name}
		if ev != nil || *probe {
			params := audit.ReconcileParams{PlanID: c.PlanID, Evidence: ev}
			if ev != nil {
				if params.OwnMessages, err = ownMessages(ctx, pool); err != nil {
					return err
				}
			}
			if *probe {
				p, closeProbe, err := probeProvider(ctx, pool, env, db, providers, c.PlanID)
				if err != nil {
					return err
				}
				defer closeProbe()
				params.Probe = &audit.ProbeOpts{Provider: p, Rate: *probeRate}
			}
			rep, err := audit.Reconcile(ctx, pool, params)
			if err != nil {
				return err
			}
			out.Metric, out.Reconciliation = rep.Metric, &rep
		} else if out.Metric, err = audit.ForPlan(ctx, pool, c.PlanID); err != nil {
			return err
		}
		if format != "" {
			if err := audit.Export(ctx, pool, c.PlanID, format, env.Stdout); err != nil {
				return fmt.Errorf("exporting the targets: %w", err)
			}
		}
		holds = out.Holds
		if *asJSON {
			enc := json.NewEncoder(summary)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		return printAudit(summary, out)
	})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if !holds {
		return exitError{1}
	}
	return nil
}

// auditArgs parses flags given before and after the one CAMPAIGN argument.
func auditArgs(fs *flag.FlagSet, env Env, args []string) (string, error) {
	return campaignArg(fs, env, args, "audit", "onceplan audit CAMPAIGN (its id or its name)",
		"Usage: onceplan audit CAMPAIGN [flags]\n\n"+
			"Prints whether every approved target of the campaign's current plan got exactly one\n"+
			"effect, from the ledger and from any evidence given (--maildir, --provider-log,\n"+
			"--probe). CAMPAIGN is the campaign's id, or its name when no other campaign has it.\n"+
			"Exits 0 when exactly-once holds, 1 when it does not, 2 when it could not tell (an error).\n\nFlags:\n")
}

// campaignArg parses the flags of command cmd given before and after its
// one CAMPAIGN argument and returns that argument; --help prints usage and
// the flags. form is how the missing argument is asked for.
func campaignArg(fs *flag.FlagSet, env Env, args []string, cmd, form, usage string) (string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(env.Stdout)
				fmt.Fprint(env.Stdout, usage)
				fs.PrintDefaults()
				return "", exitError{0}
			}
			return "", fmt.Errorf("%s: %v (see `onceplan %s --help`)", cmd, err, cmd)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(positional) {
	case 0:
		return "", fmt.Errorf("%s: name the campaign: %s", cmd, form)
	case 1:
		return positional[0], nil
	}
	return "", fmt.Errorf("%s: unexpected argument %q: give one campaign (see `onceplan %s --help`)", cmd, positional[1], cmd)
}

func importLog(ev *audit.Evidence, env Env, name string) error {
	if name == "-" {
		if env.Stdin == nil {
			return errors.New("--provider-log -: there is no standard input")
		}
		return ev.ImportLog(env.Stdin, "(standard input)")
	}
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("--provider-log: %w", err)
	}
	defer f.Close()
	return ev.ImportLog(f, name)
}

// probeProvider returns the plan's provider from the configured ones.
func probeProvider(ctx context.Context, pool onceplan.DB, env Env, db dbFlags, flags []string, planID int64) (provider.Provider, func(), error) {
	pl, err := plan.GetPlan(ctx, pool, planID)
	if err != nil {
		return nil, nil, err
	}
	reg, err := app.Providers(app.ProviderOptions{Flags: flags, Env: env.Getenv("ONCEPLAN_PROVIDERS"), DataDir: db.dataDir})
	if err != nil {
		return nil, nil, fmt.Errorf("--provider: %w", err)
	}
	p, ok := reg.Get(pl.Provider)
	if !ok {
		reg.Close()
		return nil, nil, fmt.Errorf("--probe: the campaign sends through provider %q, which is not configured here (configured: %s); pass --provider %s=URL",
			pl.Provider, strings.Join(reg.Names(), ", "), pl.Provider)
	}
	return p, func() { reg.Close() }, nil
}

// printAudit prints the human report.
func printAudit(w io.Writer, out auditOutput) error {
	m := out.Metric
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "campaign\t%s (%s)\n", out.Campaign, m.CampaignID)
	fmt.Fprintf(tw, "plan\t%d (version %d)\n", m.PlanID, m.PlanVersion)
	evidence := "ledger only (duplicates need evidence: --maildir, --provider-log, --probe)"
	if len(m.Evidence) > 0 {
		evidence = strings.Join(m.Evidence, ", ")
	}
	fmt.Fprintf(tw, "evidence\t%s\n", evidence)
	in := m.Integrity
	intact := fmt.Sprintf("yes: its %d frozen rows hash to the approved %.12s…, every key is its address's, %d of %d approvals",
		in.Rows, in.ApprovedHash, in.Approvals, in.RequiredApprovals)
	if !m.PlanIntact {
		intact = "NO (see below)"
	}
	fmt.Fprintf(tw, "plan intact\t%s\n", intact)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rows := []struct {
		name string
		n    int
		note string
	}{
		{"approved", m.Approved, ""},
		{"exactly once", m.ExactlyOnce, ""},
		{"suppressed", m.Suppressed, "not sent: the address was suppressed before its turn"},
		{"missing", m.Missing, missingNote(m)},
		{"in doubt", m.InDoubt, fmt.Sprintf("%d pending, %d unknown", m.Pending, m.Unknown)},
		{"failed", m.Failed, failedNote(m)},
		{"stranded", m.Stranded, ""},
		{"revoked", m.Revoked, ""},
		{"duplicates", m.Duplicates, ""},
		{"ungated", m.Ungated, ungatedNote(m)},
	}
	if len(m.Evidence) > 0 {
		rows = append(rows,
			struct {
				name string
				n    int
				note string
			}{"unconfirmed", m.Unconfirmed, "done in the ledger, no evidence"},
			struct {
				name string
				n    int
				note string
			}{"unrecorded", m.Unrecorded, "evidence, but not done in the ledger"})
	}
	for _, r := range rows {
		note := ""
		if r.note != "" && r.n > 0 {
			note = "  (" + r.note + ")"
		}
		fmt.Fprintf(tw, "%s\t%d%s\n", r.name, r.n, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep := out.Reconciliation; rep != nil {
		printFindings(w, "done in the ledger, no evidence", rep.DoneWithoutEvidence)
		printFindings(w, "evidence, not done in the ledger", rep.EvidenceNotDone)
		printFindings(w, "duplicates", rep.Duplicates)
		printFindings(w, "strays (evidence for effects outside this plan)", rep.Strays)
		printFindings(w, "recognised (Onceplan's test sends and notifications, not target effects)", rep.Recognised)
		if rep.OtherCampaigns > 0 {
			fmt.Fprintf(w, "\n%s of evidence %s to other campaigns (ignored)\n", counted(rep.OtherCampaigns, "piece", "pieces"), belongs(rep.OtherCampaigns))
		}
		for _, md := range rep.Maildirs {
			if md.Unrecognised > 0 {
				fmt.Fprintf(w, "\nmaildir %s: %d of %s %s no Onceplan effect (ignored)\n", md.Dir, md.Unrecognised, counted(md.Files, "file", "files"), verb(md.Unrecognised, "names", "name"))
			}
		}
		if p := rep.Probe; p != nil && p.Errors > 0 {
			fmt.Fprintf(w, "\nprobe %s: %d of %s failed\n", p.Provider, p.Errors, counted(p.Probed, "probe", "probes"))
		}
	}
	if len(m.Reasons) > 0 {
		fmt.Fprintln(w, "\nwhy it does not hold:")
		for _, r := range m.Reasons {
			fmt.Fprintf(w, "  - %s\n", r)
		}
	}
	fmt.Fprintf(w, "\n%s\n", m.Headline())
	return nil
}

func missingNote(m audit.Metric) string {
	if m.Outside > 0 {
		return fmt.Sprintf("no effect of their own at the current epoch; %d held by rows outside the plan", m.Outside)
	}
	return "no effect of their own at the current epoch"
}

func printFindings(w io.Writer, title string, l audit.FindingList) {
	if l.Count == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s: %d\n", title, l.Count)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TARGET\tKEY\tEPOCH\tSTATE\tEVIDENCE\tNOTE")
	for i, f := range l.Items {
		if i == auditListMax {
			break
		}
		name, key, epoch := dash(f.Target), f.Key, strconv.Itoa(f.Epoch)
		if key == "" {
			key, epoch = f.ID, "-"
		}
		var ev []string
		if f.Files > 0 {
			ev = append(ev, counted(f.Files, "file", "files"))
		}
		if f.Lines > 0 {
			ev = append(ev, counted(f.Lines, "log line", "log lines"))
		}
		switch {
		case f.ProbeMatches > 1:
			ev = append(ev, fmt.Sprintf("probe found %d messages", f.ProbeMatches))
		case f.Probe != "":
			ev = append(ev, "probe "+f.Probe)
		}
		if len(ev) == 0 {
			ev = []string{"none"}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", name, key, epoch, dash(f.State), strings.Join(ev, ", "), dash(f.Note))
	}
	tw.Flush()
	for i, f := range l.Items {
		if i == auditListMax {
			break
		}
		who := f.Target
		if who == "" {
			who = cmp.Or(f.Key, f.ID)
		}
		for _, s := range f.Sources {
			fmt.Fprintf(w, "    %s: %s\n", who, s)
		}
	}
	if shown := min(len(l.Items), auditListMax); l.Count > shown {
		fmt.Fprintf(w, "  … and %d more (--json lists up to %d)\n", l.Count-shown, audit.DefaultListMax)
	}
}

// failedNote says how the failed targets ended: refused by the provider
// for good, given up after their tries, never reached the provider, or
// still to be sent.
func failedNote(m audit.Metric) string {
	if m.Failed == 0 {
		return ""
	}
	return fmt.Sprintf("%d refused for good, %d given up after their tries, %d never reached the provider, %d to be sent again",
		m.Rejected, m.Exhausted, m.Unreached, m.Failed-m.Rejected-m.Exhausted-m.Unreached)
}

// ungatedNote says what ungated counts, when it counts any.
func ungatedNote(m audit.Metric) string {
	if m.Ungated == 0 {
		return ""
	}
	return "decided by rows written before PostgreSQL refused them"
}

// ownMessages lists the messages Onceplan sent that are no target's
// effect — test sends (approval) and email notifications (notify) — for
// the reconciliation to recognise instead of calling them strays.
func ownMessages(ctx context.Context, db onceplan.DB) ([]audit.OwnMessage, error) {
	tests, err := approval.TestMessages(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the test sends: %w", err)
	}
	emails, err := notify.Emails(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the notifications: %w", err)
	}
	out := make([]audit.OwnMessage, 0, len(tests)+len(emails))
	for _, m := range tests {
		out = append(out, audit.OwnMessage{Kind: "test send", Key: m.Key, Receipt: m.Receipt,
			Campaign: cmp.Or(m.CampaignName, m.CampaignID), To: m.To, At: m.At})
	}
	ids := make([]string, 0, len(emails))
	for _, e := range emails {
		ids = append(ids, e.CampaignID)
	}
	names, err := approval.Names(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	for _, e := range emails {
		out = append(out, audit.OwnMessage{Kind: "notification", Key: e.Key,
			Campaign: cmp.Or(names[e.CampaignID], e.CampaignID), To: e.Recipient, At: e.CreatedAt})
	}
	return out, nil
}

// counted words a count with its noun: "1 file", "2 files".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// verb is the verb's form for a subject of n.
func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func belongs(n int) string { return verb(n, "belongs", "belong") }
