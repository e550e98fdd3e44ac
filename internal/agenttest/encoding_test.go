package agenttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommandLineDeclaresACSVsEncoding: a Latin-1 list (a spreadsheet's
// "CSV") sent as UTF-8 is refused naming its line, and `campaign create
// --targets` then leaves no draft behind: the one it made is discarded
// (cancelled, nothing to approve, its history says why). With --encoding
// iso-8859-1 the same file is taken; `campaign
// targets --encoding` alike.
func TestCommandLineDeclaresACSVsEncoding(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	latin1 := filepath.Join(t.TempDir(), "list.csv")
	require.NoError(t, os.WriteFile(latin1, []byte("email,name\nann@example.com,M\xfcller\n"), 0o644))
	create := func(extra ...string) []string {
		return w.as("proposer", append([]string{"campaign", "create", "--name", "Latin", "--from", "a@example.com",
			"--subject", "Hello {{.name}}", "--text", "Hi {{.name}}", "--targets", latin1}, extra...)...)
	}

	_, errOut, code := run(t, "", create()...)
	require.NotZero(t, code)
	require.Regexp(t, `^onceplan: campaign create: the target list .*list\.csv was refused, so the draft [0-9a-f-]{36} made for it was discarded `+
		`\(nothing is left to approve; its history keeps it\): .*line 2: column "name" is not valid UTF-8 \(byte 0xFC\)`, errOut)
	discarded := regexp.MustCompile(`draft ([0-9a-f-]{36})`).FindStringSubmatch(errOut)[1]
	var st struct {
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, w.as("proposer", "campaign", "status", discarded, "--json")...)), &st))
	require.Equal(t, "cancelled", st.State, "no draft is left behind")
	_, errOut, code = run(t, "", w.as("proposer", "campaign", "submit", discarded)...)
	require.NotZero(t, code)
	require.Contains(t, errOut, "409")

	out := ok(t, create("--encoding", "iso-8859-1")...)
	require.Contains(t, out, "1 accepted, 0 duplicate, 0 rejected")
	id := regexp.MustCompile(`campaign ([0-9a-f-]{36})`).FindStringSubmatch(out)[1]
	out = ok(t, w.as("proposer", "campaign", "targets", id, latin1, "--encoding", "windows-1252")...)
	require.Contains(t, out, "1 accepted")
	_, errOut, code = run(t, "", w.as("proposer", "campaign", "targets", id, latin1, "--encoding", "ebcdic")...)
	require.NotZero(t, code)
	require.Contains(t, errOut, "ebcdic")
}
