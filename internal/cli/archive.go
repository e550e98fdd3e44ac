package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// archiveOutput is `archive --json`.
type archiveOutput struct {
	Campaign   string `json:"campaign"`
	Name       string `json:"name"`
	ArchivedBy string `json:"archived_by"`
	ArchivedAt string `json:"archived_at"`
	Attempts   int64  `json:"attempts"`
	Answers    int64  `json:"answers"`
	Calls      int64  `json:"calls"`
	Bumps      int64  `json:"bumps"`
}

// runArchive moves a finished campaign's attempts, raw answers, batch
// calls and bumps out of the ledger's hot tables (docs/ARCHITECTURE.md, "The
// archive"): the next campaigns' claims no longer walk them, while the
// audit, the export and the pages still read them. It connects as the app
// role, like audit; the database refuses what may not be archived.
func runArchive(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	asJSON := fs.Bool("json", false, "print what was archived as JSON")
	campaign, err := campaignArg(fs, env, args, "archive", "onceplan archive CAMPAIGN (its id or its name)",
		"Usage: onceplan archive CAMPAIGN [flags]\n\n"+
			"Moves a finished campaign's ledger rows (attempts, raw answers, batch calls, bumps) out of the\n"+
			"tables every running campaign uses, in one transaction. The campaign must be cancelled,\n"+
			"or completed with every target settled for good (done, failed for good, stranded, revoked\n"+
			"or suppressed), with no target pending or unknown; afterwards it can never run again,\n"+
			"and `onceplan audit` and the web UI still answer for it exactly as before.\n"+
			"CAMPAIGN is the campaign's id, or its name when no other campaign has it.\n\nFlags:\n")
	if err != nil {
		return err
	}
	return withDB(ctx, env, db, func(pool onceplan.DB) error {
		c, err := audit.FindCampaign(ctx, pool, campaign)
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		a, err := ledger.NewStore(pool).ArchiveCampaign(ctx, c.ID, cliActor())
		var refused *ledger.NotArchivedError
		if errors.As(err, &refused) {
			return fmt.Errorf("archive: campaign %q was not archived: %s", c.Name, refused.Reason)
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		out := archiveOutput{Campaign: c.ID, Name: c.Name, ArchivedBy: a.By, ArchivedAt: a.At.UTC().Format("2006-01-02T15:04:05Z"),
			Attempts: a.Attempts, Answers: a.Answers, Calls: a.Calls, Bumps: a.Bumps}
		if *asJSON {
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		fmt.Fprintf(env.Stdout, "archived campaign %q (%s): %d attempts, %d raw answers, %d batch calls, %d bumps moved out of the hot tables, by %s\n",
			c.Name, c.ID, a.Attempts, a.Answers, a.Calls, a.Bumps, a.By)
		return nil
	})
}
