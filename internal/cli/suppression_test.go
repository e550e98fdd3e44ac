package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/suppression"
)

// TestSuppressionImportReportsLines: an import reports each line it did
// not add by its line number in the file — already suppressed (earlier in
// the file or before), rejected (no address, not an address, an unknown
// reason) — and adds the rest, as the command line's account.
func TestSuppressionImportReportsLines(t *testing.T) {
	t.Parallel()
	pb := setupPolicy(t)
	b := pb.app
	r := b.run(t, runSuppression, "", "add", "--address", "Old@Example.com", "--reason", "complaint")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "suppressed old@example.com (complaint)\n", r.stdout)

	file := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(file, []byte("\uFEFFName,Email,Reason\n"+
		"Ann,ann@example.com,hard_bounce\n"+ // 2 added
		"Old,old@example.com,\n"+ // 3 already suppressed
		"Nobody,,\n"+ // 4 no address
		"Bad,not an address,\n"+ // 5 rejected
		"Ann again,ANN@example.com,\n"+ // 6 already (line 2)
		"Bored,bob@example.com,bored\n"+ // 7 unknown reason
		"\"Cy, Jr.\",cy@example.com\n"), 0o600)) // 8 added, the default reason
	r = b.run(t, runSuppression, "", "import", file)
	require.NoError(t, r.err, r.stderr)
	out := r.stdout
	require.True(t, strings.HasPrefix(out, "7 lines: 2 added, 2 already suppressed, 3 rejected\n"), out)
	for _, want := range []string{"line 3: already suppressed", "line 6: already suppressed", "line 4: rejected: no address",
		"line 5: rejected: address", "line 7: rejected: reason"} {
		require.Contains(t, out, want)
	}

	ann, ok, err := suppression.Lookup(b.ctx, b.pool, "ann@example.com")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, suppression.HardBounce, ann.Reason)
	require.Equal(t, suppression.FromImport, ann.Source)
	require.Equal(t, cliActor(), ann.Actor)
	cy, ok, err := suppression.Lookup(b.ctx, b.pool, "cy@example.com")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, suppression.Manual, cy.Reason)

	// A file without an address column is refused whole, naming line 1.
	bad := filepath.Join(t.TempDir(), "bad.csv")
	require.NoError(t, os.WriteFile(bad, []byte("name\nAnn\n"), 0o600))
	r = b.run(t, runSuppression, "", "import", bad)
	require.ErrorContains(t, r.err, "line 1: the header names no email or address column")

	// Remove needs a reason and records who, as the schema's owner (the
	// server's role removes only in an admin's name); list shows the rest.
	r = b.run(t, runSuppression, "", "remove", "--address", "cy@example.com")
	require.ErrorContains(t, r.err, "--reason is required")
	r = b.run(t, runSuppression, "", "remove", "--address", "cy@example.com", "--reason", "typo in the file")
	requireOneLine(t, r.err)
	require.ErrorContains(t, r.err, "use the URL of the schema's owner role (onceplan_owner)")
	r = pb.owner.run(t, runSuppression, "", "remove", "--address", "cy@example.com", "--reason", "typo in the file")
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "cy@example.com is no longer suppressed (removal recorded by "+cliActor()+")\n", r.stdout)
	r = pb.owner.run(t, runSuppression, "", "remove", "--address", "cy@example.com", "--reason", "again")
	require.ErrorContains(t, r.err, "not suppressed")
	r = b.run(t, runSuppression, "", "list")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "ann@example.com")
	require.Contains(t, r.stdout, "old@example.com")
	require.NotContains(t, r.stdout, "cy@example.com")
	r = b.run(t, runSuppression, "", "list", "--include-removed", "--address", "cy")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "typo in the file")
}

// FuzzReadSuppressionCSV: any input is read without a panic, and every
// line reported is a line of the file after its header.
func FuzzReadSuppressionCSV(f *testing.F) {
	f.Add("email\nann@example.com\n")
	f.Add("address,reason\n\"a@b.c\",hard_bounce\n,\n")
	f.Add("Email\r\nx\r\n\"unterminated\n")
	f.Fuzz(func(t *testing.T, in string) {
		lines, rejected, _ := readSuppressionCSV(strings.NewReader(in))
		n := strings.Count(in, "\n") + 1
		for _, l := range lines {
			require.True(t, l.Line >= 2 && l.Line <= n, "line %d of %d", l.Line, n)
			require.NotEmpty(t, l.Address)
		}
		for _, r := range rejected {
			require.True(t, r.Line >= 2 && r.Line <= n, "line %d of %d", r.Line, n)
		}
	})
}
