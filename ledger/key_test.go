package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
	"pgregory.net/rapid"
)

// keyVector is one golden vector of testdata/key_vectors.json.
type keyVector struct {
	Name      string          `json:"name"`
	SameKeyAs string          `json:"same_key_as"`
	Input     json.RawMessage `json:"input"`
	Canonical string          `json:"canonical"`
	Key       string          `json:"key"`
}

func loadKeyVectors(t testing.TB) []keyVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/key_vectors.json")
	require.NoError(t, err)
	var file struct {
		Vectors []keyVector `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.GreaterOrEqual(t, len(file.Vectors), 12)
	return file.Vectors
}

// TestKeyGoldenVectors pins the v1 rule. The vectors were computed outside Go
// from the normalised fields; if this test fails, canonicalisation changed,
// and that must be a new key version, not an edit of the vectors.
func TestKeyGoldenVectors(t *testing.T) {
	t.Parallel()
	vectors := loadKeyVectors(t)
	byName := make(map[string]keyVector, len(vectors))
	for _, v := range vectors {
		byName[v.Name] = v
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			sum := sha256.Sum256([]byte(v.Canonical))
			require.Equal(t, v.Key, "v1:"+hex.EncodeToString(sum[:]), "vector file is inconsistent")
			_, err := ParseKey(v.Key)
			require.NoError(t, err)

			// As an agent sends it.
			k, err := KeyFromJSON(v.Input)
			require.NoError(t, err)
			require.Equal(t, v.Key, k.String())

			// As Go code calls it: decoded by encoding/json, not by our parser.
			var in KeyInput
			require.NoError(t, json.Unmarshal(v.Input, &in))
			canonical, err := CanonicalJSON(in)
			require.NoError(t, err)
			require.Equal(t, v.Canonical, string(canonical))
			k, err = NewKey(in)
			require.NoError(t, err)
			require.Equal(t, Key(v.Key), k)

			// The canonical form is itself a valid input with the same key.
			k, err = KeyFromJSON(canonical)
			require.NoError(t, err)
			require.Equal(t, Key(v.Key), k)

			if v.SameKeyAs != "" {
				other, ok := byName[v.SameKeyAs]
				require.True(t, ok, "same_key_as names no vector")
				require.Equal(t, other.Key, v.Key)
			}
		})
	}
	seen := map[string]string{}
	for _, v := range vectors {
		root := v.Name
		if v.SameKeyAs != "" {
			root = v.SameKeyAs
		}
		if prev, ok := seen[v.Key]; ok {
			require.Equal(t, prev, root, "vectors %q and %q are different intents with one key", prev, root)
		}
		seen[v.Key] = root
	}
}

func TestKeyInputHasNoFieldForGeneratedText(t *testing.T) {
	t.Parallel()
	// The key must not depend on generated text. KeyInput's fields are the
	// whole of what a key can depend on; adding one is a new key version.
	var names []string
	typ := reflect.TypeFor[KeyInput]()
	for i := range typ.NumField() {
		names = append(names, typ.Field(i).Name)
	}
	require.Equal(t, []string{"Event", "Tool", "Target", "AmountMinor", "Scope"}, names)
	require.Equal(t, []string{"Kind", "Value"}, []string{
		reflect.TypeFor[Target]().Field(0).Name, reflect.TypeFor[Target]().Field(1).Name,
	})
	require.Equal(t, 2, reflect.TypeFor[Target]().NumField())

	for _, field := range []string{"subject", "body", "text", "html"} {
		_, err := KeyFromJSON([]byte(`{"event":"c1","tool":"email.send","target":{"kind":"email","value":"ann@example.com"},"` +
			field + `":"Hello"}`))
		require.ErrorIs(t, err, ErrInvalidKeyInput)
		require.ErrorContains(t, err, `unknown field "`+field+`"`)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	valid := "v1:" + strings.Repeat("0123456789abcdef", 4)
	k, err := ParseKey(valid)
	require.NoError(t, err)
	require.Equal(t, valid, k.String())

	for _, tc := range []struct {
		in, want string
	}{
		{"", "effect key is empty"},
		{"x", `effect key "x" does not start with "v1:"`},
		{"V1:" + valid[3:], `does not start with "v1:"`},
		{"v2:" + valid[3:], `has version "v2"; only "v1" is supported`},
		{"v1:", `has 0 characters after "v1:", want 64 hex digits`},
		{valid[:66], `has 63 characters after "v1:", want 64 hex digits`},
		{valid + "0", `has 65 characters after "v1:"`},
		{"v1:" + strings.Repeat("A", 64), `has upper-case hex digit 'A' at offset 3; keys are lower-case`},
		{"v1:" + strings.Repeat("0", 63) + "g", `has 'g' at offset 66, want a hex digit`},
		{"v1:" + strings.Repeat("0", 62) + "é", `has 'é' at offset 65, want a hex digit`},
		{" " + valid, `does not start with "v1:"`},
		{strings.Repeat("x", 1000), `… (1000 bytes)`},
	} {
		_, err := ParseKey(tc.in)
		require.ErrorIs(t, err, ErrInvalidKey, "input %q", tc.in)
		require.ErrorContains(t, err, tc.want, "input %q", tc.in)
	}
}

func TestNewKeyErrors(t *testing.T) {
	t.Parallel()
	ann := Target{Kind: TargetEmail, Value: "ann@example.com"}
	for _, tc := range []struct {
		name     string
		in       KeyInput
		want     string
		isTarget bool
	}{
		{"no event", KeyInput{Tool: "email.send", Target: ann}, "event is required", false},
		{"blank event", KeyInput{Event: " \t", Tool: "email.send", Target: ann}, "event is required", false},
		{"control in event", KeyInput{Event: "c\x001", Tool: "email.send", Target: ann}, `event "c\x001" contains control character U+0000 at byte 1`, false},
		{"invalid UTF-8 event", KeyInput{Event: "c\xff", Tool: "email.send", Target: ann}, `event "c\xff" is not valid UTF-8`, false},
		{"no tool", KeyInput{Event: "c1", Target: ann}, "tool is required", false},
		{"upper-case tool", KeyInput{Event: "c1", Tool: "Email.Send", Target: ann}, `tool "Email.Send" has 'E' at byte 0`, false},
		{"tool with space", KeyInput{Event: "c1", Tool: "email send", Target: ann}, `tool "email send" has ' ' at byte 5`, false},
		{"tool starting with dot", KeyInput{Event: "c1", Tool: ".send", Target: ann}, `tool ".send" has '.' at byte 0`, false},
		{"control in scope", KeyInput{Event: "c1", Tool: "email.send", Target: ann, Scope: "a\u0085b"}, `scope "a\u0085b" contains control character U+0085`, false},
		{"no target", KeyInput{Event: "c1", Tool: "email.send"}, `target kind is empty (want "email" or "subject")`, true},
		{"unknown kind", KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: "sms", Value: "+4912345"}}, `target kind "sms" is unknown`, true},
		{"upper-case kind", KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: "Email", Value: "ann@example.com"}}, `target kind "Email" is unknown`, true},
		{"bad email", KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: TargetEmail, Value: "foo"}}, `address "foo" has no "@"`, true},
		{"empty subject", KeyInput{Event: "c1", Tool: "webhook.post", Target: Target{Kind: TargetSubject, Value: "  "}}, "subject id is empty", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewKey(tc.in)
			require.ErrorIs(t, err, ErrInvalidKeyInput)
			require.Equal(t, tc.isTarget, errors.Is(err, ErrInvalidTarget))
			require.ErrorContains(t, err, tc.want)
			_, err = CanonicalJSON(tc.in)
			require.ErrorIs(t, err, ErrInvalidKeyInput)
		})
	}
}

const jsonAnn = `"event":"c1","tool":"email.send","target":{"kind":"email","value":"ann@example.com"}`

func TestKeyFromJSONRefusesFloats(t *testing.T) {
	t.Parallel()
	for _, lit := range []string{"0.1", "0.30", "30.0", "3e1", "3E1", "3e+1", "300e-1", "1e400", "-0.0", "1.5", "0e0"} {
		_, err := KeyFromJSON([]byte(`{` + jsonAnn + `,"amount_minor":` + lit + `}`))
		require.ErrorIs(t, err, ErrInvalidKeyInput, lit)
		require.EqualError(t, err, "amount_minor \""+lit+"\" is not an integer; amounts are integer minor units (e.g. 1999 cents), without fraction or exponent")
	}
	for _, tc := range []struct{ lit, want string }{
		{`"30"`, "amount_minor must be a JSON integer (minor units, e.g. cents), not a string"},
		{`null`, "amount_minor must be a JSON integer (minor units, e.g. cents), not null"},
		{`true`, "not a boolean"},
		{`[30]`, "not an array"},
		{`{"cents":30}`, "not an object"},
		{`9223372036854775808`, `amount_minor "9223372036854775808" does not fit in a 64-bit integer`},
		{`-9223372036854775809`, `does not fit in a 64-bit integer`},
		{`NaN`, "not valid JSON"},
		{`Infinity`, "not valid JSON"},
		{`+30`, "not valid JSON"},
		{`030`, "not valid JSON"},
		{`.5`, "not valid JSON"},
	} {
		_, err := KeyFromJSON([]byte(`{` + jsonAnn + `,"amount_minor":` + tc.lit + `}`))
		require.ErrorIs(t, err, ErrInvalidKeyInput, tc.lit)
		require.ErrorContains(t, err, tc.want, tc.lit)
	}

	// Integers are fine, including -0 (which is 0) and the int64 limits.
	for lit, want := range map[string]int64{"0": 0, "-0": 0, "30": 30, "-1999": -1999, "9223372036854775807": 1<<63 - 1} {
		k, err := KeyFromJSON([]byte(`{` + jsonAnn + `,"amount_minor":` + lit + `}`))
		require.NoError(t, err, lit)
		k2, err := NewKey(KeyInput{Event: "c1", Tool: "email.send", Target: Target{Kind: TargetEmail, Value: "ann@example.com"}, AmountMinor: want})
		require.NoError(t, err)
		require.Equal(t, k2, k, lit)
	}
}

func TestKeyFromJSONRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{` + jsonAnn + `,"amount":30}`, `key input has unknown field "amount" (allowed: event, tool, target, amount_minor, scope)`},
		{`{` + jsonAnn + `,"Scope":"x"}`, `key input has unknown field "Scope"`},
		{`{"Event":"c1","tool":"email.send","target":{"kind":"email","value":"ann@example.com"}}`, `unknown field "Event"`},
		{`{` + jsonAnn + `,"epoch":1}`, `unknown field "epoch"`},
		{`{"event":"c1","tool":"email.send","target":{"kind":"email","value":"ann@example.com","name":"Ann"}}`, `target has unknown field "name" (allowed: kind, value)`},
	} {
		_, err := KeyFromJSON([]byte(tc.in))
		require.ErrorIs(t, err, ErrInvalidKeyInput, tc.in)
		require.ErrorContains(t, err, tc.want, tc.in)
	}
}

func TestKeyFromJSONErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{``, "key input is empty"},
		{"  \n", "key input is empty"},
		{`null`, "key input must be a JSON object, not null"},
		{`[]`, "key input must be a JSON object, not an array"},
		{`"v1:abc"`, "key input must be a JSON object, not a string"},
		{`{`, "key input ends too early"},
		{`{"event":"c1",}`, "not valid JSON"},
		{`{` + jsonAnn + `} {}`, "key input has data after the JSON object"},
		{`{` + jsonAnn + `}]`, "key input has data after the JSON object"},
		{`{"event":"c1","event":"c2","tool":"email.send","target":{"kind":"email","value":"ann@example.com"}}`, `key input has field "event" more than once`},
		{`{"event":"c1","tool":"email.send","target":{"kind":"email","kind":"email","value":"ann@example.com"}}`, `target has field "kind" more than once`},
		{`{"tool":"email.send","target":{"kind":"email","value":"ann@example.com"}}`, "event is required"},
		{`{"event":"c1","target":{"kind":"email","value":"ann@example.com"}}`, "tool is required"},
		{`{"event":"c1","tool":"email.send"}`, "target is required"},
		{`{"event":"c1","tool":"email.send","target":{"value":"ann@example.com"}}`, "target.kind is required"},
		{`{"event":"c1","tool":"email.send","target":{"kind":"email"}}`, "target.value is required"},
		{`{"event":"c1","tool":"email.send","target":"ann@example.com"}`, "target must be a JSON object, not a string"},
		{`{"event":1,"tool":"email.send","target":{"kind":"email","value":"ann@example.com"}}`, "event must be a JSON string, not the number 1"},
		{`{"event":null,"tool":"email.send","target":{"kind":"email","value":"ann@example.com"}}`, "event must be a JSON string, not null"},
		{`{"event":"c1","tool":"email.send","target":{"kind":"email","value":["ann@example.com"]}}`, "target.value must be a JSON string, not an array"},
		{`{"event":"c1","tool":"email.send","target":{"kind":"email","value":"foo"}}`, `address "foo" has no "@"`},
		{"{\"event\":\"c\xff\"}", "key input is not valid UTF-8"},
	} {
		_, err := KeyFromJSON([]byte(tc.in))
		require.ErrorIs(t, err, ErrInvalidKeyInput, tc.in)
		require.ErrorContains(t, err, tc.want, tc.in)
	}
	_, err := KeyFromJSON([]byte(`{"event":"c1","tool":"email.send","target":{"kind":"email","value":"foo"}}`))
	require.ErrorIs(t, err, ErrInvalidTarget)
}

// intent is one intended effect, generated for property tests, with the
// normalised value of each field known independently of the code under test.
type intent struct {
	Event, Tool, Scope string // already NFC, trimmed
	Email              bool   // target kind email (else subject)
	Local              string // lower-case NFC local part (email)
	Domain             int    // index into testDomains (email)
	Subject            string // subject id (subject)
	Amount             int64
}

// testDomains are (Unicode, ASCII) spellings of one domain; the ASCII forms
// were computed outside Go.
var testDomains = []struct{ unicode, ascii string }{
	{"example.com", "example.com"},
	{"mail.example.org", "mail.example.org"},
	{"bücher.example", "xn--bcher-kva.example"},
	{"münchen.de", "xn--mnchen-3ya.de"},
	{"例え.jp", "xn--r8jz45g.jp"},
	{"ελληνικά.gr", "xn--hxargifdar.gr"},
	{"пример.рф", "xn--e1afmkfd.xn--p1ai"},
	{"faß.de", "xn--fa-hia.de"},
}

// textRunes mixes ASCII with letters that have decomposed forms, so NFC and
// NFD spellings differ.
var textRunes = []rune("abcxyzABCXYZ0129_-.:/éüñÅçøŌǅ你好 ")

var localRunes = []rune("abcxyz0129_+-éüñçø")

func genText(min int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		s := rapid.StringOfN(rapid.SampledFrom(textRunes), min, 16, -1).Draw(t, "text")
		return strings.TrimSpace(norm.NFC.String(s))
	})
}

func genIntent() *rapid.Generator[intent] {
	return rapid.Custom(func(t *rapid.T) intent {
		in := intent{
			Event: genText(1).Filter(func(s string) bool { return s != "" }).Draw(t, "event"),
			Tool:  rapid.SampledFrom([]string{"email.send", "webhook.post", "sms.send", "email.send.v2"}).Draw(t, "tool"),
			Scope: genText(0).Draw(t, "scope"),
			Email: rapid.Bool().Draw(t, "email"),
		}
		if rapid.Bool().Draw(t, "hasAmount") {
			in.Amount = rapid.Int64().Draw(t, "amount")
		}
		if in.Email {
			parts := rapid.SliceOfN(rapid.StringOfN(rapid.SampledFrom(localRunes), 1, 8, -1), 1, 3).Draw(t, "local")
			in.Local = norm.NFC.String(strings.Join(parts, "."))
			in.Domain = rapid.IntRange(0, len(testDomains)-1).Draw(t, "domain")
		} else {
			in.Subject = genText(1).Filter(func(s string) bool { return s != "" }).Draw(t, "subject")
		}
		return in
	})
}

// normalized is the KeyInput the intent must normalise to.
func (in intent) normalized() KeyInput {
	k := KeyInput{Event: in.Event, Tool: in.Tool, AmountMinor: in.Amount, Scope: in.Scope}
	if in.Email {
		k.Target = Target{Kind: TargetEmail, Value: in.Local + "@" + testDomains[in.Domain].ascii}
	} else {
		k.Target = Target{Kind: TargetSubject, Value: in.Subject}
	}
	return k
}

// expectedCanonical builds the canonical JSON with encoding/json, an
// implementation independent of ours (the test alphabets avoid U+2028 and
// U+2029, the only characters encoding/json escapes beyond RFC 8785).
func (in intent) expectedCanonical(t require.TestingT) []byte {
	n := in.normalized()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Struct fields are written in declaration order: sorted by name here.
	require.NoError(t, enc.Encode(struct {
		AmountMinor int64  `json:"amount_minor"`
		Event       string `json:"event"`
		Scope       string `json:"scope"`
		Target      Target `json:"target"`
		Tool        string `json:"tool"`
	}{n.AmountMinor, n.Event, n.Scope, n.Target, n.Tool}))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// spell returns one of many equivalent spellings of s: maybe decomposed
// (NFD), maybe with surrounding white space.
func spell(t *rapid.T, label, s string) string {
	if rapid.Bool().Draw(t, label+"NFD") {
		s = norm.NFD.String(s)
	}
	return pad(t, label, s)
}

func pad(t *rapid.T, label, s string) string {
	space := rapid.SampledFrom([]string{"", " ", "  ", "\t", "\n", "\u00a0", "\u3000"})
	return space.Draw(t, label+"Before") + s + space.Draw(t, label+"After")
}

// randomCase upper-cases some letters whose case round-trips.
func randomCase(t *rapid.T, label, s string) string {
	var b strings.Builder
	for i, r := range s {
		if u := unicode.ToUpper(r); unicode.ToLower(u) == r && u != r && rapid.Bool().Draw(t, fmt.Sprintf("%s%d", label, i)) {
			r = u
		}
		b.WriteRune(r)
	}
	return b.String()
}

// spellAddress returns one spelling of the intent's email address.
func (in intent) spellAddress(t *rapid.T) string {
	local := randomCase(t, "localCase", in.Local)
	d := testDomains[in.Domain]
	domain := d.unicode
	if rapid.Bool().Draw(t, "punycode") {
		domain = d.ascii
	}
	domain = randomCase(t, "domainCase", domain)
	addr := local + "@" + domain
	if rapid.Bool().Draw(t, "addrNFD") {
		addr = norm.NFD.String(addr)
	}
	switch rapid.IntRange(0, 3).Draw(t, "addrForm") {
	case 1:
		addr = rapid.SampledFrom([]string{"Ann", "Ann Example", "\"Example, Ann\"", "Jörg Müller"}).Draw(t, "name") + " <" + addr + ">"
	case 2:
		addr = "<" + addr + ">"
	case 3:
		addr += " (work)"
	}
	return pad(t, "addr", addr)
}

// spellInput returns an equivalent KeyInput as Go code might pass it.
func (in intent) spellInput(t *rapid.T) KeyInput {
	k := KeyInput{
		Event:       spell(t, "event", in.Event),
		Tool:        pad(t, "tool", in.Tool),
		AmountMinor: in.Amount,
		Scope:       spell(t, "scope", in.Scope),
	}
	if in.Email {
		k.Target = Target{Kind: TargetEmail, Value: in.spellAddress(t)}
	} else {
		k.Target = Target{Kind: TargetSubject, Value: spell(t, "subject", in.Subject)}
	}
	return k
}

// spellJSON returns an equivalent KeyFromJSON input: members in any order,
// any white space, strings with or without \u escapes, optional members left
// out when they hold their default.
func (in intent) spellJSON(t *rapid.T) []byte {
	k := in.spellInput(t)
	ws := rapid.SampledFrom([]string{"", " ", "\n  ", "\t"})
	str := func(label, s string) string { return jsonQuote(t, label, s) }
	target := []string{
		`"kind"` + ws.Draw(t, "ws") + ":" + ws.Draw(t, "ws") + str("kind", string(k.Target.Kind)),
		`"value"` + ":" + ws.Draw(t, "ws") + str("value", k.Target.Value),
	}
	if rapid.Bool().Draw(t, "swapTarget") {
		target[0], target[1] = target[1], target[0]
	}
	members := []string{
		`"event":` + ws.Draw(t, "ws") + str("event", k.Event),
		`"tool":` + str("tool", k.Tool),
		`"target":` + ws.Draw(t, "ws") + "{" + strings.Join(target, ","+ws.Draw(t, "ws")) + "}",
	}
	if k.AmountMinor != 0 || rapid.Bool().Draw(t, "writeZeroAmount") {
		lit := strconv.FormatInt(k.AmountMinor, 10)
		if k.AmountMinor == 0 && rapid.Bool().Draw(t, "negativeZero") {
			lit = "-0"
		}
		members = append(members, `"amount_minor":`+ws.Draw(t, "ws")+lit)
	}
	if in.Scope != "" || rapid.Bool().Draw(t, "writeEmptyScope") {
		members = append(members, `"scope"`+ws.Draw(t, "ws")+":"+str("scope", k.Scope))
	}
	order := rapid.Permutation(members).Draw(t, "order")
	return []byte(ws.Draw(t, "ws") + "{" + ws.Draw(t, "ws") + strings.Join(order, ","+ws.Draw(t, "ws")) + ws.Draw(t, "ws") + "}" + ws.Draw(t, "ws"))
}

// jsonQuote writes s as a JSON string, escaping each rune or not at random.
func jsonQuote(t *rapid.T, label, s string) string {
	var b strings.Builder
	b.WriteByte('"')
	escapeAll := rapid.Bool().Draw(t, label+"Escape")
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || (escapeAll && r >= 0x80):
			if r > 0xffff {
				r1, r2 := utf16Pair(r)
				fmt.Fprintf(&b, `\u%04x\u%04X`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

func TestKeyRepresentationsOfOneCallGiveOneKey(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		in := genIntent().Draw(t, "intent")
		canonical, err := CanonicalJSON(in.normalized())
		require.NoError(t, err)
		require.Equal(t, string(in.expectedCanonical(t)), string(canonical))
		want, err := NewKey(in.normalized())
		require.NoError(t, err)
		sum := sha256.Sum256(canonical)
		require.Equal(t, "v1:"+hex.EncodeToString(sum[:]), want.String())

		for i := range 4 {
			spelled := in.spellInput(t)
			got, err := NewKey(spelled)
			require.NoError(t, err, "spelling %d: %#v", i, spelled)
			require.Equal(t, want, got, "spelling %d: %#v", i, spelled)

			raw := in.spellJSON(t)
			got, err = KeyFromJSON(raw)
			require.NoError(t, err, "JSON spelling %d: %s", i, raw)
			require.Equal(t, want, got, "JSON spelling %d: %s", i, raw)
		}
	})
}

// draft is what an agent may rewrite many times: generated text around one
// intent. Only Intent can reach a key; Subject and Body have nowhere to go.
type draft struct {
	Subject string
	Body    string
	Intent  KeyInput
}

func TestKeyDraftsOfOneIntentGiveOneKey(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		in := genIntent().Draw(t, "intent")
		n := rapid.IntRange(2, 6).Draw(t, "drafts")
		drafts := make([]draft, n)
		for i := range drafts {
			drafts[i] = draft{
				Subject: rapid.String().Draw(t, "subject") + fmt.Sprintf(" (v%d)", i),
				Body:    rapid.String().Draw(t, "body") + fmt.Sprintf("\n-- draft %d", i),
				Intent:  in.spellInput(t),
			}
		}
		first, err := NewKey(drafts[0].Intent)
		require.NoError(t, err)
		for i, d := range drafts[1:] {
			require.NotEqual(t, drafts[0].Body, d.Body)
			require.NotEqual(t, drafts[0].Subject, d.Subject)
			k, err := NewKey(d.Intent)
			require.NoError(t, err)
			require.Equal(t, first, k, "draft %d", i+1)
		}
		// Sending the text anyway, as an over-eager agent might, is refused,
		// not silently hashed or silently ignored.
		raw, err := json.Marshal(map[string]any{
			"event": in.Event, "tool": in.Tool, "target": in.normalized().Target,
			"subject": drafts[0].Subject, "body": drafts[0].Body,
		})
		require.NoError(t, err)
		_, err = KeyFromJSON(raw)
		require.ErrorContains(t, err, "unknown field")
	})
}

func TestKeyDifferentIntentsGiveDifferentKeys(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		in := genIntent().Draw(t, "intent")
		other := in
		switch field := rapid.SampledFrom([]string{"event", "tool", "target", "kind", "amount", "scope"}).Draw(t, "field"); field {
		case "event":
			other.Event += rapid.SampledFrom([]string{"x", "2", "é", "\""}).Draw(t, "suffix")
		case "tool":
			other.Tool = rapid.SampledFrom([]string{"email.send", "webhook.post", "sms.send", "email.send.v2"}).
				Filter(func(s string) bool { return s != in.Tool }).Draw(t, "tool")
		case "target":
			if in.Email && rapid.Bool().Draw(t, "changeDomain") {
				other.Domain = rapid.IntRange(0, len(testDomains)-1).Filter(func(i int) bool { return i != in.Domain }).Draw(t, "domain")
			} else {
				other.Local += "x"
				other.Subject += "x"
			}
		case "kind":
			// The same string as an email and as a subject id is two targets.
			if in.Email {
				other.Email, other.Subject = false, in.normalized().Target.Value
			} else {
				other.Email, other.Local, other.Domain = true, "ann", 0
				in.Subject = "ann@example.com"
			}
		case "amount":
			other.Amount = rapid.Int64().Filter(func(v int64) bool { return v != in.Amount }).Draw(t, "amount")
		case "scope":
			other.Scope += rapid.SampledFrom([]string{"s", "é", "\\"}).Draw(t, "suffix")
		}
		a, err := NewKey(in.spellInput(t))
		require.NoError(t, err)
		b, err := NewKey(other.spellInput(t))
		require.NoError(t, err)
		require.NotEqual(t, a, b, "%#v and %#v", in.normalized(), other.normalized())
	})
}

// TestKeyEqualExactlyWhenNormalisedFieldsEqual draws free strings from a
// small alphabet full of JSON syntax, so that a badly delimited encoding
// (e.g. event `a","scope":"b`) would collide.
func TestKeyEqualExactlyWhenNormalisedFieldsEqual(t *testing.T) {
	t.Parallel()
	tricky := rapid.StringOfN(rapid.SampledFrom([]rune(`a"\,:{} é`+"e\u0301")), 0, 5, -1)
	gen := rapid.Custom(func(t *rapid.T) KeyInput {
		return KeyInput{
			Event:       "e" + tricky.Draw(t, "event"),
			Tool:        "email.send",
			Target:      Target{Kind: TargetSubject, Value: "s" + tricky.Draw(t, "subject")},
			AmountMinor: rapid.Int64Range(-1, 1).Draw(t, "amount"),
			Scope:       tricky.Draw(t, "scope"),
		}
	})
	clean := func(s string) string { return strings.TrimSpace(norm.NFC.String(s)) }
	rapid.Check(t, func(t *rapid.T) {
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		same := clean(a.Event) == clean(b.Event) && clean(a.Target.Value) == clean(b.Target.Value) &&
			a.AmountMinor == b.AmountMinor && clean(a.Scope) == clean(b.Scope)
		ka, err := NewKey(a)
		require.NoError(t, err)
		kb, err := NewKey(b)
		require.NoError(t, err)
		require.Equal(t, same, ka == kb, "%#v vs %#v", a, b)

		// The canonical JSON decodes to exactly the normalised fields.
		canonical, err := CanonicalJSON(a)
		require.NoError(t, err)
		var back KeyInput
		require.NoError(t, json.Unmarshal(canonical, &back))
		require.Equal(t, KeyInput{
			Event: clean(a.Event), Tool: a.Tool, AmountMinor: a.AmountMinor, Scope: clean(a.Scope),
			Target: Target{Kind: TargetSubject, Value: clean(a.Target.Value)},
		}, back)
	})
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	// Every escape RFC 8785 prescribes, and characters it leaves alone.
	in := "\x00\x01\b\t\n\v\f\r\x1f \"\\/<>&\x7f\u2028\u2029é😀"
	want := `"\u0000\u0001\b\t\n\u000b\f\r\u001f \"\\/<>&` + "\x7f\u2028\u2029é😀" + `"`
	require.Equal(t, want, string(appendJSONString(nil, in)))
	var back string
	require.NoError(t, json.Unmarshal([]byte(want), &back))
	require.Equal(t, in, back)
}

func FuzzKeyFromJSON(f *testing.F) {
	for _, v := range loadKeyVectors(f) {
		f.Add([]byte(v.Input))
	}
	for _, s := range []string{
		`{` + jsonAnn + `,"amount_minor":0.3}`,
		`{` + jsonAnn + `,"amount_minor":1e400}`,
		`{` + jsonAnn + `,"amount_minor":-0}`,
		`{` + jsonAnn + `,"x":{"y":[1,{"z":null}]}}`,
		`{"event":"\ud800","tool":"email.send","target":{"kind":"subject","value":"\u00e9"}}`,
		`{"event":"c1","event":"c1"}`,
		`[{}]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := KeyFromJSON(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidKeyInput)
			require.NotEmpty(t, err.Error())
			return
		}
		_, err = ParseKey(k.String())
		require.NoError(t, err)
		again, err := KeyFromJSON(bytes.Clone(b))
		require.NoError(t, err)
		require.Equal(t, k, again)

		// The canonical form of the input is an input with the same key, and
		// is a fixed point.
		in, err := parseKeyJSON(b)
		require.NoError(t, err)
		canonical, err := CanonicalJSON(in)
		require.NoError(t, err)
		require.True(t, utf8.Valid(canonical))
		require.True(t, norm.NFC.IsNormal(canonical))
		fromCanonical, err := KeyFromJSON(canonical)
		require.NoError(t, err)
		require.Equal(t, k, fromCanonical)
		in2, err := parseKeyJSON(canonical)
		require.NoError(t, err)
		canonical2, err := CanonicalJSON(in2)
		require.NoError(t, err)
		require.Equal(t, string(canonical), string(canonical2))
		viaNewKey, err := NewKey(in)
		require.NoError(t, err)
		require.Equal(t, k, viaNewKey)
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add("v1:" + strings.Repeat("ab", 32))
	f.Add("v1:" + strings.Repeat("AB", 32))
	f.Add("v2:")
	f.Add("v12345678901:x")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidKey)
			return
		}
		require.Equal(t, s, k.String())
		require.Len(t, s, 67)
		require.True(t, strings.HasPrefix(s, "v1:"))
		_, err = hex.DecodeString(s[3:])
		require.NoError(t, err)
		require.Equal(t, strings.ToLower(s), s)
	})
}

var benchKey Key

func BenchmarkNewKey(b *testing.B) {
	in := KeyInput{
		Event:       "cmp_01HZX3K9",
		Tool:        "email.send",
		Target:      Target{Kind: TargetEmail, Value: "ann.example+news@example.com"},
		AmountMinor: 1999,
		Scope:       "reminder-2",
	}
	b.ReportAllocs()
	for b.Loop() {
		k, err := NewKey(in)
		if err != nil {
			b.Fatal(err)
		}
		benchKey = k
	}
}

func BenchmarkNewKeyIDN(b *testing.B) {
	in := KeyInput{Event: "cmp_01HZX3K9", Tool: "email.send", Target: Target{Kind: TargetEmail, Value: "Jörg <JÖRG@Bücher.Example>"}}
	b.ReportAllocs()
	for b.Loop() {
		k, err := NewKey(in)
		if err != nil {
			b.Fatal(err)
		}
		benchKey = k
	}
}

func BenchmarkKeyFromJSON(b *testing.B) {
	raw := []byte(`{"event":"cmp_01HZX3K9","tool":"email.send","target":{"kind":"email","value":"ann@example.com"},"amount_minor":1999,"scope":"reminder-2"}`)
	b.ReportAllocs()
	for b.Loop() {
		k, err := KeyFromJSON(raw)
		if err != nil {
			b.Fatal(err)
		}
		benchKey = k
	}
}
