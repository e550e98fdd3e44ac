package plan_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

func TestPayloadValidation(t *testing.T) {
	t.Parallel()
	good := plan.Payload{From: "Ann <ann@example.com>", Subject: "Hi {{.first_name}}", Text: "Hello {{.first_name}}"}
	require.NoError(t, good.Validate())

	for name, tc := range map[string]struct {
		mutate func(*plan.Payload)
		field  string
		reason string
	}{
		"missing from":      {func(p *plan.Payload) { p.From = "" }, "from", "is required"},
		"bad from":          {func(p *plan.Payload) { p.From = "not an address" }, "from", "not an email address"},
		"empty subject":     {func(p *plan.Payload) { p.Subject = "  " }, "subject", "is required"},
		"subject with CRLF": {func(p *plan.Payload) { p.Subject = "Hi\r\nBcc: victim@example.com" }, "subject", "one line"},
		"long subject":      {func(p *plan.Payload) { p.Subject = strings.Repeat("x", 251) }, "subject", "limit is 250"},
		"no body":           {func(p *plan.Payload) { p.Text, p.HTML = "", "" }, "text", "is required"},
		"template syntax":   {func(p *plan.Payload) { p.Text = "Hello {{.first_name" }, "text", "line 1"},
		"nested field":      {func(p *plan.Payload) { p.Text = "{{.a.b}}" }, "text", "flat names"},
		"html syntax":       {func(p *plan.Payload) { p.HTML = "<p>{{if .x}}</p>" }, "html", "line 1"},
		"huge body":         {func(p *plan.Payload) { p.Text = strings.Repeat("x", plan.MaxBodyBytes+1) }, "text", "limit"},
	} {
		p := good
		tc.mutate(&p)
		err := p.Validate()
		require.ErrorIs(t, err, onceplan.ErrInvalid, name)
		var fe *onceplan.FieldError
		require.True(t, errors.As(err, &fe), name)
		require.Equal(t, tc.field, fe.Field, name)
		require.Contains(t, fe.Reason, tc.reason, name)
	}
}

func TestRenderExactMessage(t *testing.T) {
	t.Parallel()
	tpl, err := plan.Payload{
		From:    "Billing <billing@example.com>",
		Subject: "Invoice {{.invoice}}",
		Text:    "Dear {{.name}},\n{{if .vip}}Thank you for being a VIP.{{end}}",
		HTML:    "<p>Dear {{.name}}</p>",
	}.Compile()
	require.NoError(t, err)
	require.Equal(t, []string{"invoice", "name", "vip"}, tpl.Fields())

	m, err := tpl.Render("ann@example.com", map[string]string{"invoice": "INV-7", "name": "<script>alert(1)</script>", "vip": "yes"})
	require.NoError(t, err)
	require.Equal(t, plan.Message{
		From:    `"Billing" <billing@example.com>`,
		To:      "ann@example.com",
		Subject: "Invoice INV-7",
		Text:    "Dear <script>alert(1)</script>,\nThank you for being a VIP.",
		HTML:    "<p>Dear &lt;script&gt;alert(1)&lt;/script&gt;</p>",
	}, m, "the HTML body escapes variables; the text body keeps them as given")

	// A missing variable is an error, never an empty string.
	_, err = tpl.Render("bob@example.com", map[string]string{"invoice": "INV-8", "vip": ""})
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Contains(t, err.Error(), `no variable "name"`)

	// A variable cannot inject a header through the subject.
	_, err = tpl.Render("eve@example.com", map[string]string{"invoice": "1\r\nBcc: all@example.com", "name": "x", "vip": ""})
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Contains(t, err.Error(), "line break")
}

// The plan hash is a pure function of payload, provider, tool and the
// ordered (key, vars) list; this golden value pins its layout. It was
// computed outside Go (Python json.dumps + hashlib) from the layout in
// hash.go, not copied from the code under test.
func TestPlanHashGolden(t *testing.T) {
	t.Parallel()
	d := plan.NewListDigest()
	d.Add("v1:"+strings.Repeat("a", 64), plan.CanonicalVars(map[string]string{"name": "Ann", "city": "Zürich"}))
	d.Add("v1:"+strings.Repeat("b", 64), plan.CanonicalVars(nil))
	require.Equal(t, `{"city":"Zürich","name":"Ann"}`, string(plan.CanonicalVars(map[string]string{"name": "Ann", "city": "Zürich"})))
	in := plan.PlanHashInput{
		Payload:     plan.Payload{From: "a@example.com", Subject: "S {{.name}}", Text: "T", HTML: "<b>H</b>"},
		Provider:    "outbox",
		Tool:        "email.send",
		TargetCount: d.Count(),
		ListDigest:  d.Sum(),
	}
	got := plan.PlanHash(in)
	require.Equal(t, "05b34723252c048a9f419eddaf06a57823598ff212fd7c0b1d575a8035b95b85", got)
	require.Equal(t, got, plan.PlanHash(in), "deterministic")

	// Any change of text, provider, order or variables changes it.
	changed := in
	changed.Payload.Text = "T."
	require.NotEqual(t, got, plan.PlanHash(changed))
	changed = in
	changed.Provider = "relay"
	require.NotEqual(t, got, plan.PlanHash(changed))
	swapped := plan.NewListDigest()
	swapped.Add("v1:"+strings.Repeat("b", 64), plan.CanonicalVars(nil))
	swapped.Add("v1:"+strings.Repeat("a", 64), plan.CanonicalVars(map[string]string{"name": "Ann", "city": "Zürich"}))
	changed = in
	changed.ListDigest = swapped.Sum()
	require.NotEqual(t, got, plan.PlanHash(changed))
}

// BenchmarkRender is the executor's per-effect rendering of a typical
// message (subject, text and HTML bodies with merge variables).
func BenchmarkRender(b *testing.B) {
	tpl, err := plan.Payload{
		From:    "Billing <billing@example.com>",
		Subject: "Invoice {{.invoice}} is due, {{.name}}",
		Text:    "Dear {{.name}},\n\nInvoice {{.invoice}} of {{.amount}} is due on {{.due}}.\n{{if .vip}}Thank you for being a VIP.{{end}}\n",
		HTML:    "<p>Dear {{.name}},</p><p>Invoice <b>{{.invoice}}</b> of {{.amount}} is due on {{.due}}.</p>{{if .vip}}<p>Thank you for being a VIP.</p>{{end}}",
	}.Compile()
	if err != nil {
		b.Fatal(err)
	}
	vars := map[string]string{"invoice": "INV-2026-0042", "name": "Ann O'Neil", "amount": "€120.00", "due": "2026-12-31", "vip": "yes"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render("ann@example.com", vars); err != nil {
			b.Fatal(err)
		}
	}
}
