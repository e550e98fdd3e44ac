package ledger

import (
	"errors"
	"net/mail"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
	"pgregory.net/rapid"
)

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"ann@example.com", "ann@example.com"},
		{"  ann@example.com\t\n", "ann@example.com"},
		{"ANN@Example.COM", "ann@example.com"},
		{"Ann <ANN@Example.COM>", "ann@example.com"},
		{`"Example, Ann" <ann@example.com>`, "ann@example.com"},
		{"=?utf-8?q?J=C3=B6rg?= <jorg@example.com>", "jorg@example.com"},
		{"<ann@example.com>", "ann@example.com"},
		{"ann@example.com (work)", "ann@example.com"},
		{"Ann\r\n <ann@example.com>", "ann@example.com"}, // folding white space
		{"ann+news@example.com", "ann+news@example.com"},
		{"a.b.c@example.com", "a.b.c@example.com"},
		{`"ann"@example.com`, "ann@example.com"}, // needless quotes go
		{`"John Doe"@example.com`, `"john doe"@example.com`},
		{`"a..b"@example.com`, `"a..b"@example.com`},
		{`"a\"b"@example.com`, `"a\"b"@example.com`},
		{"ann@localhost", "ann@localhost"},
		// IDN: Unicode, punycode, case, NFD and width all meet in one form.
		{"jörg@bücher.example", "jörg@xn--bcher-kva.example"},
		{"jörg@xn--bcher-kva.example", "jörg@xn--bcher-kva.example"},
		{"jörg@XN--BCHER-KVA.EXAMPLE", "jörg@xn--bcher-kva.example"},
		{"JÖRG@BÜCHER.EXAMPLE", "jörg@xn--bcher-kva.example"},
		{"jo\u0308rg@bu\u0308cher.example", "jörg@xn--bcher-kva.example"},
		{"ann@ｅｘａｍｐｌｅ.com", "ann@example.com"}, // full-width letters (UTS #46 mapping)
		{"taro@例え.jp", "taro@xn--r8jz45g.jp"},
		{"ivan@пример.рф", "ivan@xn--e1afmkfd.xn--p1ai"},
		{"ann@faß.de", "ann@xn--fa-hia.de"}, // non-transitional: ß is kept, not "fass.de"
		{"ann@FAẞ.DE", "ann@fass.de"},       // UTS #46 maps U+1E9E CAPITAL SHARP S to "ss"
		{"Å@example.com", "å@example.com"},  // U+212B ANGSTROM SIGN is NFC U+00C5
		{strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61), strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)},
	} {
		got, err := NormalizeEmail(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		again, err := NormalizeEmail(got)
		require.NoError(t, err, got)
		require.Equal(t, got, again, "not idempotent")
	}
}

func TestNormalizeEmailRejects(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 62)
	for _, tc := range []struct{ in, want string }{
		{"", "email address is empty"},
		{" \t ", "email address is empty"},
		{"foo", `address "foo" has no "@"`},
		{"Ann Example", `address "Ann Example" has no "@"`},
		{"ann@", `address "ann@" has nothing after "@"`},
		{"@example.com", `address "@example.com" has nothing before "@"`},
		{"ann@@example.com", `address "ann@@example.com" is not a valid email address`},
		{"ann@example.com, bob@example.com", "is not a valid email address: expected single address"},
		{"ann bob@example.com", `is not a valid email address`},
		{"ann..x@example.com", `is not a valid email address`},
		{"ann@example..com", `is not a valid email address`},
		{"ann@example.com.", `is not a valid email address`},
		{"Ann <ann@example.com", `is not a valid email address`},
		{"ann@[192.0.2.1]", `address "ann@[192.0.2.1]" has a domain literal "[192.0.2.1]"; a domain name is required`},
		{"ann@192.0.2.1", `has an invalid domain "192.0.2.1": the top-level domain "1" is all digits`},
		{"ann@exa_mple.com", `address "ann@exa_mple.com" has an invalid domain "exa_mple.com": disallowed rune U+005F`},
		{"ann@-example.com", `has an invalid domain "-example.com"`},
		{"ann@xn--bcher-kva-.example", `has an invalid domain`},
		{"ann@xn--zzzzzzzzz.example", `has an invalid domain`},
		{"ann@" + strings.Repeat("b", 64) + ".com", `has an invalid domain`},
		{"ann@exa\u200dmple.com", `has an invalid domain`}, // ZWJ outside its context
		{long, "is 255 octets long once normalised; the limit is 254"},
		{"ann\xff@example.com", "is not valid UTF-8"},
		{"ann\u200b@example.com", `address "ann\u200b@example.com" has the invisible character U+200B in its local part`},
		{"\ufeffann@example.com", "has the invisible character U+FEFF in its local part"},
		{"an\u00a0n@example.com", "has the invisible character U+00A0 in its local part"},
		{"ann\u0085x@example.com", "has the invisible character U+0085 in its local part"},
		{"a\u200dnn@example.com", "has the invisible character U+200D in its local part"},
	} {
		got, err := NormalizeEmail(tc.in)
		require.Error(t, err, "%q normalised to %q", tc.in, got)
		require.ErrorIs(t, err, ErrInvalidTarget, tc.in)
		require.ErrorContains(t, err, tc.want, tc.in)
		require.Empty(t, got)
		require.NotContains(t, err.Error(), "mail: ", "net/mail's prefix leaks")
		require.NotContains(t, err.Error(), "idna: ", "idna's prefix leaks")
	}
}

func TestNormalizeEmailIdempotent(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		in := genIntent().Filter(func(in intent) bool { return in.Email }).Draw(t, "intent")
		addr := in.spellAddress(t)
		got, err := NormalizeEmail(addr)
		require.NoError(t, err, addr)
		require.Equal(t, in.normalized().Target.Value, got, addr)
		again, err := NormalizeEmail(got)
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}

func TestTargetNormalize(t *testing.T) {
	t.Parallel()
	email, err := NewEmailTarget(" Ann <ANN@Bücher.Example> ")
	require.NoError(t, err)
	require.Equal(t, Target{Kind: TargetEmail, Value: "ann@xn--bcher-kva.example"}, email)
	again, err := email.Normalize()
	require.NoError(t, err)
	require.Equal(t, email, again)

	got, err := Target{Kind: TargetEmail, Value: "ANN@example.com"}.Normalize()
	require.NoError(t, err)
	require.Equal(t, Target{Kind: TargetEmail, Value: "ann@example.com"}, got)

	subject, err := NewSubjectTarget("  acct_Cafe\u0301  ")
	require.NoError(t, err)
	require.Equal(t, Target{Kind: TargetSubject, Value: "acct_Café"}, subject, "trimmed, NFC, case kept")
	again, err = subject.Normalize()
	require.NoError(t, err)
	require.Equal(t, subject, again)

	for _, tc := range []struct {
		target Target
		want   string
	}{
		{Target{}, `target kind is empty (want "email" or "subject")`},
		{Target{Kind: "sms", Value: "+49"}, `target kind "sms" is unknown (want "email" or "subject")`},
		{Target{Kind: "EMAIL", Value: "ann@example.com"}, `target kind "EMAIL" is unknown (want "email" or "subject")`},
		{Target{Kind: TargetEmail}, "email address is empty"},
		{Target{Kind: TargetSubject, Value: "\t"}, "subject id is empty"},
		{Target{Kind: TargetSubject, Value: "acct\n1"}, `subject id "acct\n1" contains control character U+000A at byte 4`},
		{Target{Kind: TargetSubject, Value: "acct\xfe"}, `subject id "acct\xfe" is not valid UTF-8`},
	} {
		got, err := tc.target.Normalize()
		require.ErrorIs(t, err, ErrInvalidTarget, "%#v", tc.target)
		require.EqualError(t, err, tc.want)
		require.Equal(t, Target{}, got)
	}

	_, err = NewEmailTarget("foo")
	require.ErrorIs(t, err, ErrInvalidTarget)
	_, err = NewSubjectTarget("")
	require.ErrorIs(t, err, ErrInvalidTarget)
}

func TestNormalizeEmailKeepsParserCause(t *testing.T) {
	t.Parallel()
	_, err := NormalizeEmail("ann@exa_mple.com")
	require.ErrorIs(t, err, ErrInvalidTarget)
	var cause interface{ Unwrap() []error }
	require.True(t, errors.As(err, &cause))
	require.Len(t, cause.Unwrap(), 2, "the idna error is kept for debugging")
}

func FuzzNormalizeEmail(f *testing.F) {
	for _, s := range []string{
		"ann@example.com",
		"Ann <ANN@Example.COM>",
		"jo\u0308rg@XN--BCHER-KVA.example",
		"taro@例え.jp",
		`"a\"b c"@example.com`,
		"ann@[192.0.2.1]",
		"ann@example.com (work)",
		"g: ann@example.com;",
		"=?utf-8?q?J=C3=B6rg?= <jorg@example.com>",
		"\u00a0ann@example.com\u3000",
		"ann@xn--fa-hia.de",
		"ann@exa\u200dmple.com",
		"foo",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeEmail(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidTarget)
			require.Empty(t, got)
			return
		}
		again, err := NormalizeEmail(got)
		require.NoError(t, err, "normalised %q to %q, which is refused", s, got)
		require.Equal(t, got, again, "not idempotent for %q", s)

		require.LessOrEqual(t, len(got), MaxEmailLength)
		require.True(t, norm.NFC.IsNormalString(got))
		require.Equal(t, strings.TrimSpace(got), got)
		parsed, err := mail.ParseAddress(got)
		require.NoError(t, err)
		require.Empty(t, parsed.Name)
		at := strings.LastIndexByte(got, '@')
		require.Positive(t, at)
		domain := got[at+1:]
		require.Equal(t, strings.ToLower(domain), domain)
		for _, r := range domain {
			require.Less(t, r, rune(0x80), "domain %q is not ASCII", domain)
		}

		// Equal inputs, equal keys; the normalised address is the same target.
		k1, err := NewKey(KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: TargetEmail, Value: s}})
		require.NoError(t, err)
		k2, err := NewKey(KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: TargetEmail, Value: got}})
		require.NoError(t, err)
		require.Equal(t, k1, k2)
	})
}

var benchEmail string

func BenchmarkNormalizeEmail(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		v, err := NormalizeEmail("ann.example+news@example.com")
		if err != nil {
			b.Fatal(err)
		}
		benchEmail = v
	}
}
