package doccheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tableOwner is the package (directory) that owns each table others would
// be tempted to read (docs/ARCHITECTURE.md, "The parts": every package, by
// what it owns).
var tableOwner = map[string]string{
	"effect": "ledger", "effect_response": "ledger", "effect_batch": "ledger", "effect_batch_member": "ledger", "effect_batch_response": "ledger", "effect_bump": "ledger", "bump_policy": "ledger",
	"target_suppressed": "ledger",
	"target":            "plan", "target_list": "plan", "plan": "plan", "plan_target": "plan",
	"campaign": "approval", "draft": "approval", "submission": "approval", "run": "approval",
	"campaign_event": "approval", "approval": "approval", "test_send_message": "approval",
	"suppression": "internal/suppression", "suppression_removal": "internal/suppression",
	"worker_process": "executor",
	"provider_pace":  "internal/provider",
	"app_user":       "internal/auth",
	"river_job":      "jobs", "river_queue": "jobs",
}

// ownerExceptions are the reads and writes of another package's table
// still made, each with why. Test-only seeders (internal/audit/audittest,
// internal/tools/bench, internal/pgtest's factories) write tables directly
// by design and are not scanned.
var ownerExceptions = map[string]string{}

// tableUse finds a statement naming a table: FROM, JOIN, UPDATE or INTO and
// the table's name, not followed by more of a name or by "(" (a function
// its owner publishes, such as effect_attempt()).
var tableUse = regexp.MustCompile(`\b(?:FROM|JOIN|UPDATE|INTO)\s+([a-z_][a-z0-9_]*)\b([^a-z0-9_(]|$)`)

// TestOwnersReadTheirTables: a package reads and writes its own tables;
// another package asks it, through a Go function or a function the owner
// publishes in the schema (docs/ARCHITECTURE.md, "Where each rule lives").
// No statement outside the owner's package names the table.
func TestOwnersReadTheirTables(t *testing.T) {
	files, err := goFiles()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var offences []string
	for _, f := range files {
		dir := path.Dir(f)
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(dir, "internal/audit/audittest") || strings.HasPrefix(dir, "internal/tools/bench") || dir == "internal/pgtest" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tableUse.FindAllStringSubmatch(string(b), -1) {
			table := m[1]
			owner, ok := tableOwner[table]
			if !ok {
				continue
			}
			seen[table] = true
			if dir == owner || strings.HasPrefix(dir, owner+"/") {
				continue
			}
			if _, ok := ownerExceptions[f+" "+table]; ok {
				continue
			}
			offences = append(offences, f+" names "+table+", "+owner+"'s table: ask "+owner+
				" (a Go function, or a function it publishes in a migration).")
		}
	}
	slices.Sort(offences)
	for _, o := range slices.Compact(offences) {
		t.Error(o)
	}
	if !seen["effect"] || !seen["campaign"] {
		t.Fatal("no statement names effect or campaign; the pattern this test reads has changed.")
	}
}
