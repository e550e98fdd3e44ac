package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/toolcall"
)

func runTool(ctx context.Context, env Env, args []string) error {
	return dispatch(ctx, env, "tool", []subcommand{
		{"add", "register a tool's recovery and approval policy for single effects, as the schema's owner role like migrate", runToolAdd},
		{"list", "list the tools and the policy in force for each", runToolList},
	}, args)
}

// runToolAdd registers a tool's policy. The application role may only
// record a tool's first use (no recovery, no approval: migration 0021), so
// this connects as the schema's owner, as `policy add` does.
func runToolAdd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("tool add", flag.ContinueOnError)
	var db dbFlags
	db.registerOwner(fs, env)
	name := fs.String("name", "", "the tool, as calls name it: lower-case letters, digits, '.', '_' and '-', e.g. crm.set_status (required)")
	recovery := fs.String("recovery", "none", "how an attempt whose lease ended without a settle is recovered: dedupe (the outside system applies a key once: the next begin performs it again with the same key), probe (ask --probe-url), or none (unknown, for a person)")
	probeURL := fs.String("probe-url", "", "with --recovery probe: the URL to GET, with {key} where the call's key goes; 200 means the effect exists, 404 that it does not")
	settle := fs.Duration("settle-window", 0, "with --recovery probe: how long after a lease ends a probe's \"not found\" is believed (then the key is free again)")
	dedupeWindow := fs.Duration("dedupe-window", 0, "with --recovery dedupe: how long the outside system honours a key from the first call with it, e.g. 24h for Stripe or Resend (default: for ever); past it a call in doubt is left to a person, never performed again")
	probeRetention := fs.Duration("probe-retention", 0, "with --recovery probe: how long the outside system can be asked about a call, from the first one, e.g. 720h (default: for ever); past it a call in doubt is left to a person")
	approvalRequired := fs.Bool("approval", false, "require a person's approval of each call's exact args before it is performed")
	description := fs.String("description", "", "what the tool does, for the people who approve and resolve its calls")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	rec, err := toolcall.ParseRecovery(*recovery)
	if err != nil {
		return fmt.Errorf("tool add: --recovery %q: want dedupe, probe or none", *recovery)
	}
	p := toolcall.RegisterParams{Tool: *name, Recovery: rec, ProbeURL: *probeURL, SettleWindow: *settle,
		DedupeWindow: *dedupeWindow, ProbeRetention: *probeRetention,
		ApprovalRequired: *approvalRequired, Description: *description, RegisteredBy: cliActor()}
	// Refuse bad input before starting or reaching a database.
	if err := p.Validate(); err != nil {
		return fmt.Errorf("tool add: %s", flagSentence(err))
	}
	return withOwnerDB(ctx, env, db, "tool add", func(pool onceplan.DB) error {
		pol, err := toolcall.Register(ctx, pool, p)
		switch {
		case errors.Is(err, toolcall.ErrNotOwner):
			return notOwnerErr(ctx, pool, "tool add", "register tools")
		case err != nil:
			return fmt.Errorf("tool add: %w", err)
		}
		fmt.Fprintf(env.Stdout, "registered tool %s: %s (by %s); calls begun from now on follow it\n", pol.Tool, pol.Summary(), pol.RegisteredBy)
		return nil
	})
}

// flagSentence names a registration's field as its flag.
func flagSentence(err error) string {
	var fe *onceplan.FieldError
	if errors.As(err, &fe) {
		flag := map[string]string{"tool": "--name", "recovery": "--recovery", "probe_url": "--probe-url",
			"settle_window": "--settle-window", "dedupe_window": "--dedupe-window", "probe_retention": "--probe-retention",
			"description": "--description"}[fe.Field]
		if flag != "" {
			return flag + " " + fe.Reason
		}
	}
	return err.Error()
}

// toolJSON is one tool in `tool list --json`.
type toolJSON struct {
	Tool             string    `json:"tool"`
	Recovery         string    `json:"recovery"`
	ProbeURL         string    `json:"probe_url,omitempty"`
	SettleWindow     string    `json:"settle_window,omitempty"`
	DedupeWindow     string    `json:"dedupe_window,omitempty"`
	ProbeRetention   string    `json:"probe_retention,omitempty"`
	ApprovalRequired bool      `json:"approval_required"`
	FirstUse         bool      `json:"first_use"`
	Description      string    `json:"description,omitempty"`
	RegisteredBy     string    `json:"registered_by"`
	CreatedAt        time.Time `json:"created_at"`
}

// runToolList only reads, so it works as the application role.
func runToolList(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("tool list", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	asJSON := fs.Bool("json", false, "print the tools as a JSON array instead of a table")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		policies, err := toolcall.Policies(ctx, pool)
		if err != nil {
			return fmt.Errorf("tool list: %w", err)
		}
		if *asJSON {
			out := make([]toolJSON, len(policies))
			for i, p := range policies {
				out[i] = toolJSON{Tool: p.Tool, Recovery: string(p.Recovery), ProbeURL: p.ProbeURL, ApprovalRequired: p.ApprovalRequired,
					FirstUse: p.FirstUse, Description: p.Description, RegisteredBy: p.RegisteredBy, CreatedAt: p.CreatedAt.UTC()}
				if p.SettleWindow > 0 {
					out[i].SettleWindow = p.SettleWindow.String()
				}
				if p.DedupeWindow > 0 {
					out[i].DedupeWindow = p.DedupeWindow.String()
				}
				if p.ProbeRetention > 0 {
					out[i].ProbeRetention = p.ProbeRetention.String()
				}
			}
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tRECOVERY\tAPPROVAL\tREGISTERED BY\tCREATED\tPOLICY")
		for _, p := range policies {
			appr := "no"
			if p.ApprovalRequired {
				appr = "required"
			}
			by := p.RegisteredBy
			if p.FirstUse {
				by = "first use by " + by
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Tool, p.Recovery, appr, by, formatTime(p.CreatedAt),
				strings.Join(strings.Fields(p.Summary()), " "))
		}
		return tw.Flush()
	})
}
