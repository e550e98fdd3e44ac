package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/onceplan/onceplan/internal/apiclient"
)

// apiFlags are the flags of commands that talk to a running server.
type apiFlags struct {
	server string
	token  string
	json   bool
}

func (f *apiFlags) register(fs *flag.FlagSet, env Env) {
	def := env.Getenv("ONCEPLAN_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fs.StringVar(&f.server, "server", def, "the Onceplan server's URL (default $ONCEPLAN_SERVER, else http://127.0.0.1:8080)")
	fs.StringVar(&f.token, "token", env.Getenv("ONCEPLAN_TOKEN"), "an API token (default $ONCEPLAN_TOKEN)")
	fs.BoolVar(&f.json, "json", false, "print the server's JSON answer instead of a summary")
}

func (f *apiFlags) client() (*apiclient.Client, error) {
	return apiclient.New(f.server, f.token)
}

// parseWithArgs parses flags and positional arguments in any order
// (`campaign approve ID --plan-hash H` and `campaign approve --plan-hash H ID`).
func parseWithArgs(fs *flag.FlagSet, env Env, args []string, names ...string) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := parseFlags(fs, env, rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) != len(names) {
		want := "<" + strings.Join(names, "> <") + ">"
		if len(names) == 0 {
			want = "no arguments"
		}
		return nil, fmt.Errorf("%s: takes %s (see `onceplan %s --help`)", fs.Name(), want, fs.Name())
	}
	return pos, nil
}

var campaignCommands = []struct {
	name, summary string
	run           func(ctx context.Context, env Env, args []string) error
}{
	{"create", "create a campaign (draft) with its payload and, optionally, its targets", campaignCreate},
	{"targets", "import a target list (CSV or JSON file) into a draft", campaignTargets},
	{"submit", "submit the draft for approval", campaignAction("submit", false)},
	{"approve", "approve the plan whose hash you reviewed (--plan-hash)", campaignApprove},
	{"reject", "reject the draft with a reason (--reason)", campaignAction("reject", true)},
	{"start", "start an approved campaign", campaignAction("start", false)},
	{"pause", "pause a running campaign", campaignAction("pause", false)},
	{"resume", "resume the remainder (never a second effect)", campaignAction("resume", false)},
	{"cancel", "cancel the campaign for good", campaignAction("cancel", false)},
	{"status", "show a campaign: state, plan hash, counts per state", campaignStatus},
	{"list", "list campaigns, newest first", campaignList},
}

func runCampaign(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := env.Stdout
		fmt.Fprintln(w, "Usage: onceplan campaign SUBCOMMAND [flags] [ID]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Talks to a running server (--server, --token or $ONCEPLAN_SERVER, $ONCEPLAN_TOKEN).")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Subcommands:")
		for _, c := range campaignCommands {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
		if len(args) == 0 {
			return exitError{2}
		}
		return nil
	}
	for _, c := range campaignCommands {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
	}
	return fmt.Errorf("campaign: unknown subcommand %q (see `onceplan campaign --help`)", args[0])
}

// campaignView is the part of the API's campaign answer the summary prints.
type campaignView struct {
	ID                string         `json:"id"`
	Name              string         `json:"name"`
	State             string         `json:"state"`
	Provider          string         `json:"provider"`
	PlanHash          string         `json:"plan_hash"`
	PlanVersion       int            `json:"plan_version"`
	RequiredApprovals int            `json:"required_approvals"`
	Approvals         int            `json:"approvals"`
	ApprovalURL       string         `json:"approval_url"`
	Counts            map[string]int `json:"counts"`
	// Outcome is how a campaign that ended ended for its targets.
	Outcome *struct {
		Ending  string `json:"ending"`
		Summary string `json:"summary"`
	} `json:"outcome"`
	NextSteps []struct {
		Kind string `json:"kind"`
		What string `json:"what"`
	} `json:"next_steps"`
	Import *struct {
		Rows          int `json:"rows"`
		Accepted      int `json:"accepted"`
		Duplicate     int `json:"duplicate"`
		RejectedCount int `json:"rejected_count"`
		Rejected      []struct {
			Line   int    `json:"line"`
			Reason string `json:"reason"`
		} `json:"rejected"`
		Duplicates []struct {
			Line        int `json:"line"`
			DuplicateOf int `json:"duplicate_of"`
		} `json:"duplicates"`
	} `json:"import"`
}

// show prints a campaign answer: the JSON as given, or a summary.
func show(env Env, f *apiFlags, raw json.RawMessage) error {
	if f.json {
		_, err := fmt.Fprintln(env.Stdout, string(raw))
		return err
	}
	var v campaignView
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "campaign %s  %q\n", v.ID, v.Name)
	fmt.Fprintf(w, "  state      %s (version %d, provider %s)\n", v.State, v.PlanVersion, v.Provider)
	fmt.Fprintf(w, "  plan hash  %s\n", v.PlanHash)
	fmt.Fprintf(w, "  approvals  %d of %d\n", v.Approvals, v.RequiredApprovals)
	if c := v.Counts; c != nil {
		fmt.Fprintf(w, "  targets    %d planned: %d not started, %d pending, %d done, %d unknown, %d failed, %d stranded, %d revoked\n",
			c["planned"], c["not_started"], c["pending"], c["done"], c["unknown"], c["failed"], c["stranded"], c["revoked"])
	}
	if o := v.Outcome; o != nil {
		fmt.Fprintf(w, "  outcome    %s: %s\n", o.Ending, o.Summary)
		if o.Ending != "sent" {
			for _, st := range v.NextSteps {
				if st.Kind != "none" {
					fmt.Fprintf(w, "    next: %s\n", st.What)
				}
			}
		}
	}
	if v.State == "pending_approval" || v.State == "draft" {
		fmt.Fprintf(w, "  approve at %s\n", v.ApprovalURL)
	}
	if im := v.Import; im != nil {
		fmt.Fprintf(w, "  import     %d rows: %d accepted, %d duplicate, %d rejected\n", im.Rows, im.Accepted, im.Duplicate, im.RejectedCount)
		for _, d := range im.Duplicates {
			fmt.Fprintf(w, "    line %d: duplicate of line %d\n", d.Line, d.DuplicateOf)
		}
		for _, r := range im.Rejected {
			fmt.Fprintf(w, "    line %d: rejected: %s\n", r.Line, r.Reason)
		}
		if im.RejectedCount > len(im.Rejected) {
			fmt.Fprintf(w, "    … and %d more rejected lines (see --json)\n", im.RejectedCount-len(im.Rejected))
		}
	}
	return nil
}

// apiError turns an API error into the command's one line.
func apiError(cmd string, err error) error {
	var ae *apiclient.Error
	if errors.As(err, &ae) {
		where := ""
		if ae.Field != "" {
			where = " (field " + ae.Field + ")"
		}
		if ae.Line > 0 {
			where = fmt.Sprintf(" (line %d)", ae.Line)
		}
		return fmt.Errorf("%s: %s%s [HTTP %d %s]", cmd, ae.Message, where, ae.Status, ae.Code)
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

func readText(flagName, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", fmt.Errorf("give --%s or --%s-file, not both", flagName, flagName)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", flagName, err)
	}
	return string(b), nil
}

func campaignCreate(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("campaign create", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	name := fs.String("name", "", "the campaign's name (required)")
	provider := fs.String("provider", "outbox", "the provider to send through (a NAME the server was given with --provider)")
	from := fs.String("from", "", "the From address, e.g. \"Billing <billing@example.com>\"")
	subject := fs.String("subject", "", "the subject template, e.g. \"Hello {{.first_name}}\"")
	text := fs.String("text", "", "the text body template")
	textFile := fs.String("text-file", "", "read the text body template from this file")
	html := fs.String("html", "", "the HTML body template (optional)")
	htmlFile := fs.String("html-file", "", "read the HTML body template from this file")
	approvals := fs.Int("required-approvals", 1, "distinct approvals needed to freeze the plan")
	targets := fs.String("targets", "", "a target list to import: a .csv or .json file; a list the server refuses leaves no draft behind (the one made for it is discarded)")
	encoding := fs.String("encoding", "", encodingUsage)
	idem := fs.String("idempotency-key", "", "makes a retried create return the first one's campaign")
	if _, err := parseWithArgs(fs, env, args); err != nil {
		return err
	}
	var err error
	body := map[string]any{"name": *name, "provider": *provider, "from": *from, "subject": *subject, "required_approvals": *approvals}
	if body["text"], err = readText("text", *text, *textFile); err != nil {
		return fmt.Errorf("campaign create: %w", err)
	}
	h, err := readText("html", *html, *htmlFile)
	if err != nil {
		return fmt.Errorf("campaign create: %w", err)
	}
	if h != "" {
		body["html"] = h
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("campaign create: %w", err)
	}
	req := apiclient.Request{Method: http.MethodPost, Path: "/campaigns", JSON: body}
	if *idem != "" {
		req.Header = http.Header{"Idempotency-Key": {*idem}}
	}
	var raw json.RawMessage
	if err := c.Do(ctx, req, &raw); err != nil {
		return apiError("campaign create", err)
	}
	if *targets != "" {
		var v campaignView
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		imported, err := importFile(ctx, c, v.ID, *targets, false, "", *encoding)
		if err != nil {
			// The list was refused: the draft made for it would sit there
			// empty. It is discarded (its history keeps it), and the
			// refusal says so.
			what := fmt.Sprintf("campaign create: the target list %s was refused, so the draft %s made for it was discarded (nothing is left to approve; its history keeps it)", *targets, v.ID)
			discard := apiclient.Request{Method: http.MethodPost, Path: "/campaigns/" + url.PathEscape(v.ID) + "/discard",
				JSON: map[string]string{"reason": "its target list " + filepath.Base(*targets) + " was refused at create"}}
			if derr := c.Do(ctx, discard, nil); derr != nil {
				what = fmt.Sprintf("campaign create: the target list %s was refused, and the draft %s made for it could not be discarded (%v): discard it on its draft page", *targets, v.ID, derr)
			}
			return apiError(what, err)
		}
		raw = imported
	}
	return show(env, &af, raw)
}

// encodingUsage documents --encoding.
const encodingUsage = "the CSV's character encoding: utf-8 (the default), iso-8859-1 (Latin-1) or windows-1252 (a spreadsheet's \"CSV\" on Windows)"

func importFile(ctx context.Context, c *apiclient.Client, id, path string, appendList bool, column, encoding string) (json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctype := "text/csv"
	if strings.EqualFold(filepath.Ext(path), ".json") {
		ctype = "application/json"
		if encoding != "" {
			return nil, errors.New("--encoding is for a CSV list: a JSON list is UTF-8")
		}
	} else if encoding != "" {
		// The API's way to say a CSV's encoding; the server refuses one it
		// does not know, naming those it does.
		ctype = mime.FormatMediaType("text/csv", map[string]string{"charset": encoding})
	}
	q := url.Values{}
	if appendList {
		q.Set("append", "true")
	}
	if column != "" {
		q.Set("address_column", column)
	}
	var raw json.RawMessage
	err = c.Do(ctx, apiclient.Request{Method: http.MethodPost, Path: "/campaigns/" + url.PathEscape(id) + "/targets", Query: q, Body: f, ContentType: ctype}, &raw)
	return raw, err
}

func campaignTargets(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("campaign targets", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	appendList := fs.Bool("append", false, "add to the draft's list instead of replacing it")
	column := fs.String("address-column", "", "the CSV column holding the address (default: email or address)")
	encoding := fs.String("encoding", "", encodingUsage)
	pos, err := parseWithArgs(fs, env, args, "ID", "FILE")
	if err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("campaign targets: %w", err)
	}
	raw, err := importFile(ctx, c, pos[0], pos[1], *appendList, *column, *encoding)
	if err != nil {
		return apiError("campaign targets", err)
	}
	return show(env, &af, raw)
}

// campaignAction is a state action taking the campaign id (and a reason
// for those that take one).
func campaignAction(action string, reasonRequired bool) func(ctx context.Context, env Env, args []string) error {
	return func(ctx context.Context, env Env, args []string) error {
		fs := flag.NewFlagSet("campaign "+action, flag.ContinueOnError)
		var af apiFlags
		af.register(fs, env)
		var reason *string
		if action == "reject" || action == "pause" || action == "cancel" {
			help := "why (kept in the campaign's audit trail)"
			if reasonRequired {
				help += "; required"
			}
			reason = fs.String("reason", "", help)
		}
		pos, err := parseWithArgs(fs, env, args, "ID")
		if err != nil {
			return err
		}
		if reasonRequired && strings.TrimSpace(*reason) == "" {
			return fmt.Errorf("campaign %s: --reason is required", action)
		}
		c, err := af.client()
		if err != nil {
			return fmt.Errorf("campaign %s: %w", action, err)
		}
		req := apiclient.Request{Method: http.MethodPost, Path: "/campaigns/" + url.PathEscape(pos[0]) + "/" + action}
		if reason != nil && *reason != "" {
			req.JSON = map[string]string{"reason": *reason}
		}
		var raw json.RawMessage
		if err := c.Do(ctx, req, &raw); err != nil {
			return apiError("campaign "+action, err)
		}
		return show(env, &af, raw)
	}
}

func campaignApprove(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("campaign approve", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	hash := fs.String("plan-hash", "", "the plan hash you reviewed (from `campaign status`); required")
	pos, err := parseWithArgs(fs, env, args, "ID")
	if err != nil {
		return err
	}
	if *hash == "" {
		return errors.New("campaign approve: --plan-hash is required: approve exactly the plan you reviewed (see `onceplan campaign status ID`)")
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("campaign approve: %w", err)
	}
	var raw json.RawMessage
	if err := c.Do(ctx, apiclient.Request{Method: http.MethodPost, Path: "/campaigns/" + url.PathEscape(pos[0]) + "/approve", JSON: map[string]string{"plan_hash": *hash}}, &raw); err != nil {
		return apiError("campaign approve", err)
	}
	return show(env, &af, raw)
}

func campaignStatus(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("campaign status", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	pos, err := parseWithArgs(fs, env, args, "ID")
	if err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("campaign status: %w", err)
	}
	var raw json.RawMessage
	if err := c.Do(ctx, apiclient.Request{Method: http.MethodGet, Path: "/campaigns/" + url.PathEscape(pos[0])}, &raw); err != nil {
		return apiError("campaign status", err)
	}
	return show(env, &af, raw)
}

func campaignList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("campaign list", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	limit := fs.Int("limit", 50, "how many campaigns (1–200)")
	if _, err := parseWithArgs(fs, env, args); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("campaign list: %w", err)
	}
	var page struct {
		Items []struct {
			ID, Name, State, Provider string
			Outcome                   *struct {
				Ending string `json:"ending"`
			} `json:"outcome"`
		} `json:"items"`
	}
	var raw json.RawMessage
	if err := c.Do(ctx, apiclient.Request{Method: http.MethodGet, Path: "/campaigns", Query: url.Values{"limit": {strconv.Itoa(*limit)}}}, &raw); err != nil {
		return apiError("campaign list", err)
	}
	if af.json {
		_, err := fmt.Fprintln(env.Stdout, string(raw))
		return err
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return err
	}
	for _, it := range page.Items {
		state := it.State
		if it.Outcome != nil && it.Outcome.Ending == "incomplete" {
			state += " (incomplete)" // not every target got its effect: `campaign status` says how
		}
		fmt.Fprintf(env.Stdout, "%s  %-24s %-10s %s\n", it.ID, state, it.Provider, it.Name)
	}
	return nil
}
