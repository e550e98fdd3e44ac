package ledger

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/onceplan/onceplan/internal/onceplan"
	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// ErrInvalidTarget is wrapped by every error that rejects a target, so callers
// (the plan importer, the API) can tell a bad address from other failures with
// errors.Is. The error's message names the problem in one sentence.
var ErrInvalidTarget = onceplan.New(onceplan.CodeInvalid, "invalid target")

// TargetKind says what kind of identity a [Target] is, and so which
// normalisation rule applies to its value.
type TargetKind string

const (
	// TargetEmail is an email address, normalised by [NormalizeEmail].
	TargetEmail TargetKind = "email"
	// TargetSubject is an opaque subject id (for example a webhook
	// receiver's account id): surrounding white space trimmed, Unicode NFC,
	// letter case kept.
	TargetSubject TargetKind = "subject"
)

// MaxEmailLength is the longest normalised email address accepted, in octets
// (RFC 5321's path limit of 256 less the angle brackets).
const MaxEmailLength = 254

// Target is the resolved identity an effect lands on. It is resolved by code
// (an imported address, a subject id), never typed by a model. Use
// [NewEmailTarget] or [NewSubjectTarget] to build one; [NewKey] normalises
// whatever it is given.
type Target struct {
	Kind  TargetKind `json:"kind"`
	Value string     `json:"value"`
}

// NewEmailTarget returns the email target for addr, normalised by
// [NormalizeEmail].
func NewEmailTarget(addr string) (Target, error) {
	v, err := NormalizeEmail(addr)
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: TargetEmail, Value: v}, nil
}

// NewSubjectTarget returns the subject target for id: surrounding white space
// trimmed and Unicode NFC applied; letter case is kept because subject ids are
// opaque. An empty id, invalid UTF-8 or a control character is refused.
func NewSubjectTarget(id string) (Target, error) {
	v, err := normalizeSubject(id)
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: TargetSubject, Value: v}, nil
}

// Normalize re-applies the rule of t's kind to its value and returns the
// result. It is idempotent. An unknown or empty kind is an error.
func (t Target) Normalize() (Target, error) {
	switch t.Kind {
	case TargetEmail:
		return NewEmailTarget(t.Value)
	case TargetSubject:
		return NewSubjectTarget(t.Value)
	case "":
		return Target{}, targetErrorf(nil, "target kind is empty (want %q or %q)", TargetEmail, TargetSubject)
	default:
		return Target{}, targetErrorf(nil, "target kind %s is unknown (want %q or %q)",
			quoteShort(string(t.Kind)), TargetEmail, TargetSubject)
	}
}

// emailProfile converts domains to ASCII. It is spelled out option by option
// rather than taken from idna.Lookup, whose configuration "may change over
// time": the result is hashed into effect keys and must not move under us.
// UTS #46 non-transitional mapping (ß stays ß), STD3 ASCII rules (letters,
// digits, hyphen), hyphen and joiner checks, the Bidi rule, and DNS lengths.
var emailProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.StrictDomainName(true),
	idna.BidiRule(),
	idna.VerifyDNSLength(true),
)

// NormalizeEmail is the one rule for email targets, shared by the plan
// importer and [NewKey]. In order:
//
//  1. surrounding white space is trimmed; the input must be valid UTF-8;
//  2. Unicode NFC is applied, and folded lines are unfolded (a CRLF or LF
//     followed by a space or tab is removed, RFC 5322 section 2.2.3);
//  3. the address is parsed with [mail.ParseAddress], so "Ann <ann@example.com>"
//     is accepted and the display name dropped, and comments, quoting and
//     folding white space follow RFC 5322 (with RFC 6532 UTF-8);
//  4. the local part is lower-cased (then NFC again); control, format and
//     non-ASCII space characters (U+200B, U+FEFF, U+00A0, ...) in it are
//     refused, as they are invisible and would make a second target;
//  5. the domain is converted to ASCII by IDNA (UTS #46 lookup mapping,
//     non-transitional, STD3 rules, Bidi rule, DNS lengths), which also
//     lower-cases it, so "Bücher.Example", "bücher.example" and
//     "xn--bcher-kva.example" are one domain; punycode labels are decoded and
//     re-encoded so only the canonical form comes out; a top-level domain
//     that is all digits is refused;
//  6. the address is written back as net/mail writes an addr-spec: the local
//     part quoted only when it is not a dot-atom.
//
// It refuses, with an error wrapping [ErrInvalidTarget] whose message names
// the problem: an empty address, one without "@", one net/mail cannot parse,
// an invisible character in the local part, a domain literal ("[192.0.2.1]"),
// a numeric top-level domain or any domain IDNA rejects, and a result
// longer than [MaxEmailLength] octets. NormalizeEmail is idempotent.
func NormalizeEmail(addr string) (string, error) {
	s := strings.TrimSpace(addr)
	if s == "" {
		return "", targetErrorf(nil, "email address is empty")
	}
	if !utf8.ValidString(s) {
		return "", targetErrorf(nil, "address %s is not valid UTF-8", quoteShort(s))
	}
	s = norm.NFC.String(s)
	if strings.IndexByte(s, '\n') >= 0 {
		// Unfold (RFC 5322 section 2.2.3), which net/mail does not do: a
		// line break followed by white space is just that white space.
		s = unfold(s)
	}
	if strings.IndexByte(s, '@') < 0 {
		return "", targetErrorf(nil, "address %s has no \"@\"", quoteShort(s))
	}
	// net/mail's complaints about these two are cryptic ("missing '@' or
	// angle-addr"); name them plainly.
	if strings.HasSuffix(s, "@") {
		return "", targetErrorf(nil, "address %s has nothing after \"@\"", quoteShort(s))
	}
	if strings.HasPrefix(s, "@") {
		return "", targetErrorf(nil, "address %s has nothing before \"@\"", quoteShort(s))
	}
	parsed, err := mail.ParseAddress(s)
	if err != nil {
		return "", targetErrorf(err, "address %s is not a valid email address: %s",
			quoteShort(s), strings.ReplaceAll(err.Error(), "mail: ", ""))
	}
	at := strings.LastIndexByte(parsed.Address, '@')
	if at < 0 { // net/mail always returns local@domain; be safe anyway.
		return "", targetErrorf(nil, "address %s has no \"@\"", quoteShort(s))
	}
	local, domain := parsed.Address[:at], parsed.Address[at+1:]
	if strings.HasPrefix(domain, "[") {
		return "", targetErrorf(nil, "address %s has a domain literal %s; a domain name is required",
			quoteShort(s), quoteShort(domain))
	}
	asciiDomain, err := toASCIIDomain(domain)
	if err != nil {
		return "", targetErrorf(err, "address %s has an invalid domain %s: %s",
			quoteShort(s), quoteShort(domain), strings.TrimPrefix(err.Error(), "idna: "))
	}
	local = norm.NFC.String(strings.ToLower(local))
	for _, r := range local {
		// net/mail takes any non-ASCII rune as an atom character. Invisible
		// ones (zero-width space, BOM, no-break space, C1 controls) are
		// copy-paste debris that would make "ann\u200b@x" a second target
		// beside "ann@x", so they are refused rather than kept or dropped.
		if r != ' ' && r != '\t' && unicode.In(r, unicode.Cc, unicode.Cf, unicode.Z) {
			return "", targetErrorf(nil, "address %s has the invisible character %U in its local part",
				quoteShort(s), r)
		}
	}
	// mail.Address.String quotes the local part when it is not a dot-atom and
	// writes "<addr>" when there is no display name.
	out := (&mail.Address{Address: local + "@" + asciiDomain}).String()
	out = out[1 : len(out)-1]
	if len(out) > MaxEmailLength {
		return "", targetErrorf(nil, "address %s is %d octets long once normalised; the limit is %d",
			quoteShort(s), len(out), MaxEmailLength)
	}
	return out, nil
}

// unfold removes each CRLF or bare LF that is followed by a space or tab.
func unfold(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' && i+2 < len(s) && s[i+1] == '\n' && (s[i+2] == ' ' || s[i+2] == '\t') {
			i++
			continue
		}
		if s[i] == '\n' && i+1 < len(s) && (s[i+1] == ' ' || s[i+1] == '\t') {
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// toASCIIDomain returns the canonical ASCII form of a domain name.
func toASCIIDomain(domain string) (string, error) {
	ascii, err := emailProfile.ToASCII(domain)
	if err != nil {
		return "", err
	}
	if ascii == "" {
		return "", errors.New("the domain is empty")
	}
	// A top-level domain is never all digits (RFC 3696 section 2); refusing
	// it keeps "ann@192.0.2.1" from passing as a host name.
	tld := ascii[strings.LastIndexByte(ascii, '.')+1:]
	if strings.Trim(tld, "0123456789") == "" {
		return "", fmt.Errorf("the top-level domain %q is all digits", tld)
	}
	if !strings.Contains(ascii, "xn--") {
		return ascii, nil
	}
	// An A-label given by the caller is kept as written by ToASCII once it
	// validates; decode and re-encode it so that only the canonical encoding
	// of a name can reach a key.
	u, err := emailProfile.ToUnicode(ascii)
	if err != nil {
		return "", err
	}
	return emailProfile.ToASCII(u)
}

// normalizeSubject applies the subject-id rule: NFC, trimmed, no control
// characters, not empty.
func normalizeSubject(id string) (string, error) {
	v, err := normalizeText(id)
	if err != nil {
		return "", targetErrorf(nil, "subject id %s", err.Error())
	}
	if v == "" {
		return "", targetErrorf(nil, "subject id is empty")
	}
	return v, nil
}

// errTextMessage is an error from normalizeText; its message is the end of a
// sentence whose subject the caller names ("event ...", "subject id ...").
type errTextMessage string

func (e errTextMessage) Error() string { return string(e) }

// normalizeText is the rule for free identifiers (event, tool, scope, subject
// ids): valid UTF-8, Unicode NFC, surrounding white space trimmed, no control
// characters.
func normalizeText(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errTextMessage(fmt.Sprintf("%s is not valid UTF-8", quoteShort(s)))
	}
	s = strings.TrimSpace(norm.NFC.String(s))
	for i, r := range s {
		if unicode.IsControl(r) {
			return "", errTextMessage(fmt.Sprintf("%s contains control character %U at byte %d",
				quoteShort(s), r, i))
		}
	}
	return s, nil
}

func targetErrorf(cause error, format string, args ...any) error {
	return newSentenceError(ErrInvalidTarget, cause, format, args...)
}

// sentenceError is a validation error whose message is one sentence naming
// the problem, without a package prefix, so it can be shown as is (an import
// report line, an API error message). It unwraps to its sentinel and, when
// there is one, the underlying cause.
type sentenceError struct {
	msg     string
	wrapped []error
}

func newSentenceError(sentinel, cause error, format string, args ...any) error {
	e := &sentenceError{msg: fmt.Sprintf(format, args...), wrapped: []error{sentinel}}
	if cause != nil {
		e.wrapped = append(e.wrapped, cause)
	}
	return e
}

func (e *sentenceError) Error() string { return e.msg }

func (e *sentenceError) Unwrap() []error { return e.wrapped }

// quoteShort quotes s for an error message, cutting very long input so a
// hostile value cannot make a megabyte error.
func quoteShort(s string) string {
	const max = 100
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
