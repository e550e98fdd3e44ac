package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onceplan/onceplan/internal/apiclient"
	"github.com/onceplan/onceplan/internal/inbound"
)

// `onceplan resolve --evidence FILE CAMPAIGN` reads a provider's event
// export (inbound.ReadExport), lists the campaign's unknown targets from a
// running server, and proposes a resolution for each target the events
// name (inbound.Propose). Without --yes or --only it only prints them: CI
// has no terminal to ask on, so confirming is a flag, never a prompt.
// Confirmed proposals are resolved over the API, one POST
// /effects/{key}/resolve each, as the token's user — so an agent token is
// refused by the server, like any resolve.

// maxResolveUnknowns bounds the unknown targets listed from the server.
const maxResolveUnknowns = 100_000

// resolveOutput is `resolve --json`.
type resolveOutput struct {
	Campaign  string             `json:"campaign"`
	Unknown   int                `json:"unknown"`
	Events    int                `json:"events"`
	Ignored   int                `json:"ignored"`
	Proposals []resolveProposal  `json:"proposals"`
	Resolved  []int              `json:"resolved"`
	Skipped   []resolveSkip      `json:"skipped"`
	DryRun    bool               `json:"dry_run"`
	Files     []string           `json:"files"`
	unknowns  []inbound.Unknown  // not printed
	proposals []inbound.Proposal // not printed
}

type resolveProposal struct {
	Ordinal int    `json:"ordinal"`
	Target  string `json:"target"`
	Key     string `json:"key"`
	Epoch   int    `json:"epoch"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

type resolveSkip struct {
	Ordinal int    `json:"ordinal"`
	Why     string `json:"why"`
}

func runResolve(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	var f apiFlags
	f.register(fs, env)
	var files listFlag
	fs.Var(&files, "evidence", "FILE: a provider's event export (SES event publishing JSON lines, SendGrid event webhook batches, Mailgun webhooks or Events API pages, Postmark webhooks); - reads standard input (repeatable, required)")
	yes := fs.Bool("yes", false, "resolve every proposal as printed")
	only := fs.String("only", "", "ORDINALS: resolve only these proposals, by target ordinal (1,4,7-9)")
	pos, err := resolveArgs(fs, env, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("resolve: --evidence FILE is required: the provider's event export to read")
	}
	if *yes && *only != "" {
		return errors.New("resolve: give --yes (all proposals) or --only ORDINALS (some), not both")
	}
	var chosen []int
	if *only != "" {
		if chosen, err = parseOrdinals(*only); err != nil {
			return fmt.Errorf("resolve: --only: %w", err)
		}
	}
	// Read the evidence before touching the server: a bad line is
	// reported without asking anything.
	out := resolveOutput{Campaign: pos, DryRun: !*yes && *only == "", Resolved: []int{}, Skipped: []resolveSkip{}, Proposals: []resolveProposal{}}
	var proofs []inbound.Proof
	stdin := 0
	for _, name := range files {
		var r io.Reader
		shown := name
		if name == "-" {
			if stdin++; stdin > 1 || env.Stdin == nil {
				return errors.New("resolve: --evidence - (standard input) can be given once")
			}
			r, shown = env.Stdin, "standard input"
		} else {
			fh, err := os.Open(name)
			if err != nil {
				return fmt.Errorf("resolve: --evidence: %w", err)
			}
			defer fh.Close()
			r = fh
		}
		ex, err := inbound.ReadExport(r, shown)
		if err != nil {
			return fmt.Errorf("resolve: %w", err)
		}
		proofs = append(proofs, ex.Proofs...)
		out.Events += ex.Events
		out.Ignored += ex.Ignored
		out.Files = append(out.Files, shown)
	}
	c, err := f.client()
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	if out.unknowns, err = listUnknowns(ctx, c, pos); err != nil {
		return apiError("resolve", err)
	}
	out.Unknown = len(out.unknowns)
	out.proposals = inbound.Propose(out.unknowns, proofs)
	byOrdinal := map[int]inbound.Proposal{}
	for _, p := range out.proposals {
		byOrdinal[p.Ordinal] = p
		out.Proposals = append(out.Proposals, resolveProposal{Ordinal: p.Ordinal, Target: p.Target, Key: p.Key, Epoch: p.Epoch,
			Outcome: string(p.Outcome), Reason: p.Reason()})
	}
	if *yes {
		for _, p := range out.proposals {
			chosen = append(chosen, p.Ordinal)
		}
	}
	for _, n := range chosen {
		if _, ok := byOrdinal[n]; !ok {
			return fmt.Errorf("resolve: --only: target %d has no proposal (the proposals are %s); nothing was resolved", n, ordinalList(out.proposals))
		}
	}
	for _, n := range chosen {
		p := byOrdinal[n]
		err := c.Do(ctx, apiclient.Request{Method: http.MethodPost, Path: "/effects/" + url.PathEscape(p.Key) + "/resolve",
			JSON: map[string]string{"outcome": string(p.Outcome), "reason": p.Reason()}}, nil)
		var ae *apiclient.Error
		switch {
		case err == nil:
			out.Resolved = append(out.Resolved, n)
		case errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound):
			// Resolved (or settled) since it was listed: left as it is.
			out.Skipped = append(out.Skipped, resolveSkip{Ordinal: n, Why: ae.Message})
		default:
			if len(out.Resolved) > 0 {
				return apiError(fmt.Sprintf("resolve: target %d (after resolving %d: %s)", n, len(out.Resolved), joinInts(out.Resolved)), err)
			}
			return apiError("resolve", err)
		}
	}
	if f.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return printResolve(env.Stdout, out, files)
}

// resolveArgs parses flags before and after the one CAMPAIGN argument.
func resolveArgs(fs *flag.FlagSet, env Env, args []string) (string, error) {
	return campaignArg(fs, env, args, "resolve", "onceplan resolve --evidence FILE CAMPAIGN_ID",
		"Usage: onceplan resolve --evidence FILE CAMPAIGN [--yes | --only ORDINALS]\n\n"+
			"Reads a provider's event export and proposes a resolution for each unknown target of the\n"+
			"campaign (its id) that the events name: delivered when the provider accepted the message\n"+
			"(SES Send/Delivery/Bounce/Complaint, SendGrid processed/delivered/bounce, Mailgun accepted/\n"+
			"delivered/failed, Postmark Delivery/Bounce), not delivered when it never did (SES Reject,\n"+
			"SendGrid dropped, Mailgun rejected). Targets the evidence does not name stay unknown.\n"+
			"Without --yes or --only it only prints the proposals (a dry run). Talks to a running server\n"+
			"(--server, --token or $ONCEPLAN_SERVER, $ONCEPLAN_TOKEN) as a person: an agent token may not resolve.\n\nFlags:\n")
}

// unknownItem is the part of GET /campaigns/{id}/targets an unknown needs.
type unknownItem struct {
	Ordinal int        `json:"ordinal"`
	Target  string     `json:"target"`
	Key     string     `json:"key"`
	Epoch   int        `json:"epoch"`
	Receipt string     `json:"receipt"`
	FirstAt *time.Time `json:"first_at"`
}

// listUnknowns pages through the campaign's unknown targets.
func listUnknowns(ctx context.Context, c *apiclient.Client, id string) ([]inbound.Unknown, error) {
	var (
		out  []inbound.Unknown
		next string
	)
	for {
		q := url.Values{"state": {"unknown"}, "limit": {"1000"}}
		if next != "" {
			q.Set("after", next)
		}
		var page struct {
			Items []unknownItem `json:"items"`
			Next  *string       `json:"next"`
		}
		if err := c.Do(ctx, apiclient.Request{Method: http.MethodGet, Path: "/campaigns/" + url.PathEscape(id) + "/targets", Query: q}, &page); err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			u := inbound.Unknown{Ordinal: it.Ordinal, Target: it.Target, Key: it.Key, Epoch: it.Epoch, Receipt: it.Receipt}
			if it.FirstAt != nil {
				u.FirstAt = *it.FirstAt
			}
			out = append(out, u)
		}
		if page.Next == nil || *page.Next == "" || len(out) >= maxResolveUnknowns {
			return out, nil
		}
		next = *page.Next
	}
}

// parseOrdinals reads "1,4,7-9".
func parseOrdinals(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 1 {
			return nil, fmt.Errorf("%q is not a target ordinal (a number from 1) or a range like 7-9", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a || b-a > maxResolveUnknowns {
				return nil, fmt.Errorf("%q is not a range of target ordinals like 7-9", part)
			}
		}
		for n := a; n <= b; n++ {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func ordinalList(props []inbound.Proposal) string {
	ns := make([]int, len(props))
	for i, p := range props {
		ns[i] = p.Ordinal
	}
	return noneIfEmpty(joinInts(ns))
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func printResolve(w io.Writer, out resolveOutput, files []string) error {
	fmt.Fprintf(w, "campaign %s: %d unknown targets; read %d events from %s (%d prove nothing either way)\n",
		out.Campaign, out.Unknown, out.Events, strings.Join(out.Files, ", "), out.Ignored)
	if len(out.Proposals) == 0 {
		fmt.Fprintln(w, "The evidence names none of the unknown targets: nothing to resolve; they stay unknown.")
		return nil
	}
	fmt.Fprintf(w, "%d proposals (targets not listed stay unknown):\n", len(out.Proposals))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TARGET#\tADDRESS\tPROPOSED\tEVIDENCE")
	for _, p := range out.Proposals {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", p.Ordinal, p.Target, strings.ReplaceAll(p.Outcome, "_", " "), p.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.DryRun {
		ev := make([]string, len(files))
		for i, f := range files {
			ev[i] = "--evidence " + f
		}
		fmt.Fprintf(w, "Dry run: nothing was resolved. To resolve them all: onceplan resolve %s %s --yes\n", strings.Join(ev, " "), out.Campaign)
		fmt.Fprintf(w, "To resolve some: onceplan resolve %s %s --only %s\n", strings.Join(ev, " "), out.Campaign, joinInts([]int{out.Proposals[0].Ordinal}))
		return nil
	}
	fmt.Fprintf(w, "Resolved %d: %s\n", len(out.Resolved), noneIfEmpty(joinInts(out.Resolved)))
	for _, s := range out.Skipped {
		fmt.Fprintf(w, "Left target %d as it is: %s\n", s.Ordinal, s.Why)
	}
	return nil
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
