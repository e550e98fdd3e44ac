// Command testrun runs `go test` and says how long it will take and how
// long it took:
//
//	go run ./internal/tools/testrun [-times FILE] [-suite NAME] -- GO-TEST-ARGS...
//
// Before the run it prints an estimate: the last run's total from FILE
// (kept in the build directory, bin/, so a fresh clone has none), or the
// suite's fixed estimate. It runs `go test -json GO-TEST-ARGS`, prints
// what plain `go test` would print as it comes, and at the end a table of
// each package's time (and, for a suite of one package, each top-level
// test's), slowest first. It records the run's times in FILE when every
// package passed, and exits with go test's code.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// estimates are the fixed estimates for a suite never run here, from the
// times docs/TESTING.md records (a quiet 2-core machine; a busy one takes
// up to three times as long).
var estimates = map[string]string{
	"test":        "about 10 minutes on a quiet 2-core machine, up to 30 on a busy one",
	"test-faults": "about 2 minutes on a quiet 2-core machine, up to 5 on a busy one",
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// record is what FILE keeps of a run.
type record struct {
	Suite    string             `json:"suite"`
	Finished time.Time          `json:"finished"`
	Seconds  float64            `json:"seconds"`
	Packages map[string]float64 `json:"packages"`
}

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("testrun", flag.ContinueOnError)
	times := fs.String("times", "bin/test-times.json", "file that keeps the last passing run's times")
	suite := fs.String("suite", "test", "the suite's name, for the estimate: "+strings.Join(slices.Sorted(maps.Keys(estimates)), ", "))
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	path := *times
	if *suite != "test" {
		path = strings.TrimSuffix(path, ".json") + "-" + *suite + ".json"
	}
	fmt.Println(estimate(path, *suite))

	cmd := exec.Command("go", append([]string{"test", "-json"}, fs.Args()...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	pkgs, tests, failed := follow(out, os.Stdout, verbose(fs.Args()))
	err = cmd.Wait()
	total := time.Since(start)
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "testrun:", err)
		code = 2
	}
	report(os.Stdout, pkgs, tests, total)
	if code == 0 && !failed {
		if err := save(path, record{Suite: *suite, Finished: time.Now().UTC(), Seconds: total.Seconds(), Packages: pkgs}); err != nil {
			fmt.Fprintln(os.Stderr, "testrun: keeping the times:", err)
		}
	}
	return code
}

// estimate is the line printed before the run.
func estimate(path, suite string) string {
	var last record
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &last) == nil && last.Seconds > 0 {
		return fmt.Sprintf("make %s: the last passing run here took %s (%s, %s); a busy machine takes longer.",
			suite, round(time.Duration(last.Seconds*float64(time.Second))), last.Finished.Format("2006-01-02 15:04 MST"), path)
	}
	if e, ok := estimates[suite]; ok {
		return fmt.Sprintf("make %s: %s (no earlier run recorded in %s).", suite, e, path)
	}
	return fmt.Sprintf("make %s: no earlier run recorded in %s.", suite, path)
}

// follow prints what plain go test prints, from the JSON events on r
// (with verbose, everything; without it, a failed test's output and the
// packages' lines), and collects each package's elapsed time and each
// top-level test's.
func follow(r io.Reader, w io.Writer, verbose bool) (pkgs, tests map[string]float64, failed bool) {
	pkgs, tests = map[string]float64{}, map[string]float64{}
	held := map[string][]string{} // a running test's output, by package and test
	flush := func(key string) {
		for _, line := range held[key] {
			fmt.Fprint(w, line)
		}
		delete(held, key)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(w, sc.Text()) // not an event
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "output":
			switch {
			case verbose:
				fmt.Fprint(w, e.Output)
			case e.Test != "":
				held[key] = append(held[key], e.Output)
			case e.Output != "PASS\n":
				fmt.Fprint(w, e.Output)
			}
		case "pass", "skip":
			delete(held, key)
		case "fail":
			failed = true
			if e.Test == "" {
				// A package that failed without its tests failing (a
				// panic, a timeout): whatever its tests said so far.
				for k := range held {
					if strings.HasPrefix(k, e.Package+" ") {
						flush(k)
					}
				}
			}
			flush(key)
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		switch {
		case e.Test == "" && e.Package != "" && e.Action != "skip":
			pkgs[e.Package] = e.Elapsed
		case e.Test != "" && !strings.Contains(e.Test, "/"):
			tests[e.Package+" "+e.Test] = e.Elapsed
		}
	}
	return pkgs, tests, failed
}

// verbose says whether go test's arguments ask for -v.
func verbose(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		switch strings.TrimLeft(a, "-") {
		case "v", "v=true", "test.v", "test.v=true":
			return true
		}
	}
	return false
}

// report prints the packages' times, slowest first; with one package, its
// ten slowest tests instead.
func report(w io.Writer, pkgs, tests map[string]float64, total time.Duration) {
	type row struct {
		name string
		secs float64
	}
	rows := func(m map[string]float64) []row {
		var out []row
		for k, v := range m {
			out = append(out, row{k, v})
		}
		slices.SortFunc(out, func(a, b row) int { return cmp.Or(cmp.Compare(b.secs, a.secs), strings.Compare(a.name, b.name)) })
		return out
	}
	title, list := "each package's time", rows(pkgs)
	if len(pkgs) == 1 {
		title, list = "the slowest tests", rows(tests)
		list = list[:min(len(list), 10)]
	}
	fmt.Fprintf(w, "\n%s, slowest first (the whole run: %s, build included):\n", title, round(total))
	for _, r := range list {
		fmt.Fprintf(w, "  %8s  %s\n", round(time.Duration(r.secs*float64(time.Second))), r.name)
	}
}

func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// save writes rec to path, by way of a temporary file.
func save(path string, rec record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
