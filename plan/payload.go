package plan

import (
	"bytes"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"net/mail"
	"slices"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
	"unicode/utf8"
)

// Limits on a payload. A subject is a header line: RFC 5322 caps a line at
// 998 octets, and mail clients show far less.
const (
	MaxSubjectRunes = 250
	MaxBodyBytes    = 2 << 20 // 2 MiB per body
)

// ErrInvalid marks validation errors: bad input, reported to the user with
// the field (or list line) and the reason.
var ErrInvalid = errors.New("invalid")

// FieldError is a validation error naming the field at fault.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
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
	for f := range seen {
		t.fields = append(t.fields, f)
	}
	slices.Sort(t.fields)
	return t, nil
}

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

// collectFields gathers the merge variables a template reads. Targets carry
// flat string variables, so only {{.name}} is meaningful; {{.a.b}} and
// anything that is not a field of the target is refused up front rather
// than at send time.
func collectFields(n parse.Node, seen map[string]bool) error {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := collectFields(c, seen); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return collectFields(n.Pipe, seen)
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			if err := collectFields(c, seen); err != nil {
				return err
			}
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			if err := collectFields(a, seen); err != nil {
				return err
			}
		}
	case *parse.FieldNode:
		if len(n.Ident) != 1 {
			return fmt.Errorf("{{.%s}}: merge variables are flat names like {{.first_name}}", strings.Join(n.Ident, "."))
		}
		seen[n.Ident[0]] = true
	case *parse.IfNode:
		return collectBranch(&n.BranchNode, seen)
	case *parse.RangeNode:
		return collectBranch(&n.BranchNode, seen)
	case *parse.WithNode:
		return collectBranch(&n.BranchNode, seen)
	case *parse.TemplateNode:
		return fmt.Errorf("{{template %q}} is not supported in a draft", n.Name)
	}
	return nil
}

func collectBranch(b *parse.BranchNode, seen map[string]bool) error {
	for _, n := range []parse.Node{b.Pipe, b.List, b.ElseList} {
		if l, ok := n.(*parse.ListNode); ok && l == nil {
			continue
		}
		if err := collectFields(n, seen); err != nil {
			return err
		}
	}
	return nil
}

// Fields returns the merge variables the payload reads, sorted. Every
// target must carry each of them.
func (t *Templates) Fields() []string { return slices.Clone(t.fields) }

// Message is the rendered message for one target, as it will be sent.
type Message struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html,omitempty"`
}

// Render renders the message for one target.
func (t *Templates) Render(to string, vars map[string]string) (Message, error) {
	m := Message{From: t.from, To: to}
	var buf bytes.Buffer
	if err := t.subject.Execute(&buf, vars); err != nil {
		return m, fieldErr("subject", "%s", execErr(err))
	}
	m.Subject = buf.String()
	// A variable may not smuggle a header in through the subject.
	if strings.ContainsAny(m.Subject, "\r\n") {
		return m, fieldErr("subject", "renders with a line break for %s (a merge variable contains one)", to)
	}
	buf.Reset()
	if err := t.text.Execute(&buf, vars); err != nil {
		return m, fieldErr("text", "%s", execErr(err))
	}
	m.Text = buf.String()
	if t.html != nil {
		buf.Reset()
		if err := t.html.Execute(&buf, vars); err != nil {
			return m, fieldErr("html", "%s", execErr(err))
		}
		m.HTML = buf.String()
	}
	return m, nil
}

// execErr turns text/template's "map has no entry for key" into words.
func execErr(err error) string {
	s := err.Error()
	if i := strings.Index(s, `map has no entry for key "`); i >= 0 {
		name := strings.TrimSuffix(s[i+len(`map has no entry for key "`):], `"`)
		return fmt.Sprintf("the target has no variable %q", name)
	}
	return strings.TrimPrefix(s, "template: ")
}
