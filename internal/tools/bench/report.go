package main

// The summary: every scenario records its headline figures against issue
// 8's targets; main prints them as a table at the end and, with -doc,
// writes them into docs/BENCHMARKS.md between two marker lines, with the
// machine and the command, so that the document always shows the last
// full run. The analysis around the markers is written by hand.

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// result is one figure of the summary.
type result struct {
	target string // the numbered target, e.g. "1. executor throughput"
	figure string // what was measured, with its same-run baseline
	goal   string // the target, e.g. "≥ 0.6× bare River"; "" when there is none
	met    string // "yes", "no", or "" when there is no target
}

var results []result

func record(target, figure, goal string, met bool) {
	m := "no"
	if met {
		m = "yes"
	}
	if goal == "" {
		m = ""
	}
	results = append(results, result{target: target, figure: figure, goal: goal, met: m})
}

// printSummary prints the results as a plain table.
func printSummary() {
	if len(results) == 0 {
		return
	}
	slices.SortStableFunc(results, func(a, b result) int { return cmp.Compare(targetNumber(a.target), targetNumber(b.target)) })
	fmt.Println("\nsummary:")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  target\tfigure\tgoal\tmet")
	for _, r := range results {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", r.target, r.figure, r.goal, r.met)
	}
	w.Flush()
}

// targetNumber is the number docs/BENCHMARKS.md gives a target ("7. memory"
// → 7).
func targetNumber(t string) int {
	n, _ := strconv.Atoi(strings.SplitN(t, ".", 2)[0])
	return n
}

// The lines between which -doc writes the summary.
const (
	docBegin = "<!-- make bench: begin (written by internal/tools/bench -doc; edits here are overwritten) -->"
	docEnd   = "<!-- make bench: end -->"
)

// writeDoc replaces the part of the file at path between docBegin and
// docEnd with the machine, the command and the summary. A target this run
// did not measure keeps its row from the run that did, with that run's
// date, so that running one scenario again does not lose the others.
func writeDoc(path string, started time.Time, took time.Duration, machine [][2]string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(old, []byte(docBegin)), bytes.Index(old, []byte(docEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s: the lines %q and %q that mark the generated summary are missing", path, docBegin, docEnd)
	}
	when := started.UTC().Format("2006-01-02 15:04 MST")
	rows := map[int][]string{}
	for _, r := range previousRows(string(old[i:j])) {
		rows[targetNumber(r[0])] = r
	}
	for _, r := range results {
		rows[targetNumber(r.target)] = []string{r.target, strings.ReplaceAll(r.figure, "|", "/"), r.goal, r.met, when}
	}
	var b strings.Builder
	b.WriteString(docBegin + "\n\n")
	fmt.Fprintf(&b, "Last run: %s, %s. Command: `%s`\n\n", when, took.Round(time.Second), benchCommand())
	b.WriteString("| machine of the last run | |\n|---|---|\n")
	for _, kv := range machine {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], kv[1])
	}
	b.WriteString("\n| target | figure (baseline measured in the same run) | goal | met | run |\n|---|---|---|---|---|\n")
	for _, n := range slices.Sorted(maps.Keys(rows)) {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(rows[n], " | "))
	}
	b.WriteString("\n")
	out := append(append(old[:i:i], b.String()...), old[j:]...)
	return os.WriteFile(path, out, 0o644)
}

// previousRows reads the target rows of a summary written before, as
// target, figure, goal, met and run date. A summary written before rows
// had a date gets the date of its "Last full run" line.
func previousRows(section string) [][]string {
	var (
		out  [][]string
		date string
	)
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "Last full run: "); ok {
			date, _, _ = strings.Cut(rest, ",")
		}
		if !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if len(cells) < 4 || targetNumber(cells[0]) == 0 {
			continue // the machine table, a header
		}
		if len(cells) == 4 {
			cells = append(cells, date)
		}
		out = append(out, cells[:5])
	}
	return out
}

// benchCommand is how this run was invoked, as make bench spells it.
func benchCommand() string {
	args := []string{"go run ./internal/tools/bench"}
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-database-url") || strings.HasPrefix(a, "--database-url") {
			continue
		}
		args = append(args, a)
	}
	return "make bench (" + strings.Join(args, " ") + ", on a throw-away cluster started by internal/tools/withpg)"
}

// machine describes where the run happened.
func machine(ctx context.Context, pool *pgxpool.Pool) [][2]string {
	var pg string
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&pg); err != nil {
		pg = "? (" + err.Error() + ")"
	}
	if k := strings.Index(pg, " on "); k > 0 {
		pg = pg[:k]
	}
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err == nil {
		pg += fmt.Sprintf(" (fsync %s, synchronous_commit %s)", fsync, syncCommit)
	}
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	load := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], " ") + " (1, 5, 15 min, at the end of the run)"
		}
	}
	return [][2]string{
		{"CPUs (`nproc`)", fmt.Sprintf("%d × %s", runtime.NumCPU(), cpu)},
		{"memory", mem},
		{"load average", load},
		{"PostgreSQL", pg},
		{"Go", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	}
}
