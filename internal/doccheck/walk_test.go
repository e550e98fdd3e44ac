package doccheck

import (
	"fmt"
	"go/ast"
	"go/types"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/onceplan/onceplan"

// program is the project's packages loaded from source with their types,
// and every function declared in them, by its name (walkName).
type program struct {
	pkgs  []*packages.Package
	funcs map[string]*funcDecl
}

type funcDecl struct {
	pkg  *packages.Package
	decl *ast.FuncDecl
}

var loadProgram = sync.OnceValues(func() (*program, error) {
	cfg := &packages.Config{Dir: root(), Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
		packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	p := &program{pkgs: pkgs, funcs: map[string]*funcDecl{}}
	for _, pkg := range pkgs {
		if len(pkg.Errors) > 0 {
			return nil, fmt.Errorf("loading %s: %v", pkg.PkgPath, pkg.Errors)
		}
		for _, f := range pkg.Syntax {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					p.funcs[walkName(pkg.TypesInfo.Defs[fd.Name].(*types.Func))] = &funcDecl{pkg, fd}
				}
			}
		}
	}
	return p, nil
})

// walkName names a function: its package's path in the module, and its
// receiver's type for a method ("approval.Service.Approve").
func walkName(f *types.Func) string {
	name := f.Name()
	if recv := f.Type().(*types.Signature).Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		switch t := t.(type) {
		case *types.Named:
			name = t.Obj().Name() + "." + name
		case *types.Interface:
			name = "interface." + name
		}
	}
	if f.Pkg() == nil {
		return name
	}
	return rel(f.Pkg().Path()) + "." + name
}

// rel is a package's path in the module ("web/api").
func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

// entry is one call that goes from one of the project's packages into
// another: the callee, and the packages on the call path above it.
type entry struct {
	from, to string // packages
	callee   string // the callee's name without its package
	stack    []string
}

// walk follows, from function start, every call to a function of the
// project into its body, in the order they run — every branch — and
// returns the calls that enter another package. A call of an interface's method
// follows each of the project's types that implement it. A function
// already on the call path is not followed again (recursion).
func (p *program) walk(start string) []entry {
	var out []entry
	var visit func(name string, stack []string, onPath map[string]bool)
	visit = func(name string, stack []string, onPath map[string]bool) {
		fd := p.funcs[name]
		if fd == nil || onPath[name] {
			return
		}
		onPath[name] = true
		defer delete(onPath, name)
		info := fd.pkg.TypesInfo
		here := rel(fd.pkg.PkgPath)
		var walkNode func(n ast.Node)
		walkNode = func(n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				// As it runs: the receiver and the arguments first, then
				// the callee, then the function literals it was given
				// (which it calls, if at all, once it runs).
				var lits []*ast.FuncLit
				switch fn := ast.Unparen(call.Fun).(type) {
				case *ast.SelectorExpr:
					walkNode(fn.X)
				case *ast.FuncLit:
					lits = append(lits, fn)
				}
				for _, a := range call.Args {
					if fl, ok := a.(*ast.FuncLit); ok {
						lits = append(lits, fl)
					} else {
						walkNode(a)
					}
				}
				for _, callee := range p.callees(info, call) {
					cf := p.funcs[callee]
					if cf == nil {
						continue
					}
					to := rel(cf.pkg.PkgPath)
					next := stack
					if to != here {
						out = append(out, entry{from: here, to: to, callee: strings.TrimPrefix(callee, to+"."), stack: slices.Clone(stack)})
						next = append(slices.Clone(stack), to)
					}
					visit(callee, next, onPath)
				}
				for _, fl := range lits {
					walkNode(fl.Body)
				}
				return false
			})
		}
		walkNode(fd.decl.Body)
	}
	fd := p.funcs[start]
	if fd == nil {
		return nil
	}
	visit(start, []string{rel(fd.pkg.PkgPath)}, map[string]bool{})
	return out
}

// callees are the project's functions call may run.
func (p *program) callees(info *types.Info, call *ast.CallExpr) []string {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		id = fn.Sel
	case *ast.IndexExpr:
		if sel, ok := fn.X.(*ast.SelectorExpr); ok {
			id = sel.Sel
		} else if i, ok := fn.X.(*ast.Ident); ok {
			id = i
		}
	}
	if id == nil {
		return nil
	}
	f, ok := info.Uses[id].(*types.Func)
	if !ok || f.Pkg() == nil || !strings.HasPrefix(f.Pkg().Path(), module) {
		return nil
	}
	f = f.Origin()
	recv := f.Type().(*types.Signature).Recv()
	if recv == nil || !types.IsInterface(recv.Type()) {
		return []string{walkName(f)}
	}
	// An interface's method: each of the project's types that implement
	// the interface, judged in the package that declares the type.
	iface, _ := recv.Type().(*types.Named)
	var out []string
	for _, pkg := range p.pkgs {
		var it *types.Interface
		if iface != nil {
			for _, imp := range append(pkg.Types.Imports(), pkg.Types) {
				if imp.Path() == iface.Obj().Pkg().Path() {
					if o, ok := imp.Scope().Lookup(iface.Obj().Name()).(*types.TypeName); ok {
						it, _ = o.Type().Underlying().(*types.Interface)
					}
				}
			}
		}
		if it == nil {
			continue
		}
		for _, name := range pkg.Types.Scope().Names() {
			tn, ok := pkg.Types.Scope().Lookup(name).(*types.TypeName)
			if !ok || types.IsInterface(tn.Type()) {
				continue
			}
			for _, t := range []types.Type{tn.Type(), types.NewPointer(tn.Type())} {
				if types.Implements(t, it) {
					if m, _, _ := types.LookupFieldOrMethod(t, true, pkg.Types, f.Name()); m != nil {
						out = append(out, walkName(m.(*types.Func)))
					}
					break
				}
			}
		}
	}
	return out
}

// TestApproveWalk: docs/ARCHITECTURE.md's "The approve walk" lists what a
// static walk of the approve request finds — every call from the handler
// that enters another of the project's packages, each function once in the
// order first called, and every call back into a package already on the
// call path — and this test walks it again (program.walk) and fails when
// the text and the code differ.
func TestApproveWalk(t *testing.T) {
	p, err := loadProgram()
	if err != nil {
		t.Fatal(err)
	}
	entries := p.walk("web/api.API.approve")
	if len(entries) == 0 {
		t.Fatal("the walk from web/api.API.approve found nothing: is the handler still there?")
	}
	var measured, measuredBack []string
	called := map[string][]string{}
	for _, e := range entries {
		hop := "`" + e.from + "` → `" + e.to + "`"
		if _, ok := called[hop]; !ok {
			measured = append(measured, hop)
		}
		if !slices.Contains(called[hop], e.callee) {
			called[hop] = append(called[hop], e.callee)
		}
		if slices.Contains(e.stack, e.to) {
			back := "`" + strings.Join(e.stack, "` › `") + "` → `" + e.to + "`: `" + e.callee + "`"
			if !slices.Contains(measuredBack, back) {
				measuredBack = append(measuredBack, back)
			}
		}
	}
	for i, hop := range measured {
		measured[i] = hop + " | `" + strings.Join(called[hop], "`, `") + "`"
	}

	var written, writtenBack []string
	in := false
	for _, l := range readLines(t, "docs/ARCHITECTURE.md") {
		switch {
		case strings.HasPrefix(l.text, "#"):
			in = l.text == "### The approve walk"
		case in && walkRow.MatchString(l.text):
			written = append(written, walkRow.FindStringSubmatch(l.text)[1])
		case in && strings.HasPrefix(l.text, walkBack):
			writtenBack = append(writtenBack, strings.TrimPrefix(l.text, walkBack))
		}
	}
	if !slices.Equal(written, measured) || !slices.Equal(writtenBack, measuredBack) {
		t.Errorf("docs/ARCHITECTURE.md, \"The approve walk\", says the walk is\n%s\n%s\nbut the code's is\n%s\n%s",
			tableOf(written), backOf(writtenBack), tableOf(measured), backOf(measuredBack))
	}
}

// walkRow is a row of the walk's table: | `from` → `to` | `f`, `g` |.
var walkRow = regexp.MustCompile("^\\| (`[^`]+` → `[^`]+` \\| `.*`) \\|$")

// walkBack starts a line of the walk's calls back up.
const walkBack = "- called back: "

func tableOf(rows []string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString("| " + r + " |\n")
	}
	return b.String()
}

func backOf(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(walkBack + l + "\n")
	}
	return b.String()
}
