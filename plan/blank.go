package plan

import (
	"slices"
	"text/template/parse"
)

// BlankFields are the merge variables whose blank value would show in a
// message, by how the templates write them (text/template's parse tree,
// not a pattern over the text):
//   - Printed: some action writes the variable as it is, whatever it
//     holds ({{.first_name}}, {{printf "%s" .first_name}}): a value that
//     is empty or only spaces leaves nothing there ("Dear ,");
//   - Guarded: every action that writes it does so only when it is not
//     empty — a fallback's first choice ({{or .first_name "friend"}}) or
//     inside a condition on it ({{if .first_name}}…{{.first_name}}…{{end}}),
//     as text/template's truth has it — so only a value of nothing but
//     spaces shows blank.
//
// A variable only tested ({{if .vip}}VIP{{end}}) is in neither: no value
// of it leaves a blank in the message.
type BlankFields struct {
	Printed []string
	Guarded []string
}

// Empty reports whether no variable's blank value can show.
func (b BlankFields) Empty() bool { return len(b.Printed) == 0 && len(b.Guarded) == 0 }

// All is every variable of b, sorted.
func (b BlankFields) All() []string {
	out := slices.Concat(b.Printed, b.Guarded)
	slices.Sort(out)
	return slices.Compact(out)
}

// How a read writes a variable's value into the message.
const (
	readTested  = iota // only tested, never written
	readGuarded        // written only when not empty
	readPrinted        // written whatever it holds
)

// blankFields walks trees (already checked by collectFields) and says
// which variables a blank value shows in (BlankFields).
func blankFields(trees ...*parse.Tree) BlankFields {
	level := map[string]int{}
	for _, t := range trees {
		if t != nil {
			blankWalk(t.Root, map[string]bool{}, "", level)
		}
	}
	delete(level, UnsubscribeURLVar)
	var b BlankFields
	for f, l := range level {
		switch l {
		case readPrinted:
			b.Printed = append(b.Printed, f)
		case readGuarded:
			b.Guarded = append(b.Guarded, f)
		}
	}
	slices.Sort(b.Printed)
	slices.Sort(b.Guarded)
	return b
}

// note records that variable f is read at level l (the highest wins).
func note(level map[string]int, f string, l int) {
	if old, ok := level[f]; !ok || l > old {
		level[f] = l
	}
}

// blankWalk walks node n. guarded are the variables a condition around n
// has found not empty; dot names the variable {{.}} stands for inside
// {{with .name}} ("" elsewhere: the target's variables).
func blankWalk(n parse.Node, guarded map[string]bool, dot string, level map[string]int) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			blankWalk(c, guarded, dot, level)
		}
	case *parse.ActionNode:
		blankPipe(n.Pipe, readPrinted, guarded, dot, level)
	case *parse.IfNode:
		blankBranch(&n.BranchNode, false, guarded, dot, level)
	case *parse.WithNode:
		blankBranch(&n.BranchNode, true, guarded, dot, level)
	}
}

// blankBranch walks an {{if}} or {{with}}: its condition only tests; its
// first branch runs when the condition's variables are not empty (for
// {{if .a}} and {{if and .a .b}}), so they are guarded there; its else
// branch runs when they may be empty.
func blankBranch(b *parse.BranchNode, with bool, guarded map[string]bool, dot string, level map[string]int) {
	blankPipe(b.Pipe, readTested, guarded, dot, level)
	inner := guarded
	innerDot := dot
	if tested := conditionFields(b.Pipe, dot); len(tested) > 0 {
		inner = make(map[string]bool, len(guarded)+len(tested))
		for f := range guarded {
			inner[f] = true
		}
		for _, f := range tested {
			inner[f] = true
		}
		if with && len(tested) == 1 {
			innerDot = tested[0]
		}
	} else if with {
		innerDot = "" // {{with}} of something else: {{.}} is not a variable
	}
	blankWalk(b.List, inner, innerDot, level)
	if b.ElseList != nil {
		blankWalk(b.ElseList, guarded, dot, level)
	}
}

// conditionFields are the variables a condition {{if .a}} or
// {{if and .a .b}} finds not empty when it holds (none for any other).
func conditionFields(p *parse.PipeNode, dot string) []string {
	if p == nil || len(p.Cmds) != 1 {
		return nil
	}
	args := p.Cmds[0].Args
	if len(args) > 1 && funcName(p.Cmds[0]) == "and" {
		args = args[1:]
	} else if len(args) != 1 {
		return nil
	}
	var out []string
	for _, a := range args {
		f, ok := fieldOf(a, dot)
		if !ok {
			return nil
		}
		out = append(out, f)
	}
	return out
}

// fieldOf is the variable argument a reads directly: {{.name}}, or {{.}}
// inside {{with .name}}.
func fieldOf(a parse.Node, dot string) (string, bool) {
	switch a := a.(type) {
	case *parse.FieldNode:
		if len(a.Ident) == 1 {
			return a.Ident[0], true
		}
	case *parse.DotNode:
		if dot != "" {
			return dot, true
		}
	}
	return "", false
}

// blankPipe walks a pipeline whose result is written at level l (tested
// for a condition). A variable is written as the pipeline's last command
// writes it: or's arguments but the last are written only when not empty;
// any other function's arguments count as written at l (a blank one may
// reach the message through printf, print and their kin).
func blankPipe(p *parse.PipeNode, l int, guarded map[string]bool, dot string, level map[string]int) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		args := c.Args
		fallback := false
		if funcName(c) == "or" && len(args) > 2 {
			fallback = true
		}
		for i, a := range args {
			al := l
			if fallback && i > 0 && i < len(args)-1 && l == readPrinted {
				al = readGuarded
			}
			blankArg(a, al, guarded, dot, level)
		}
	}
}

func blankArg(a parse.Node, l int, guarded map[string]bool, dot string, level map[string]int) {
	if f, ok := fieldOf(a, dot); ok {
		if l == readPrinted && guarded[f] {
			l = readGuarded
		}
		note(level, f, l)
		return
	}
	switch a := a.(type) {
	case *parse.PipeNode:
		blankPipe(a, l, guarded, dot, level)
	case *parse.ChainNode:
		blankArg(a.Node, l, guarded, dot, level)
	}
}
