package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrInvalidKey is wrapped by the errors of [ParseKey].
var ErrInvalidKey = errors.New("invalid effect key")

// ErrInvalidKeyInput is wrapped by the errors of [NewKey], [CanonicalJSON]
// and [KeyFromJSON]. A rejected target also wraps [ErrInvalidTarget].
var ErrInvalidKeyInput = errors.New("invalid effect key input")

const (
	// KeyVersion is the prefix of keys built by this package's rule.
	KeyVersion = "v1:"
	keyHexLen  = sha256.Size * 2
	keyLen     = len(KeyVersion) + keyHexLen
)

// Key is an effect key: "v1:" followed by 64 lower-case hex digits, the
// SHA-256 of the canonical JSON described at [CanonicalJSON]. Build one with
// [NewKey] or [KeyFromJSON]; check one from outside with [ParseKey].
//
// The prefix versions the canonicalisation. Any change in what is hashed or
// how it is normalised must become a new version ("v2:") that lives beside
// v1, never a silent change of v1 keys: keys are frozen into plans and the
// ledger, and a changed key would let a target that already got its effect
// get it again.
type Key string

// String returns the key as text, "v1:<hex>".
func (k Key) String() string { return string(k) }

// ParseKey checks that s is a well-formed key ("v1:" and 64 lower-case hex
// digits) and returns it. Upper-case hex is refused rather than folded, so a
// key has exactly one spelling. The error wraps [ErrInvalidKey] and says what
// is wrong.
func ParseKey(s string) (Key, error) {
	if s == "" {
		return "", keyErrorf("effect key is empty")
	}
	if len(s) < len(KeyVersion) || s[:len(KeyVersion)] != KeyVersion {
		if v, ok := versionPrefix(s); ok {
			return "", keyErrorf("effect key %s has version %q; only %q is supported",
				quoteShort(s), v, KeyVersion[:len(KeyVersion)-1])
		}
		return "", keyErrorf("effect key %s does not start with %q", quoteShort(s), KeyVersion)
	}
	if n := len(s) - len(KeyVersion); n != keyHexLen {
		return "", keyErrorf("effect key %s has %d characters after %q, want %d hex digits",
			quoteShort(s), n, KeyVersion, keyHexLen)
	}
	for i := len(KeyVersion); i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			return "", keyErrorf("effect key %s has upper-case hex digit %q at offset %d; keys are lower-case",
				quoteShort(s), c, i)
		default:
			r, _ := utf8.DecodeRuneInString(s[i:])
			return "", keyErrorf("effect key %s has %q at offset %d, want a hex digit",
				quoteShort(s), r, i)
		}
	}
	return Key(s), nil
}

// versionPrefix reports whether s starts like "v<digits>:" and returns the
// version.
func versionPrefix(s string) (string, bool) {
	if len(s) < 3 || s[0] != 'v' {
		return "", false
	}
	i := 1
	for i < len(s) && i < 10 && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 1 || i >= len(s) || s[i] != ':' {
		return "", false
	}
	return s[:i], true
}

// KeyInput identifies one intended effect: what event, through which tool, on
// which target, for what amount, within which optional scope.
//
// There is deliberately no field for generated text (subject, body, HTML,
// anything a model wrote): the key of an effect must not change when its
// wording is edited, or an edited draft would send a second effect to targets
// that already got one. A deliberate second effect is made by bumping the
// epoch in the ledger, never by changing the key.
type KeyInput struct {
	// Event is the campaign id, or the scheduler's occurrence id. Required.
	Event string `json:"event"`
	// Tool is the provider kind, e.g. "email.send". Required; lower-case
	// ASCII letters, digits, '.', '_' and '-', starting with a letter or digit.
	Tool string `json:"tool"`
	// Target is normalised by NewKey whatever the caller passed.
	Target Target `json:"target"`
	// AmountMinor is the amount in integer minor units (cents); 0 when the
	// effect has no amount. Negative amounts (refunds) are allowed.
	AmountMinor int64 `json:"amount_minor"`
	// Scope is an optional extra discriminator; "" when unused.
	Scope string `json:"scope"`
}

// normalize returns in with every field normalised, or an error naming the
// field.
func (in KeyInput) normalize() (KeyInput, error) {
	var err error
	out := KeyInput{AmountMinor: in.AmountMinor}
	if out.Event, err = normalizeText(in.Event); err != nil {
		return KeyInput{}, keyInputErrorf(nil, "event %s", err)
	}
	if out.Event == "" {
		return KeyInput{}, keyInputErrorf(nil, "event is required")
	}
	if out.Tool, err = normalizeText(in.Tool); err != nil {
		return KeyInput{}, keyInputErrorf(nil, "tool %s", err)
	}
	if err := validateTool(out.Tool); err != nil {
		return KeyInput{}, err
	}
	if out.Target, err = in.Target.Normalize(); err != nil {
		return KeyInput{}, keyInputErrorf(err, "%s", err)
	}
	if out.Scope, err = normalizeText(in.Scope); err != nil {
		return KeyInput{}, keyInputErrorf(nil, "scope %s", err)
	}
	return out, nil
}

// validateTool refuses tools that are not plain lower-case identifiers, so
// "Email.Send" is an error instead of a second key for "email.send".
func validateTool(tool string) error {
	if tool == "" {
		return keyInputErrorf(nil, "tool is required")
	}
	for i := 0; i < len(tool); i++ {
		c := tool[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			r, _ := utf8.DecodeRuneInString(tool[i:])
			return keyInputErrorf(nil, "tool %s has %q at byte %d; a tool is lower-case ASCII letters, digits, '.', '_' and '-', starting with a letter or digit",
				quoteShort(tool), r, i)
		}
	}
	return nil
}

// NewKey returns the effect key of in: "v1:" + hex(SHA-256(CanonicalJSON(in))).
// It normalises every field first (see [CanonicalJSON]), so equivalent
// spellings of one intent give one key. Errors wrap [ErrInvalidKeyInput].
func NewKey(in KeyInput) (Key, error) {
	var buf [256]byte
	b, err := appendCanonical(buf[:0], in)
	if err != nil {
		return "", err
	}
	return keyOf(b), nil
}

func keyOf(canonical []byte) Key {
	sum := sha256.Sum256(canonical)
	var out [keyLen]byte
	copy(out[:], KeyVersion)
	hex.Encode(out[len(KeyVersion):], sum[:])
	return Key(out[:])
}

// CanonicalJSON returns the exact bytes whose SHA-256 is the key of in, for
// golden tests and audit tooling. The v1 rule:
//
// Fields are normalised first:
//   - event, tool and scope: must be valid UTF-8; Unicode NFC, then
//     surrounding white space trimmed; control characters refused; event and
//     tool required, scope may be empty; tool must be a lower-case ASCII
//     identifier ([a-z0-9][a-z0-9._-]*);
//   - target: [Target.Normalize] (email by [NormalizeEmail]; subject ids NFC
//     and trimmed, case kept); the kind must be "email" or "subject";
//   - amount_minor: the int64 as given.
//
// They are then written as one JSON object with exactly these members, in
// this order (keys sorted by byte value), without insignificant white space:
//
//	{"amount_minor":<int>,"event":<str>,"scope":<str>,"target":{"kind":<str>,"value":<str>},"tool":<str>}
//
// Integers are plain decimal with a leading '-' when negative (no '+', no
// leading zeros, no fraction or exponent). Strings are UTF-8 with only the
// escapes JSON requires, as in RFC 8785: \" and \\, \b \t \n \f \r, \u00xx
// (lower-case hex) for the other control characters below U+0020; everything
// else, including '<', '>', '&', U+2028 and U+2029, is written as is. The
// blob is finally put in NFC, which is a no-op for this shape and pins the
// rule. For amounts within ±2^53 the output is the RFC 8785 (JCS) form of the
// object.
//
// Changing any part of this rule requires a new key version, never a silent
// change of v1.
func CanonicalJSON(in KeyInput) ([]byte, error) {
	return appendCanonical(nil, in)
}

func appendCanonical(dst []byte, in KeyInput) ([]byte, error) {
	n, err := in.normalize()
	if err != nil {
		return nil, err
	}
	b := appendCanonicalFields(dst, n)
	// Every string is already NFC and is delimited by '"', which neither
	// composes nor reorders, so this returns b itself (after a quick scan);
	// it is here so the rule "NFC over the whole blob" holds by construction.
	return norm.NFC.Bytes(b), nil
}

// AppendKeyOfNormalized appends to dst the key of in as [NewKey] would
// return it, for input that is already in normal form, without
// normalising it again (normalising an address is most of a key's cost).
// The audit checks a million frozen targets with it, comparing bytes
// (plan.IsTargetKey): when the key of a stored address is the stored key,
// the key is that address's. For input not in normal form it appends what
// NewKey never returns for it; the caller then asks NewKey.
func AppendKeyOfNormalized(dst []byte, in KeyInput) []byte {
	var buf [256]byte
	sum := sha256.Sum256(appendCanonicalFields(buf[:0], in))
	dst = append(dst, KeyVersion...)
	return hex.AppendEncode(dst, sum[:])
}

// appendCanonicalFields writes the canonical JSON of normalised fields.
func appendCanonicalFields(dst []byte, n KeyInput) []byte {
	b := append(dst, `{"amount_minor":`...)
	b = strconv.AppendInt(b, n.AmountMinor, 10)
	b = append(b, `,"event":`...)
	b = appendJSONString(b, n.Event)
	b = append(b, `,"scope":`...)
	b = appendJSONString(b, n.Scope)
	b = append(b, `,"target":{"kind":`...)
	b = appendJSONString(b, string(n.Target.Kind))
	b = append(b, `,"value":`...)
	b = appendJSONString(b, n.Target.Value)
	b = append(b, `},"tool":`...)
	b = appendJSONString(b, n.Tool)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string with the minimal escapes of
// RFC 8785. s must be valid UTF-8 (normalize guarantees it).
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// KeyFromJSON builds the key from a JSON object as an agent or an API client
// might send it:
//
//	{"event": "...", "tool": "email.send", "target": {"kind": "email", "value": "..."},
//	 "amount_minor": 1999, "scope": "..."}
//
// Member order and white space do not matter. "event", "tool" and "target"
// are required; "amount_minor" defaults to 0 and "scope" to "". It is strict
// where leniency would make two keys for one intent or hide a mistake: the
// input must be valid UTF-8 and one JSON object with nothing after it;
// unknown, duplicate or differently-cased member names are refused (so
// "subject" or "body" cannot be passed); strings must be JSON strings and
// amount_minor a JSON integer literal that fits in int64 — a fraction or an
// exponent (0.3, 30.0, 3e1) is refused, since amounts are integer minor
// units, and so are null and quoted numbers. The result is then [NewKey] of
// the decoded input. Errors wrap [ErrInvalidKeyInput].
func KeyFromJSON(b []byte) (Key, error) {
	in, err := parseKeyJSON(b)
	if err != nil {
		return "", err
	}
	return NewKey(in)
}

// parseKeyJSON decodes the KeyFromJSON object strictly, token by token:
// encoding/json's struct decoding would silently accept duplicate members,
// case-insensitive names and quoted numbers.
func parseKeyJSON(b []byte) (KeyInput, error) {
	var in KeyInput
	if !utf8.Valid(b) {
		return in, keyInputErrorf(nil, "key input is not valid UTF-8")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return in, keyInputErrorf(nil, "key input is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	r := jsonReader{dec: dec}
	var seenTarget, seenEvent, seenTool bool
	err := r.object("key input", func(name string) error {
		switch name {
		case "event":
			seenEvent = true
			return r.str(name, &in.Event)
		case "tool":
			seenTool = true
			return r.str(name, &in.Tool)
		case "scope":
			return r.str(name, &in.Scope)
		case "amount_minor":
			return r.integer(name, &in.AmountMinor)
		case "target":
			seenTarget = true
			var kind string
			var seenKind, seenValue bool
			err := r.object("target", func(name string) error {
				switch name {
				case "kind":
					seenKind = true
					return r.str("target.kind", &kind)
				case "value":
					seenValue = true
					return r.str("target.value", &in.Target.Value)
				default:
					return keyInputErrorf(nil, "target has unknown field %s (allowed: kind, value)", quoteShort(name))
				}
			})
			if err != nil {
				return err
			}
			if !seenKind {
				return keyInputErrorf(nil, "target.kind is required")
			}
			if !seenValue {
				return keyInputErrorf(nil, "target.value is required")
			}
			in.Target.Kind = TargetKind(kind)
			return nil
		default:
			return keyInputErrorf(nil, "key input has unknown field %s (allowed: event, tool, target, amount_minor, scope)",
				quoteShort(name))
		}
	})
	if err != nil {
		return KeyInput{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return KeyInput{}, keyInputErrorf(nil, "key input has data after the JSON object")
	}
	switch {
	case !seenEvent:
		return KeyInput{}, keyInputErrorf(nil, "event is required")
	case !seenTool:
		return KeyInput{}, keyInputErrorf(nil, "tool is required")
	case !seenTarget:
		return KeyInput{}, keyInputErrorf(nil, "target is required")
	}
	return in, nil
}

// jsonReader reads the few shapes KeyFromJSON accepts from a token stream.
type jsonReader struct {
	dec *json.Decoder
}

func (r jsonReader) token(what string) (json.Token, error) {
	tok, err := r.dec.Token()
	if err == io.EOF {
		return nil, keyInputErrorf(nil, "key input ends too early (in %s)", what)
	}
	if err != nil {
		return nil, keyInputErrorf(err, "key input is not valid JSON: %s", err)
	}
	return tok, nil
}

// object reads a JSON object, calling member for each member name with the
// decoder positioned at its value. Duplicate names are refused.
func (r jsonReader) object(what string, member func(name string) error) error {
	tok, err := r.token(what)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return keyInputErrorf(nil, "%s must be a JSON object, not %s", what, describeToken(tok))
	}
	seen := make(map[string]bool, 5)
	for r.dec.More() {
		tok, err := r.token(what)
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok { // the decoder only yields strings here; be safe anyway.
			return keyInputErrorf(nil, "%s has a member name that is not a string", what)
		}
		if seen[name] {
			return keyInputErrorf(nil, "%s has field %s more than once", what, quoteShort(name))
		}
		seen[name] = true
		if err := member(name); err != nil {
			return err
		}
	}
	_, err = r.token(what) // the closing '}'; the decoder checks the syntax
	return err
}

func (r jsonReader) str(field string, dst *string) error {
	tok, err := r.token(field)
	if err != nil {
		return err
	}
	s, ok := tok.(string)
	if !ok {
		r.skip(tok)
		return keyInputErrorf(nil, "%s must be a JSON string, not %s", field, describeToken(tok))
	}
	*dst = s
	return nil
}

// integer reads an integer literal: -?(0|[1-9][0-9]*), within int64.
func (r jsonReader) integer(field string, dst *int64) error {
	tok, err := r.token(field)
	if err != nil {
		return err
	}
	num, ok := tok.(json.Number)
	if !ok {
		r.skip(tok)
		return keyInputErrorf(nil, "%s must be a JSON integer (minor units, e.g. cents), not %s",
			field, describeToken(tok))
	}
	lit := string(num)
	for i := 0; i < len(lit); i++ {
		if c := lit[i]; c == '.' || c == 'e' || c == 'E' {
			return keyInputErrorf(nil, "%s %s is not an integer; amounts are integer minor units (e.g. 1999 cents), without fraction or exponent",
				field, quoteShort(lit))
		}
	}
	v, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return keyInputErrorf(nil, "%s %s does not fit in a 64-bit integer", field, quoteShort(lit))
	}
	*dst = v
	return nil
}

// skip consumes the rest of a value whose first token was tok, so the error
// about it is the one reported (not a later syntax complaint). Errors are
// ignored: the caller is already returning one.
func (r jsonReader) skip(tok json.Token) {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return
	}
	for depth := 1; depth > 0; {
		t, err := r.dec.Token()
		if err != nil {
			return
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + string(v)
	case string:
		return "a string"
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
	}
	return fmt.Sprintf("%v", tok)
}

func keyInputErrorf(cause error, format string, args ...any) error {
	return newSentenceError(ErrInvalidKeyInput, cause, format, args...)
}

func keyErrorf(format string, args ...any) error {
	return newSentenceError(ErrInvalidKey, nil, format, args...)
}
