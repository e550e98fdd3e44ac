package doccheck

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// root is the repository's root, two directories up from this package.
var root = sync.OnceValue(func() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		panic("doccheck: the repository root (two directories up) has no go.mod")
	}
	return dir
})

// line is one line of a document, numbered from 1.
type line struct {
	n    int
	text string
}

func readLines(t *testing.T, rel string) []line {
	t.Helper()
	f, err := os.Open(filepath.Join(root(), rel))
	if err != nil {
		t.Fatalf("%s cannot be read: %v", rel, err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		out = append(out, line{n, sc.Text()})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s cannot be read: %v", rel, err)
	}
	return out
}

// skipDir reports whether a directory holds no package of the project:
// hidden directories, testdata, the build output.
func skipDir(rel string, d fs.DirEntry) bool {
	name := d.Name()
	return rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" || name == "node_modules")
}

// goFiles lists the repository's .go files (slash-separated, relative to
// the root).
var goFiles = sync.OnceValues(func() ([]string, error) {
	var out []string
	err := filepath.WalkDir(root(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(), path)
		if d.IsDir() {
			if skipDir(rel, d) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
})

var backticked = regexp.MustCompile("`([^`]+)`")

// TestLayoutNamesEveryPackage: docs/LAYOUT.md's table names every
// directory that holds a Go package, each on a row of its own (one path
// in the row's first cell, and a sentence beside it), and every path it
// names exists.
func TestLayoutNamesEveryPackage(t *testing.T) {
	const doc = "docs/LAYOUT.md"
	listed := map[string]int{} // path → line
	for _, l := range readLines(t, doc) {
		if !strings.HasPrefix(l.text, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l.text, "|"), "|")
		paths := backticked.FindAllStringSubmatch(cells[0], -1)
		if len(paths) != 1 {
			t.Errorf("%s:%d: a row names one directory in its first cell; this one names %d.", doc, l.n, len(paths))
			continue
		}
		p := strings.TrimSuffix(paths[0][1], "/")
		if len(cells) < 2 || strings.TrimSpace(cells[1]) == "" {
			t.Errorf("%s:%d: the row of %s says nothing of what it owns.", doc, l.n, p)
		}
		if first, ok := listed[p]; ok {
			t.Errorf("%s:%d: %s is listed again (first on line %d).", doc, l.n, p, first)
		}
		listed[p] = l.n
		if _, err := os.Stat(filepath.Join(root(), p)); err != nil {
			t.Errorf("%s:%d: the table lists %s, which does not exist in the tree.", doc, l.n, p)
		}
	}
	if len(listed) == 0 {
		t.Fatalf("%s has no table whose rows start with a path in backticks.", doc)
	}

	files, err := goFiles()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, f := range files {
		dir := filepath.ToSlash(filepath.Dir(f))
		if _, ok := listed[dir]; !ok && dir != "." && !slices.Contains(missing, dir) {
			missing = append(missing, dir)
		}
	}
	slices.Sort(missing)
	for _, dir := range missing {
		t.Errorf("%s: the table has no row for %s, which holds a Go package; add one, saying what it owns.", doc, dir)
	}
}

// A reference to code in docs/ARCHITECTURE.md is written in one code span
// as `path/to/file.go (Symbol)` or `path/to/file.go (Symbol, Type.Method)`:
// the file, relative to the repository root, and one or more names it
// declares — a function, type, variable or constant, a method or a struct
// field as Type.Name.
var (
	codeRef    = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go) \\(([^)`]*)\\)`")
	oldCodeRef = regexp.MustCompile("`[A-Za-z0-9_./-]+\\.go` \\(`")
	repoPath   = regexp.MustCompile(`^(cmd|plan|approval|executor|ledger|web|migrations|jobs|internal|clients|docs|scripts)/[A-Za-z0-9_./-]*$`)
	symbolRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
)

// declared returns the names file declares at the top level: functions,
// types, variables and constants, methods as Recv.Name and struct fields
// as Type.Field.
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				names[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			for {
				switch x := typ.(type) {
				case *ast.StarExpr:
					typ = x.X
					continue
				case *ast.IndexExpr:
					typ = x.X
					continue
				case *ast.IndexListExpr:
					typ = x.X
					continue
				}
				break
			}
			if id, ok := typ.(*ast.Ident); ok {
				names[id.Name+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, fld := range st.Fields.List {
							for _, n := range fld.Names {
								names[s.Name.Name+"."+n.Name] = true
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names, nil
}

// docPages lists the project's documents (slash-separated, relative to
// the root): the README, every page of docs/ and of the guide, and the
// clients' own pages. The lab logs (docs/benchmarks/) are records of a
// day, kept as written, and are not among them.
var docPages = sync.OnceValues(func() ([]string, error) {
	out := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "docs/guide/*.md", "clients/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root(), pattern))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root(), f)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
})

// guidePages lists the user guide's pages, docs/guide/*.md.
func guidePages(t *testing.T) []string {
	t.Helper()
	pages, err := docPages()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pages {
		if strings.HasPrefix(p, "docs/guide/") {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/guide/ has no page.")
	}
	return out
}

// TestDocsCodeReferences: every `file.go (Symbol)` in the documents names
// a file that exists and declares each symbol, and every path of the
// repository they name in a code span exists.
func TestDocsCodeReferences(t *testing.T) {
	pages, err := docPages()
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	for _, doc := range pages {
		refs := codeReferences(t, doc, cache)
		if doc == "docs/ARCHITECTURE.md" && refs == 0 {
			t.Fatalf("%s has no `file.go (Symbol)` reference; the pattern this test reads has changed.", doc)
		}
	}
}

// codeReferences checks doc's code references (see TestDocsCodeReferences)
// and returns how many `file.go (Symbol)` it has.
func codeReferences(t *testing.T, doc string, cache map[string]map[string]bool) int {
	t.Helper()
	refs := 0
	for _, l := range readLines(t, doc) {
		if m := oldCodeRef.FindString(l.text); m != "" {
			t.Errorf("%s:%d: %s… splits a code reference in two; write it as one code span, `file.go (Symbol)`.", doc, l.n, m)
		}
		for _, m := range backticked.FindAllStringSubmatch(l.text, -1) {
			path := strings.Fields(m[1])[0]
			if repoPath.MatchString(path) {
				if _, err := os.Stat(filepath.Join(root(), path)); err != nil {
					t.Errorf("%s:%d: names %s, which does not exist in the tree.", doc, l.n, path)
				}
			}
		}
		for _, m := range codeRef.FindAllStringSubmatch(l.text, -1) {
			refs++
			file := m[1]
			names, ok := cache[file]
			if !ok {
				var err error
				names, err = declared(filepath.Join(root(), file))
				if os.IsNotExist(err) {
					t.Errorf("%s:%d: %s does not exist.", doc, l.n, file)
				} else if err != nil {
					t.Errorf("%s:%d: %s cannot be parsed: %v.", doc, l.n, file, err)
				}
				cache[file] = names
			}
			if names == nil {
				continue
			}
			for sym := range strings.SplitSeq(m[2], ",") {
				sym = strings.TrimSpace(sym)
				if !symbolRE.MatchString(sym) {
					t.Errorf("%s:%d: %q in `%s (%s)` is not a Go name; the parentheses hold only names declared in the file, separated by commas.", doc, l.n, sym, file, m[2])
					continue
				}
				if !names[sym] {
					t.Errorf("%s:%d: %s does not declare %s.", doc, l.n, file, sym)
				}
			}
		}
	}
	return refs
}

var nonTest = regexp.MustCompile(`(?m)^(?:type|func) ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\b`)

var testName = regexp.MustCompile(`^((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)(/.*)?$`)

// TestDocsNameExistingTests: every test, fuzz target, benchmark or example
// the documents name in a code span (`TestClaimRace`) is declared as a
// function in a *_test.go file of the repository.
func TestDocsNameExistingTests(t *testing.T) {
	files, err := goFiles()
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = true
		}
	}
	// A name the code declares outside its tests (approval's TestSender)
	// is not a test.
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range nonTest.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = true
		}
	}
	pages, err := docPages()
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, doc := range pages {
		for _, l := range readLines(t, doc) {
			for _, m := range backticked.FindAllStringSubmatch(l.text, -1) {
				for _, word := range strings.Fields(m[1]) {
					tm := testName.FindStringSubmatch(word)
					if tm == nil || tm[1] == "Test" || tm[1] == "Fuzz" || tm[1] == "Benchmark" {
						continue
					}
					named++
					if !funcs[tm[1]] {
						t.Errorf("%s:%d: names %s, but no *_test.go file declares func %s.", doc, l.n, tm[1], tm[1])
					}
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("docs/RELIABILITY.md names no test in a code span; the pattern this test reads has changed.")
	}
}

// A comment (or a message) that cites a document's section names the
// document and the section's heading in quotes: (docs/ARCHITECTURE.md,
// "The gate"), (docs/guide/secure.md, "Database roles"), also inside a Go
// string, where the quotes are escaped. The heading may carry a
// parenthesis the citation leaves out ("Executing one effect" for
// "Executing one effect (package executor)"). A citation of a section of
// the README (the word README, a comma and the heading in quotes) is
// checked against the README's headings.
var citation = regexp.MustCompile(`((?:docs/)?(?:[a-z]+/)*[A-Za-z-]+\.md|README), \\?"([^"\\]+)\\?"`)

// headings returns a document's headings, each without its leading #s.
func headings(t *testing.T, doc string) []string {
	var out []string
	fence := false
	for _, l := range readLines(t, doc) {
		if strings.HasPrefix(l.text, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l.text, "#") {
			out = append(out, strings.TrimSpace(strings.TrimLeft(l.text, "#")))
		}
	}
	return out
}

// cites reports whether a citation of section names one of heads: the
// heading itself, or the heading up to a parenthesis or a colon.
func cites(heads []string, section string) bool {
	for _, h := range heads {
		if h == section || strings.HasPrefix(h, section+" (") || strings.HasPrefix(h, section+":") {
			return true
		}
	}
	return false
}

// commentText joins a file's comment lines so that a citation wrapped
// over two lines reads as one; it returns the text and, for each byte, its
// line number.
func commentText(src string) (string, []int) {
	var b strings.Builder
	var lines []int
	prefix := regexp.MustCompile(`^\s*(//|--|#)\s?`)
	for i, l := range strings.Split(src, "\n") {
		loc := prefix.FindStringIndex(l)
		text := l
		if loc != nil {
			text = l[loc[1]:]
		}
		s := text + " "
		b.WriteString(s)
		for range len(s) {
			lines = append(lines, i+1)
		}
	}
	return b.String(), lines
}

// TestCitedSectionsExist: every comment in the code (Go, templ, SQL,
// shell, the Makefile) and every doc that cites a section of a document
// as (docs/X.md, "Heading") names a heading that document has.
func TestCitedSectionsExist(t *testing.T) {
	heads := map[string][]string{}
	var files []string
	err := filepath.WalkDir(root(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(), path)
		if d.IsDir() {
			if skipDir(rel, d) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".templ", ".sql", ".sh", ".md", ".yaml", ".yml":
			if !strings.HasSuffix(path, "_templ.go") {
				files = append(files, filepath.ToSlash(rel))
			}
		}
		if d.Name() == "Makefile" {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root(), f))
		if err != nil {
			t.Fatal(err)
		}
		text, lineOf := commentText(string(b))
		for _, m := range citation.FindAllStringSubmatchIndex(text, -1) {
			doc, section := text[m[2]:m[3]], text[m[4]:m[5]]
			rel := doc
			if doc == "README" {
				rel = "README.md"
			} else if !strings.HasPrefix(rel, "docs/") {
				// Relative to the citing file: a doc in docs/ citing
				// another, or README citing docs/….
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(f), doc))
			}
			if _, err := os.Stat(filepath.Join(root(), rel)); err != nil {
				continue // not a document of this repository
			}
			if _, ok := heads[rel]; !ok {
				heads[rel] = headings(t, rel)
			}
			section = strings.Join(strings.Fields(section), " ")
			if !cites(heads[rel], section) {
				t.Errorf("%s:%d: cites %s, %q, but %s has no heading %q.", f, lineOf[m[0]], doc, section, rel, section)
			}
		}
	}
	if len(heads) == 0 {
		t.Fatalf("no file cites a section of a document as (docs/X.md, %q); the pattern this test reads has changed.", "Heading")
	}
}

// readmeMaxWords is the README's length limit: what it is and for whom,
// the two commands, a tour, what it does not do and where to go next.
// How-to belongs in the guide, docs/guide/.
const readmeMaxWords = 1500

// TestReadmeIsShortAndLinksTheGuide: the README stays under its limit (in
// words as `wc -w` counts them), links every page of the guide, and
// neither it nor the guide links a lab log (docs/benchmarks/: records of
// a day, which docs/BENCHMARKS.md lists).
func TestReadmeIsShortAndLinksTheGuide(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n > readmeMaxWords {
		t.Errorf("README.md has %d words, over %d: move how-to into a page of docs/guide/ and link it.", n, readmeMaxWords)
	}
	linked := map[string]bool{}
	for _, l := range mdLinks(t, "README.md") {
		linked[l.file] = true
	}
	for _, page := range guidePages(t) {
		if !linked[page] {
			t.Errorf("README.md does not link %s: every page of the guide is one click from the README.", page)
		}
	}
	for _, doc := range append([]string{"README.md"}, guidePages(t)...) {
		for _, l := range mdLinks(t, doc) {
			if strings.HasPrefix(l.file, "docs/benchmarks/") {
				t.Errorf("%s:%d: links the lab log %s; the README and the guide link docs/BENCHMARKS.md instead.", doc, l.line, l.file)
			}
		}
	}
}

// TestGuidePagesSayWhatTheyAreFor: every page of the guide starts with its
// title and, first thing under it, whom the page is for ("This page is
// for …"), so a reader knows at once whether it is theirs.
func TestGuidePagesSayWhatTheyAreFor(t *testing.T) {
	for _, page := range guidePages(t) {
		var text []string
		for _, l := range readLines(t, page) {
			if strings.TrimSpace(l.text) != "" {
				text = append(text, l.text)
			}
			if len(text) == 2 {
				break
			}
		}
		if len(text) < 2 || !strings.HasPrefix(text[0], "# ") || !strings.HasPrefix(text[1], "This page is for ") {
			t.Errorf("%s: starts with its \"# \" title and then \"This page is for …\": whom it is for, and what they do with it.", page)
		}
	}
}

// mdLink is a relative link of a Markdown document: the file it points to
// (slash-separated, relative to the root; the document itself for a bare
// #anchor) and the anchor, if any.
type mdLink struct {
	line   int
	target string
	file   string
	anchor string
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdLinks returns doc's relative links, outside code blocks and spans.
func mdLinks(t *testing.T, doc string) []mdLink {
	t.Helper()
	var out []mdLink
	fence := false
	for _, l := range readLines(t, doc) {
		if strings.HasPrefix(strings.TrimSpace(l.text), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		text := backticked.ReplaceAllString(l.text, "``")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
			}
			out = append(out, mdLink{line: l.n, target: target, file: file, anchor: anchor})
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, letters, digits,
// spaces, hyphens and underscores kept, every space a hyphen.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown document's headings, a repeated
// one numbered as GitHub numbers it (-1, -2, …).
func anchors(t *testing.T, doc string) map[string]bool {
	out := map[string]bool{}
	for _, h := range headings(t, doc) {
		s := slug(h)
		for n := 1; out[s]; n++ {
			if !out[s+"-"+strconv.Itoa(n)] {
				s = s + "-" + strconv.Itoa(n)
				break
			}
		}
		out[s] = true
	}
	return out
}

// TestDocLinksResolve: every relative link in the documents (the README,
// docs/ with the guide and the lab logs, the clients' pages) names a file
// or directory of the repository, and a link to a heading (#anchor) names
// a heading that document has.
func TestDocLinksResolve(t *testing.T) {
	pages, err := docPages()
	if err != nil {
		t.Fatal(err)
	}
	logs, err := filepath.Glob(filepath.Join(root(), "docs", "benchmarks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range logs {
		rel, _ := filepath.Rel(root(), f)
		pages = append(pages, filepath.ToSlash(rel))
	}
	cache := map[string]map[string]bool{}
	links := 0
	for _, doc := range pages {
		for _, l := range mdLinks(t, doc) {
			links++
			if _, err := os.Stat(filepath.Join(root(), l.file)); err != nil {
				t.Errorf("%s:%d: links %s, but %s does not exist.", doc, l.line, l.target, l.file)
				continue
			}
			if l.anchor == "" {
				continue
			}
			if !strings.HasSuffix(l.file, ".md") {
				t.Errorf("%s:%d: links %s, an anchor in a file that is not Markdown.", doc, l.line, l.target)
				continue
			}
			if _, ok := cache[l.file]; !ok {
				cache[l.file] = anchors(t, l.file)
			}
			if !cache[l.file][l.anchor] {
				t.Errorf("%s:%d: links %s, but %s has no heading whose anchor is #%s.", doc, l.line, l.target, l.file, l.anchor)
			}
		}
	}
	if links == 0 {
		t.Fatal("the documents have no relative link; the pattern this test reads has changed.")
	}
}
