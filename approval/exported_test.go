package approval

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/onceplan/onceplan/internal/auth"
)

// operations are approval's exported writes, each with the lifecycle
// actions it takes (docs/ARCHITECTURE.md, "Where each rule lives": the
// campaign lifecycle). Every one goes through the lifecycle table.
var operations = map[string][]auth.Action{
	"Service.Create":        {auth.ActionCreate, auth.ActionImport},
	"Service.Edit":          {auth.ActionEdit},
	"Service.ImportTargets": {auth.ActionImport},
	"Service.Submit":        {auth.ActionSubmit},
	// The quorum's last approval freezes the plan, and starts it when the
	// campaign says so.
	"Service.Approve": {auth.ActionApprove, auth.ActionFreeze, auth.ActionStart},
	"Service.Reject":  {auth.ActionReject},
	"Service.Start":   {auth.ActionStart},
	"Service.Pause":   {auth.ActionPause},
	"Service.Resume":  {auth.ActionResume},
	"Service.Cancel":  {auth.ActionCancel},
	// Recorded as a cancel marked discarded.
	"Service.Discard": {auth.ActionDiscard, auth.ActionCancel},
	// A decision that frees a key puts its target back on the queue, and
	// reopens a completed campaign.
	"Service.ResolveEffect":   {auth.ActionResolve, auth.ActionResume},
	"Service.SupersedeEffect": {auth.ActionSupersede, auth.ActionResume},
	"Service.RevokeEffect":    {auth.ActionRevoke},
	// The system's.
	"Service.StartDue":         {auth.ActionStart},
	"Service.RequeueRemainder": {auth.ActionResume},
	"Service.RequeueTarget":    {auth.ActionResume},
	"Service.CompleteIfDone":   {ActionComplete, auth.ActionResume},
	"Service.Alert":            {ActionAlert},
	"TestSender.Send":          {auth.ActionTestSend},
}

// otherDoors are the operations that do not enter through act or
// actAsSystem, and the function each enters through instead.
var otherDoors = map[string]string{
	// No campaign, so no state, before it: born checks the campaign was
	// made where the table's create row says.
	"Service.Create": "Service.born",
	// It sends outside any transaction, once Allowed (the role and the
	// table) passed; it records itself after.
	"TestSender.Send": "Allowed",
	// It puts a target's job back (the ledger decides its effect), in the
	// campaign's lock; the campaign changes only when reopen takes the
	// resume the table allows.
	"Service.RequeueTarget": "Service.reopen",
}

// reads are approval's exported functions and methods that write nothing:
// what other packages read of campaigns, and the values they read.
var reads = []string{
	// The campaign, its drafts, submissions, runs and trail.
	"GetCampaign", "ListCampaigns", "PageCampaigns", "ParseCampaignCursor", "CampaignCursor.String",
	"AnyCampaign", "CampaignTools", "Live", "Running", "RunningProviders", "Names",
	"GetDraft", "Draft.Content", "Draft.Hash", "Submission.IsAuthor", "SubmissionOf", "RunBefore",
	"Approvers", "ApproverEmails", "Events", "GetEvent", "LastEventAt",
	"Event.Summary", "Event.RejectedLines",
	// Who may do what now, and what comes next.
	"Allowed", "Service.ApproveAllowed", "NextSteps", "OutcomeOf",
	"Service.Decision", "Service.WaitDecision", "Decision.Final", "Decision.Missing", "Decision.Message", "Decision.WaitingFor",
	"Outcome.Parts",
	// What a campaign's answer shows beside it.
	"NewService", "Service.Get", "Service.Answer", "Service.Serving", "Service.Remaining", "Service.Stalled",
	"Service.NextTries", "Service.LeftOutAtImport", "Service.CampaignOfKey",
	"ListOf", "CampaignCounts", "NewCountsCache", "CountsCache.ListCounts", "CountsCache.CampaignCounts", "CountsCache.Forget",
	// Two versions compared.
	"Compare", "CompareVersions", "FirstPages", "ParseAgainst", "Comparison.Diff", "Comparison.Rows", "Diff.Changes",
	// Test sends: the sender's set-up, who may receive one, what was sent.
	"NewTestSender", "ParseTestAllowList", "TestSender.MaxRecipients", "TestSender.Reviewers", "TestMessages",
	// Errors.
	"MissingVarsError.Error", "MissingVarsError.Is", "MissingVarsError.ErrorCode",
	"TestSendRateLimitError.Error", "TestSendRateLimitError.Is", "TestSendRateLimitError.ErrorCode",
}

// TestExportedOperationsGoThroughTheLifecycle: every exported function or
// method of approval that writes is a lifecycle operation, listed in
// operations with the actions of the table (lifecycle.go) it takes, and
// reaches the table; everything else it exports writes nothing and is
// listed in reads, and an exported function read is used outside the
// package. The trail's campaign actions are written only by move and born,
// a state only by shift: the table's two doors. A new exported write, or a
// write that skips the table, fails here.
//
// "Writes" is what the function's own code, and every function of the
// package it can call, does: an Exec, a read-write transaction
// (pgx.BeginFunc, or BeginTxFunc not read-only), an INSERT, UPDATE or
// DELETE statement, or a call of anything that takes a pgx.Tx (the
// caller's transaction: plan.Freeze, the Enqueuer's inserts). An exported
// function that takes a pgx.Tx counts as a write itself: it acts inside its
// caller's transaction, beside the lifecycle.
func TestExportedOperationsGoThroughTheLifecycle(t *testing.T) {
	t.Parallel()
	g := loadCallGraph(t)

	exported := g.exported()
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		f := exported[name]
		actions, isOp := operations[name]
		isRead := slices.Contains(reads, name)
		writes := g.writes(f) || takesTx(f)
		switch {
		case writes && !isOp:
			t.Errorf("%s writes (%s) but is not a lifecycle operation: unexport it, or make it one (act, actAsSystem) and list it in operations", name, g.why(f))
		case !writes && !isRead:
			t.Errorf("%s is exported and writes nothing: list it in reads, or unexport it if no other package reads it", name)
		case !writes && isOp:
			t.Errorf("%s is listed in operations but writes nothing: list it in reads", name)
		case writes && isRead:
			t.Errorf("%s is listed in reads but writes (%s)", name, g.why(f))
		}
		if !isOp {
			continue
		}
		door, ok := otherDoors[name]
		if !ok {
			door = "Service.act or Service.actAsSystem"
		}
		if !g.readsTable(f) || !g.reaches(f, strings.Split(door, " or ")...) {
			t.Errorf("%s writes without entering through %s (a door that asks the lifecycle table first)", name, door)
		}
		taken := g.actions(f)
		for _, a := range actions {
			if _, ok := lifecycle[a]; !ok {
				t.Errorf("%s takes %q, which is not in the lifecycle table", name, a)
			}
			if !taken[a] {
				t.Errorf("%s is listed as taking %q, which it never names", name, a)
			}
		}
	}
	for _, name := range slices.Concat(slices.Collect(maps.Keys(operations)), reads) {
		if _, ok := exported[name]; !ok {
			t.Errorf("%s is listed but approval does not export it", name)
		}
	}
	// Every row of the table is some operation's.
	covered := map[auth.Action]bool{}
	for _, actions := range operations {
		for _, a := range actions {
			covered[a] = true
		}
	}
	for a := range lifecycle {
		if !covered[a] {
			t.Errorf("no exported operation takes %q, a row of the lifecycle table", a)
		}
	}

	// The doors: the service's writing transactions are opened by locked
	// (for act and actAsSystem) and by Create; only shift writes a
	// campaign's state; only move and born record a campaign action (the
	// test send records its own, after Allowed).
	for callee, allowed := range map[string][]string{
		"Service.tx":     {"Service.locked", "Service.Create"},
		"lockCampaign":   {"Service.locked"},
		"Service.locked": {"Service.act", "Service.actAsSystem", "Service.RequeueTarget"},
		"setState":       {"Service.shift"},
		"Service.event":  {"Service.move", "Service.born"},
		"appendEvent":    {"Service.event", "TestSender.Send"},
	} {
		for _, caller := range g.callersOf(callee) {
			if !slices.Contains(allowed, caller) {
				t.Errorf("%s calls %s: only %s may", caller, callee, strings.Join(allowed, " and "))
			}
		}
	}

	// The reads exported as functions are other packages' reads.
	used := usedOutside(t)
	for _, name := range reads {
		if !strings.Contains(name, ".") && !used[name] {
			t.Errorf("%s is exported, but no other package's code calls it: unexport it", name)
		}
	}
}

// callGraph is approval's functions, by name ("Service.act", "GetCampaign"),
// with what each one's own code calls, writes and names.
type callGraph struct {
	funcs map[string]*funcFacts
}

type funcFacts struct {
	obj     *types.Func
	exposed bool            // exported, on an exported receiver type if a method
	calls   map[string]bool // the package's functions it names
	write   string          // the first write of its own code ("" for none)
	table   bool            // it names the lifecycle table
	actions map[auth.Action]bool
}

// writeSQL finds a statement that writes.
var writeSQL = regexp.MustCompile(`(?i)\b(INSERT\s+INTO|UPDATE\s+[a-z_]+\s+SET|DELETE\s+FROM)\b`)

func loadCallGraph(t *testing.T) *callGraph {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading approval: %v", pkgs[0].Errors)
	}
	pkg := pkgs[0]
	info := pkg.TypesInfo
	g := &callGraph{funcs: map[string]*funcFacts{}}
	for _, file := range pkg.Syntax {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			obj := info.Defs[fd.Name].(*types.Func)
			f := &funcFacts{obj: obj, calls: map[string]bool{}, actions: map[auth.Action]bool{}}
			f.exposed = obj.Exported() && (fd.Recv == nil || recvName(obj) != "" && token.IsExported(recvName(obj)))
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					switch o := info.Uses[n].(type) {
					case *types.Func:
						if o.Pkg() == pkg.Types && !isInterfaceMethod(o) {
							f.calls[funcName(o)] = true
						}
					case *types.Var:
						if o.Pkg() == pkg.Types && o.Name() == "lifecycle" && o.Parent() == pkg.Types.Scope() {
							f.table = true
						}
					case *types.Const:
						if named, ok := o.Type().(*types.Named); ok && named.Obj().Name() == "Action" && named.Obj().Pkg().Path() == authPath {
							v, _ := strconv.Unquote(o.Val().ExactString())
							f.actions[auth.Action(v)] = true
						}
					}
				case *ast.BasicLit:
					if n.Kind == token.STRING && f.write == "" {
						if m := writeSQL.FindString(n.Value); m != "" {
							f.write = "the statement " + strings.Join(strings.Fields(m), " ")
						}
					}
				case *ast.CallExpr:
					if f.write == "" {
						f.write = callWrites(info, n)
					}
				}
				return true
			})
			g.funcs[funcName(obj)] = f
		}
	}
	return g
}

const authPath = "github.com/onceplan/onceplan/internal/auth"

// callWrites says how call writes, or "".
func callWrites(info *types.Info, call *ast.CallExpr) string {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		id = fn.Sel
	case *ast.IndexExpr: // a generic function
		if sel, ok := fn.X.(*ast.SelectorExpr); ok {
			id = sel.Sel
		}
	}
	if id == nil {
		return ""
	}
	o, ok := info.Uses[id].(*types.Func)
	if !ok {
		return ""
	}
	path := ""
	if o.Pkg() != nil {
		path = o.Pkg().Path()
	}
	switch {
	case o.Name() == "Exec" || o.Name() == "CopyFrom" || o.Name() == "SendBatch":
		return "a call of " + o.Name()
	case path == "github.com/jackc/pgx/v5" && o.Name() == "BeginFunc":
		return "a read-write transaction (pgx.BeginFunc)"
	case path == "github.com/jackc/pgx/v5" && o.Name() == "BeginTxFunc" && !readOnly(call):
		return "a transaction not read-only (pgx.BeginTxFunc)"
	}
	sig := o.Type().(*types.Signature)
	for p := range sig.Params().Variables() {
		if isTx(p.Type()) {
			return "a call of " + o.FullName() + ", which takes the caller's pgx.Tx"
		}
	}
	return ""
}

// readOnly reports whether a BeginTxFunc call's options say pgx.ReadOnly.
func readOnly(call *ast.CallExpr) bool {
	ro := false
	ast.Inspect(call, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "ReadOnly" {
			ro = true
		}
		return !ro
	})
	return ro
}

func isTx(t types.Type) bool {
	named, ok := t.(*types.Named)
	return ok && named.Obj().Name() == "Tx" && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "github.com/jackc/pgx/v5"
}

// takesTx reports whether f acts inside its caller's transaction.
func takesTx(f *funcFacts) bool {
	for p := range f.obj.Type().(*types.Signature).Params().Variables() {
		if isTx(p.Type()) {
			return true
		}
	}
	return false
}

func isInterfaceMethod(f *types.Func) bool {
	recv := f.Type().(*types.Signature).Recv()
	return recv != nil && types.IsInterface(recv.Type())
}

func recvName(f *types.Func) string {
	recv := f.Type().(*types.Signature).Recv()
	if recv == nil {
		return ""
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if named, ok := t.(*types.Named); ok {
		return named.Obj().Name()
	}
	return ""
}

func funcName(f *types.Func) string {
	if r := recvName(f); r != "" {
		return r + "." + f.Name()
	}
	return f.Name()
}

func (g *callGraph) exported() map[string]*funcFacts {
	out := map[string]*funcFacts{}
	for name, f := range g.funcs {
		if f.exposed {
			out[name] = f
		}
	}
	return out
}

// reach walks every function of the package f can call, f included, until
// visit returns true; it reports whether one did.
func (g *callGraph) reach(f *funcFacts, visit func(*funcFacts) bool) bool {
	seen := map[*funcFacts]bool{}
	var walk func(*funcFacts) bool
	walk = func(f *funcFacts) bool {
		if f == nil || seen[f] {
			return false
		}
		seen[f] = true
		if visit(f) {
			return true
		}
		for _, name := range slices.Sorted(maps.Keys(f.calls)) {
			if walk(g.funcs[name]) {
				return true
			}
		}
		return false
	}
	return walk(f)
}

func (g *callGraph) writes(f *funcFacts) bool {
	return g.reach(f, func(f *funcFacts) bool { return f.write != "" })
}

// why names the first write f reaches, and where.
func (g *callGraph) why(f *funcFacts) string {
	if takesTx(f) {
		return "it takes its caller's pgx.Tx"
	}
	var why string
	g.reach(f, func(f *funcFacts) bool {
		if f.write != "" {
			why = f.write + " in " + funcName(f.obj)
		}
		return f.write != ""
	})
	return why
}

// reaches reports whether f can call one of the named functions.
func (g *callGraph) reaches(f *funcFacts, names ...string) bool {
	return g.reach(f, func(f *funcFacts) bool { return slices.Contains(names, funcName(f.obj)) })
}

func (g *callGraph) readsTable(f *funcFacts) bool {
	return g.reach(f, func(f *funcFacts) bool { return f.table })
}

func (g *callGraph) actions(f *funcFacts) map[auth.Action]bool {
	out := map[auth.Action]bool{}
	g.reach(f, func(f *funcFacts) bool {
		maps.Copy(out, f.actions)
		return false
	})
	return out
}

func (g *callGraph) callersOf(name string) []string {
	var out []string
	for caller, f := range g.funcs {
		if f.calls[name] {
			out = append(out, caller)
		}
	}
	slices.Sort(out)
	return out
}

// usedOutside is the names other packages' code (not their tests) selects
// from approval: approval.Name.
func usedOutside(t *testing.T) map[string]bool {
	t.Helper()
	const path = "github.com/onceplan/onceplan/approval"
	used := map[string]bool{}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || p == filepath.Join(root, "approval")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if v, _ := strconv.Unquote(imp.Path.Value); v == path {
				local = "approval"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used
}
