package plan

import (
	"bytes"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
	"unicode/utf8"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Limits on a payload. A subject is a header line: RFC 5322 caps a line at
// 998 octets, and mail clients show far less.
const (
	MaxSubjectRunes = 250
	MaxBodyBytes    = 2 << 20 // 2 MiB per body
	// MaxRenderedBytes bounds one rendered part (subject, text or HTML)
	// for one target: a draft of 2 MiB that repeats a 64 KiB variable
	// could otherwise render gigabytes in a worker or a preview. A real
	// message is far below it.
	MaxRenderedBytes = 4 * MaxBodyBytes
)

func fieldErr(field, format string, args ...any) error {
	return onceplan.FieldErrorf(field, format, args...)
}

// NoNUL refuses a NUL character in a field: PostgreSQL's text cannot hold
// one, and no name, header or message body needs it.
func NoNUL(field, value string) error {
	if strings.IndexByte(value, 0) >= 0 {
		return fieldErr(field, "contains a NUL character (\\u0000); remove it")
	}
	return nil
}

// Payload is a draft's message: merge templates over each target's
// variables ({{.first_name}}). Subject and text are text/template, HTML is
// html/template (escaped by context); a variable a target lacks is an
// error, never an empty string.
type Payload struct {
	From    string `json:"from"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html,omitempty"`
}

// Templates are a compiled payload.
type Templates struct {
	from    string
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template // nil when the payload has no HTML body
	fields  []string
	// unsubscribe: a body reads UnsubscribeURLVar, which Render fills in.
	unsubscribe bool
	// subjectFields are the fields the subject reads: a line break in one
	// of them breaks the Subject header.
	subjectFields []string
	// blank are the fields whose blank value shows (blankFields).
	blank BlankFields
}

// Validate checks the payload on its own (templates parse, From is an
// address, subject present and bounded, no header injection).
func (p Payload) Validate() error {
	_, err := p.Compile()
	return err
}

// Compile parses the payload's templates.
func (p Payload) Compile() (*Templates, error) {
	t := &Templates{}
	for _, f := range []struct{ name, value string }{{"from", p.From}, {"subject", p.Subject}, {"text", p.Text}, {"html", p.HTML}} {
		if err := NoNUL(f.name, f.value); err != nil {
			return nil, err
		}
	}
	from, err := mail.ParseAddress(strings.TrimSpace(p.From))
	if err != nil {
		if strings.TrimSpace(p.From) == "" {
			return nil, fieldErr("from", "is required")
		}
		return nil, fieldErr("from", "%q is not an email address (%v)", p.From, err)
	}
	t.from = from.String()

	switch {
	case strings.TrimSpace(p.Subject) == "":
		return nil, fieldErr("subject", "is required")
	case strings.ContainsAny(p.Subject, "\r\n"):
		return nil, fieldErr("subject", "must be one line (it contains a line break)")
	case !utf8.ValidString(p.Subject):
		return nil, fieldErr("subject", "is not valid UTF-8")
	case utf8.RuneCountInString(p.Subject) > MaxSubjectRunes:
		return nil, fieldErr("subject", "is %d characters long; the limit is %d", utf8.RuneCountInString(p.Subject), MaxSubjectRunes)
	}
	if strings.TrimSpace(p.Text) == "" && strings.TrimSpace(p.HTML) == "" {
		return nil, fieldErr("text", "is required (a text body, an HTML body or both)")
	}
	for _, b := range []struct{ name, body string }{{"text", p.Text}, {"html", p.HTML}} {
		if len(b.body) > MaxBodyBytes {
			return nil, fieldErr(b.name, "is %d bytes; the limit is %d", len(b.body), MaxBodyBytes)
		}
		if !utf8.ValidString(b.body) {
			return nil, fieldErr(b.name, "is not valid UTF-8")
		}
	}

	if t.subject, err = texttemplate.New("subject").Option("missingkey=error").Parse(p.Subject); err != nil {
		return nil, fieldErr("subject", "%s", templateErr(err))
	}
	if t.text, err = texttemplate.New("text").Option("missingkey=error").Parse(p.Text); err != nil {
		return nil, fieldErr("text", "%s", templateErr(err))
	}
	trees := []*parse.Tree{t.subject.Tree, t.text.Tree}
	if p.HTML != "" {
		if t.html, err = htmltemplate.New("html").Option("missingkey=error").Parse(p.HTML); err != nil {
			return nil, fieldErr("html", "%s", templateErr(err))
		}
		// html/template escapes by context on the first Execute, and only
		// then reports a template whose contexts do not add up (an
		// attribute quote never closed, {{if}} branches ending in different
		// contexts). Run the escaper now, so such a draft is refused when
		// it is written and not when every send fails: the writer refuses
		// the first byte, so nothing executes past the escaping.
		var escErr *htmltemplate.Error
		if err := t.html.Execute(refuseWriter{}, map[string]string{}); errors.As(err, &escErr) {
			return nil, fieldErr("html", "%s", escapeErr(escErr))
		}
		trees = append(trees, t.html.Tree)
	}
	seen := map[string]bool{}
	for _, tree := range trees {
		if tree == nil {
			continue
		}
		if err := collectFields(tree.Root, seen); err != nil {
			return nil, fieldErr(tree.ParseName, "%v", err)
		}
	}
	// The unsubscribe link is the message's, not a target's: no target
	// needs to carry it (Check does not report it missing).
	t.unsubscribe = seen[UnsubscribeURLVar]
	delete(seen, UnsubscribeURLVar)
	t.fields = sortedKeys(seen)
	t.blank = blankFields(trees...)
	if t.subject.Tree != nil {
		subject := map[string]bool{}
		collectFields(t.subject.Tree.Root, subject) // checked above
		delete(subject, UnsubscribeURLVar)
		t.subjectFields = sortedKeys(subject)
	}
	return t, nil
}

// UnsubscribeURLVar is the reserved merge variable that places a message's
// unsubscribe link in its text or HTML body ({{.unsubscribe_url}}): Render
// fills it with the link it is given, whatever a target carries under that
// name, and no target needs to carry it. In a transactional campaign's
// message (no link) it renders empty.
const UnsubscribeURLVar = "unsubscribe_url"

// templateErr turns Go's "template: subject:3: unexpected ..." into
// "line 3: unexpected ...": the template's internal name means nothing to
// the person who wrote the draft (the field is named separately).
func templateErr(err error) string {
	s := strings.TrimPrefix(err.Error(), "template: ")
	parts := strings.SplitN(s, ":", 3)
	if len(parts) == 3 {
		return "line " + parts[1] + ":" + parts[2]
	}
	return s
}

// escapeErr words an html/template escaping error without the escaper's
// internal state dump.
func escapeErr(e *htmltemplate.Error) string {
	d, _, _ := strings.Cut(e.Description, ": {")
	if e.ErrorCode == htmltemplate.ErrEndContext {
		d = "the HTML ends inside a tag, an attribute or a quoted value"
	}
	line := strconv.Itoa(e.Line)
	if e.Line == 0 && e.Node != nil {
		loc, _ := (*parse.Tree)(nil).ErrorContext(e.Node) // "html:3:7"; the node knows its tree
		if parts := strings.Split(loc, ":"); len(parts) == 3 {
			line = parts[1]
		}
	}
	if line != "0" {
		return "line " + line + ": " + d
	}
	return d
}

// collectFields gathers the merge variables a template reads. Targets carry
// flat string variables, so only {{.name}} is meaningful; {{.a.b}} and
// anything that is not a field of the target is refused up front rather
// than at send time.
//
// It also refuses what would let a small draft cost a worker (or the
// server showing a preview) unbounded time or memory for every target:
// {{range}} (over an integer it loops as often as it is told), variables,
// and the builtins whose result is larger than their arguments (printf,
// print, println, html, js, urlquery) anywhere but directly in an output
// action over merge variables and literals, where their result is bounded
// and goes straight to the message (see MaxRenderedBytes).
func collectFields(n parse.Node, seen map[string]bool) error {
	return walkTemplate(n, seen)
}

func walkTemplate(n parse.Node, seen map[string]bool) error {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := walkTemplate(c, seen); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return walkPipe(n.Pipe, true, seen)
	case *parse.IfNode:
		return walkBranch(&n.BranchNode, seen)
	case *parse.RangeNode:
		// Merge variables are single values, so there is nothing to
		// iterate; and {{range 1000000000}} would burn minutes of a
		// worker's CPU for every target.
		return fmt.Errorf("{{range}} is not supported in a draft: merge variables are single values")
	case *parse.WithNode:
		return walkBranch(&n.BranchNode, seen)
	case *parse.TemplateNode:
		return fmt.Errorf("{{template %q}} is not supported in a draft", n.Name)
	}
	return nil
}

func walkBranch(b *parse.BranchNode, seen map[string]bool) error {
	if err := walkPipe(b.Pipe, false, seen); err != nil {
		return err
	}
	for _, l := range []*parse.ListNode{b.List, b.ElseList} {
		if l == nil {
			continue
		}
		if err := walkTemplate(l, seen); err != nil {
			return err
		}
	}
	return nil
}

// expanding names the builtins whose result can be much larger than their
// arguments.
var expanding = map[string]bool{"print": true, "printf": true, "println": true, "html": true, "js": true, "urlquery": true}

// walkPipe checks a pipeline; output says it is an output action's own
// pipeline, whose result is written to the message and not passed on.
func walkPipe(p *parse.PipeNode, output bool, seen map[string]bool) error {
	if p == nil {
		return nil
	}
	if len(p.Decl) > 0 {
		return fmt.Errorf("{{%s}}: variables are not supported in a draft; use the merge variables directly", actionText(p))
	}
	for i, c := range p.Cmds {
		if name := funcName(c); expanding[name] {
			ok := output && (i == 0 || i == 1 && len(p.Cmds[0].Args) == 1 && plainArg(p.Cmds[0].Args[0]))
			for _, a := range c.Args[1:] {
				ok = ok && plainArg(a)
			}
			if !ok {
				return fmt.Errorf("{{%s}}: %s is allowed only directly in an output over merge variables and literals, like {{%s .name}}", actionText(p), name, name)
			}
			if name == "printf" {
				if err := checkFormat(c); err != nil {
					return fmt.Errorf("{{%s}}: %v", actionText(p), err)
				}
			}
		}
		for _, a := range c.Args {
			if err := walkArg(a, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func walkArg(n parse.Node, seen map[string]bool) error {
	switch n := n.(type) {
	case *parse.FieldNode:
		if len(n.Ident) != 1 {
			return fmt.Errorf("{{.%s}}: merge variables are flat names like {{.first_name}}", strings.Join(n.Ident, "."))
		}
		seen[n.Ident[0]] = true
	case *parse.PipeNode:
		return walkPipe(n, false, seen)
	case *parse.ChainNode:
		return walkArg(n.Node, seen)
	}
	return nil
}

// actionText shows an action in a message: on one line, and short.
func actionText(p *parse.PipeNode) string {
	s := strings.Join(strings.Fields(p.String()), " ")
	if len(s) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func funcName(c *parse.CommandNode) string {
	if len(c.Args) > 0 {
		if id, ok := c.Args[0].(*parse.IdentifierNode); ok {
			return id.Ident
		}
	}
	return ""
}

// plainArg: a merge variable, the target's variables as a whole, or a
// literal; values whose size the draft and the list bound.
func plainArg(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.FieldNode, *parse.DotNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
		return true
	case *parse.VariableNode:
		return len(n.Ident) == 1 && n.Ident[0] == "$"
	}
	return false
}

// maxFormatWidth bounds a printf width or precision: enough to align a
// column, too little to turn a few bytes of draft into megabytes.
const maxFormatWidth = 100

// checkFormat requires printf's format to be a literal whose widths and
// precisions are at most maxFormatWidth.
func checkFormat(c *parse.CommandNode) error {
	if len(c.Args) < 2 {
		return nil // text/template reports the missing argument
	}
	f, ok := c.Args[1].(*parse.StringNode)
	if !ok {
		return errors.New("the format of printf must be a quoted string")
	}
	s := f.Text
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		for i++; i < len(s) && strings.IndexByte("+-# 0", s[i]) >= 0; i++ {
		}
		for part := 0; part < 2 && i < len(s); part++ {
			if s[i] == '*' || s[i] == '[' {
				return errors.New("printf widths given as * and argument indexes are not supported")
			}
			n := 0
			for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
				if n = n*10 + int(s[i]-'0'); n > maxFormatWidth {
					return fmt.Errorf("printf widths and precisions are at most %d", maxFormatWidth)
				}
			}
			if part == 0 && i < len(s) && s[i] == '.' {
				i++
				continue
			}
			break
		}
	}
	return nil
}

// Fields returns the merge variables the payload reads, sorted. Every
// target must carry each of them (UnsubscribeURLVar is not among them).
func (t *Templates) Fields() []string { return slices.Clone(t.fields) }

// BlankFields says which merge variables' blank values would show in a
// message (BlankFields): what the warning about blank variables checks.
func (t *Templates) BlankFields() BlankFields { return t.blank }

// SubjectFields returns the merge variables the subject reads, sorted.
func (t *Templates) SubjectFields() []string { return slices.Clone(t.subjectFields) }

// Message is the rendered message for one target, as it will be sent.
type Message struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html,omitempty"`
	// ListUnsubscribe is the absolute one-click unsubscribe URL: a
	// provider that writes the message sends it as
	// "List-Unsubscribe: <URL>" with "List-Unsubscribe-Post:
	// List-Unsubscribe=One-Click" (RFC 8058). Empty: a transactional
	// message, without either header.
	ListUnsubscribe string `json:"list_unsubscribe,omitempty"`
}

// Render renders the message for one target, without an unsubscribe link
// (RenderWithLink).
func (t *Templates) Render(to string, vars map[string]string) (Message, error) {
	return t.RenderWithLink(to, vars, "")
}

// RenderWithLink renders the message for one target with the unsubscribe
// link unsubscribeURL ("" for none): it is the message's ListUnsubscribe
// and what {{.unsubscribe_url}} renders.
func (t *Templates) RenderWithLink(to string, vars map[string]string, unsubscribeURL string) (Message, error) {
	m := Message{From: t.from, To: to, ListUnsubscribe: unsubscribeURL}
	if t.unsubscribe {
		withLink := make(map[string]string, len(vars)+1)
		for k, v := range vars {
			withLink[k] = v
		}
		withLink[UnsubscribeURLVar] = unsubscribeURL
		vars = withLink
	}
	var buf limitedBuffer
	if err := t.subject.Execute(buf.reset(), vars); err != nil {
		return m, fieldErr("subject", "%s", execErr(err))
	}
	m.Subject = buf.String()
	// A variable may not smuggle a header in through the subject.
	if strings.ContainsAny(m.Subject, "\r\n") {
		return m, fieldErr("subject", "renders with a line break for %s (a merge variable contains one)", to)
	}
	if err := t.text.Execute(buf.reset(), vars); err != nil {
		return m, fieldErr("text", "%s", execErr(err))
	}
	m.Text = buf.String()
	if t.html != nil {
		if err := t.html.Execute(buf.reset(), vars); err != nil {
			return m, fieldErr("html", "%s", execErr(err))
		}
		m.HTML = buf.String()
	}
	return m, nil
}

// execErr turns text/template's "map has no entry for key" into words.
func execErr(err error) string {
	if errors.Is(err, errTooLarge) {
		return errTooLarge.Error()
	}
	s := err.Error()
	if i := strings.Index(s, `map has no entry for key "`); i >= 0 {
		name := strings.TrimSuffix(s[i+len(`map has no entry for key "`):], `"`)
		return fmt.Sprintf("the target has no variable %q", name)
	}
	return strings.TrimPrefix(s, "template: ")
}

// errTooLarge: a rendered part went over MaxRenderedBytes.
var errTooLarge = fmt.Errorf("renders to more than %d bytes (the limit of a rendered message part)", MaxRenderedBytes)

// limitedBuffer collects one rendered part and fails the template once it
// passes MaxRenderedBytes; text/template stops at a write error.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) reset() *limitedBuffer {
	b.Reset()
	return b
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxRenderedBytes {
		return 0, errTooLarge
	}
	return b.Buffer.Write(p)
}

// refuseWriter fails every write: Compile uses it to run html/template's
// escaper without executing the template.
type refuseWriter struct{}

func (refuseWriter) Write([]byte) (int, error) { return 0, errTooLarge }
