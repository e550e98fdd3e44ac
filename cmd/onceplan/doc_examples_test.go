package main

// The guide's examples, run as printed: a person with a fresh checkout
// types `make run`, then, in a second terminal in the checkout, the
// commands of the guide's sections one after the other — the API with
// curl (docs/guide/send-a-campaign.md), an agent's tool call with curl,
// the Python client, the TypeScript client (docs/guide/tool-calls.md) —
// and reads what they print. The only change is the server's address: the
// tests never listen on a fixed port, so http://127.0.0.1:8080 is
// replaced by the address serve bound. The provider URLs
// docs/guide/choose-a-provider.md shows are parsed as `serve --provider`
// parses them, and `ONCEPLAN_PROVIDERS=… make run` is what it says.

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// The guide's pages whose examples run, relative to this package.
const (
	sendGuide     = "../../docs/guide/send-a-campaign.md"
	toolGuide     = "../../docs/guide/tool-calls.md"
	providerGuide = "../../docs/guide/choose-a-provider.md"
)

// mdBlock is a fenced code block of a Markdown file, with the file and
// the heading it is under.
type mdBlock struct {
	file    string
	heading string
	lang    string
	text    string
}

// mdBlocks reads the fenced code blocks of a Markdown file.
func mdBlocks(t *testing.T, path string) []mdBlock {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var (
		out     []mdBlock
		heading string
		cur     *mdBlock
	)
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &mdBlock{file: path, heading: heading, lang: strings.TrimPrefix(trimmed, "```")}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line
		case strings.HasPrefix(trimmed, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(trimmed, "#"))
		}
	}
	return out
}

// block is the only block of lang under heading.
func block(t *testing.T, blocks []mdBlock, heading, lang string) string {
	t.Helper()
	var found []string
	file := "the document"
	for _, b := range blocks {
		file = b.file
		if b.heading == heading && b.lang == lang {
			found = append(found, b.text)
		}
	}
	require.Len(t, found, 1, "%s: one %s block under %q", file, lang, heading)
	return found[0]
}

// printed are the outputs a block says its commands print: a
// comment line right after a command (a line that is neither blank nor a
// comment), and a command's own trailing comment when it reads as output
// (a JSON value or a number). "…" in them stands for anything.
func printed(script string) []*regexp.Regexp {
	var out []*regexp.Regexp
	prevCommand := false
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "# "):
			if prevCommand {
				out = append(out, outputPattern(strings.TrimPrefix(trimmed, "# ")))
			}
			prevCommand = false
			continue
		case trimmed == "":
			prevCommand = false
			continue
		}
		prevCommand = true
		if i := strings.LastIndex(line, " # "); i >= 0 {
			c := strings.TrimSpace(line[i+3:])
			if c != "" && strings.ContainsAny(c[:1], `"{[0123456789`) {
				out = append(out, outputPattern(c))
			}
		}
	}
	return out
}

// outputPattern matches one printed line; "…" stands for anything.
func outputPattern(s string) *regexp.Regexp {
	parts := strings.Split(s, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`)
}

// requirePrinted requires each of want to match a line of got, in order.
func requirePrinted(t *testing.T, what string, want []*regexp.Regexp, got string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && !w.MatchString(lines[i]) {
			i++
		}
		require.Less(t, i, len(lines), "%s: the guide says it prints a line matching %s; it printed:\n%s", what, w, got)
		i++
	}
}

// copyTree copies src to dst, leaving out the directories named in skip.
func copyTree(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			for _, s := range skip {
				if d.Name() == s {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
}

// TestDocExamplesRunAsPrinted runs the guide's examples in a fresh
// checkout (the binary as ./bin/onceplan, the clients' sources) beside
// `make run`'s server on the embedded default, and checks what they print
// against what the guide says they print.
func TestDocExamplesRunAsPrinted(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq", "python3", "node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the guide's examples need %s, which is not installed", tool)
		}
	}
	send, tools := mdBlocks(t, sendGuide), mdBlocks(t, toolGuide)

	// The provider URLs, as serve parses them: every URL the page's
	// tables start a row with, and every --provider it writes out.
	page, err := os.ReadFile(providerGuide)
	require.NoError(t, err)
	urls := regexp.MustCompile("(?m)^\\| `([a-z]+://[^`]+)`").FindAllStringSubmatch(string(page), -1)
	require.GreaterOrEqual(t, len(urls), 9, "the provider table's URLs")
	for _, m := range urls {
		_, err := provider.ParseFlag("p=" + m[1])
		require.NoError(t, err, "%s: the provider URL %s", providerGuide, m[1])
	}
	flags := regexp.MustCompile("`--provider ([a-z]+=[a-z]+://[^`]+)`").FindAllStringSubmatch(string(page), -1)
	require.NotEmpty(t, flags)
	for _, m := range flags {
		_, err := provider.ParseFlag(m[1])
		require.NoError(t, err, "%s: %s", providerGuide, m[0])
	}

	// ONCEPLAN_PROVIDERS=… make run: the Makefile gives no --provider of
	// its own, which would win over it.
	mk := exec.Command("make", "-n", "run")
	mk.Dir = "../.."
	mk.Env = append(os.Environ(), "ONCEPLAN_PROVIDERS=mail=resend://API_KEY@api.resend.com")
	out, err := mk.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^\./bin/onceplan serve --data-dir \S+ --demo\s*$`, string(out))
	mk = exec.Command("make", "-n", "run")
	mk.Dir = "../.."
	mk.Env = append(os.Environ(), "ONCEPLAN_PROVIDERS=")
	out, err = mk.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `--provider "outbox=maildir://`)

	// A fresh checkout: the binary `make run` builds, the clients'
	// sources (not the repository's own node_modules and dist, which the
	// TypeScript suite builds in place).
	dir, err := os.MkdirTemp("", "onceplan-readme-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	data := filepath.Join(dir, ".onceplan")
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(data, "pg", "postmaster.pid")); err == nil {
			stop := exec.Command(binary, "migrate", "--data-dir", data)
			stop.Run()
		}
		os.RemoveAll(dir)
	})
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(binary, filepath.Join(dir, "bin", "onceplan")))
	copyTree(t, "../../clients/python", filepath.Join(dir, "clients", "python"), "__pycache__")
	copyTree(t, "../../clients/typescript", filepath.Join(dir, "clients", "typescript"), "node_modules", "dist", "test")

	// make run, on the embedded default, as the Makefile starts it.
	env := []string{"DATABASE_URL=", "ONCEPLAN_ADMIN_EMAIL=", "ONCEPLAN_ADMIN_PASSWORD=", "ONCEPLAN_PROVIDERS=", "ONCEPLAN_SERVER=", "ONCEPLAN_TOKEN="}
	srv := exec.Command("./bin/onceplan", "serve", "--data-dir", "./.onceplan", "--demo", "--listen", "127.0.0.1:0",
		"--provider", "outbox=maildir://"+filepath.Join(data, "outbox")+"?rate=5/s")
	srv.Dir = dir
	srv.Env = append(os.Environ(), env...)
	stderr, err := srv.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	found := make(chan string, 1)
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- "http://" + m[1]
			}
		}
		close(found)
	}()
	var base string
	select {
	case u, ok := <-found:
		require.True(t, ok, "serve exited before listening")
		base = u
	case <-time.After(90 * time.Second):
		srv.Process.Kill()
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT)
		srv.Wait()
	})

	// The sections' commands, typed into one terminal in the checkout;
	// the Python example runs twice, as its section says.
	curl := block(t, send, "The API with curl", "sh")
	agent := block(t, tools, "With curl", "sh")
	python := block(t, tools, "From Python", "sh")
	typescript := block(t, tools, "From TypeScript", "sh")
	steps := []struct{ name, script string }{
		{"the API with curl", curl}, {"a tool call with curl", agent},
		{"the Python example", python}, {"the Python example again", python}, {"the TypeScript example", typescript},
	}
	var script strings.Builder
	script.WriteString("set -eo pipefail\nexport ONCEPLAN_SERVER=" + base + "\n")
	for i, s := range steps {
		script.WriteString("echo '@@step " + strings.Repeat("|", i) + "@@'\n")
		script.WriteString(strings.ReplaceAll(s.script, "http://127.0.0.1:8080", base))
	}
	sh := exec.Command("bash", "-c", script.String())
	sh.Dir = dir
	sh.Env = append(os.Environ(), env...)
	var stdout, errOut strings.Builder
	sh.Stdout, sh.Stderr = &stdout, &errOut
	require.NoError(t, sh.Run(), "the guide's commands failed:\n%s\n%s\nserve:\n%s", stdout.String(), errOut.String(), logs.String())

	t.Logf("the guide's commands printed:\n%s", stdout.String())
	got := regexp.MustCompile(`(?m)^@@step \|*@@$`).Split(stdout.String(), -1)[1:]
	require.Len(t, got, len(steps))
	for i, s := range steps {
		if i == 3 {
			// Run again, it replays, as the section says below it.
			require.Regexp(t, `(?m)^replayed op-1 \{"id": "op-1", "key": "v1:[0-9a-f]{64}", "customer": "customer-17", "status": "gold"\}$`, got[i], s.name)
			continue
		}
		requirePrinted(t, s.name, printed(s.script), got[i])
	}
	lines := func(p string) int {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return strings.Count(string(b), "\n")
	}
	require.Equal(t, 1, lines(filepath.Join(data, "crm.jsonl")), "the Python example's CRM applied its call once")
	require.Equal(t, 1, lines(filepath.Join(dir, "crm.log")), "the TypeScript example's CRM applied its call once")

	// The TypeScript section prints the example it runs, whole.
	example, err := os.ReadFile("../../clients/typescript/examples/set-status.mjs")
	require.NoError(t, err)
	require.Equal(t, string(example), block(t, tools, "From TypeScript", "js"))

	// The TypeScript package's README: installed into a project of one's
	// own as it says (its two paths are the reader's).
	install := block(t, mdBlocks(t, "../../clients/typescript/README.md"), "Install", "sh")
	project := t.TempDir()
	install = strings.ReplaceAll(install, "/path/to/your/project", project)
	install = strings.ReplaceAll(install, "/path/to/onceplan", dir)
	sh = exec.Command("bash", "-c", "set -eo pipefail\n"+install)
	sh.Dir = dir
	sh.Env = append(os.Environ(), env...)
	out, err = sh.CombinedOutput()
	require.NoError(t, err, "%s", out)
	requirePrinted(t, "the TypeScript package's install", printed(install), string(out))
	use := exec.Command("node", "--input-type=module", "-e", `import { Client, subject } from "@onceplan/client"; console.log(typeof Client, subject("x").kind)`)
	use.Dir = project
	out, err = use.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "function subject\n", string(out))
}
