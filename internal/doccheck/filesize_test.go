package doccheck

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// maxFileLines is the most lines a hand-written Go file of the product may
// have: a file is read whole, by concern, in one sitting (one handler per
// file, a service's actions split by what they do).
const maxFileLines = 600

// longFiles are the files still over maxFileLines while they are being split
// on other branches (the executor, the ledger's store). Each
// is refused again as soon as it is split: the list only shrinks, and is
// empty once those branches have merged.
var longFiles = map[string]bool{
	"executor/executor.go": true,
	"executor/call.go":     true,
	"ledger/store.go":      true,
}

// generated is the marker of a generated Go file
// (https://go.dev/s/generatedcode).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestGoFilesAreShort: no Go file of the repository that is neither a test
// nor generated (templ's *_templ.go, or one marked "Code generated … DO NOT
// EDIT.") is over maxFileLines lines.
func TestGoFilesAreShort(t *testing.T) {
	files, err := goFiles()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "_templ.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(), f))
		if err != nil {
			t.Fatal(err)
		}
		if generated.Match(b) {
			continue
		}
		checked++
		n := lineCount(b)
		switch {
		case n > maxFileLines && !longFiles[f]:
			t.Errorf("%s is %d lines, over the %d a Go file may have: split it by concern, each new file named after what it holds.", f, n, maxFileLines)
		case n <= maxFileLines && longFiles[f]:
			t.Errorf("%s is %d lines now, within the %d a Go file may have: take it off longFiles.", f, n, maxFileLines)
		}
	}
	if checked == 0 {
		t.Fatal("no Go file was checked; the walk of the tree has changed.")
	}
	for _, f := range slices.Sorted(maps.Keys(longFiles)) {
		if !slices.Contains(files, f) {
			t.Errorf("longFiles names %s, which is not in the tree: take it off the list.", f)
		}
	}
}

// lineCount counts lines as wc -l does, plus a last line without a newline.
func lineCount(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// TestLineCount: lineCount agrees with wc -l on the shapes a file has.
func TestLineCount(t *testing.T) {
	for in, want := range map[string]int{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\nb\n": 2, "\n\n": 2} {
		if got := lineCount([]byte(in)); got != want {
			t.Errorf("lineCount(%q) = %d, want %d", in, got, want)
		}
	}
}
