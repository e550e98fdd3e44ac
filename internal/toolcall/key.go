package toolcall

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/onceplan/onceplan/ledger"
)

// spaceMember is the member a single effect's identity carries and a
// campaign target's never does (docs/ARCHITECTURE.md, "Single agent
// effects"). It sorts between "scope" and "target", so the identity stays
// in the canonical member order.
const spaceMember = `,"space":"single"`

// principalMember starts the member naming the user a single effect
// belongs to (docs/ARCHITECTURE.md, "Single agent effects"): their user
// id, a plain decimal integer. It sorts between "event" and "scope".
const principalMember = `,"principal":`

// targetMember starts the target member of ledger.CanonicalJSON's output,
// and scopeMember its scope member. The first occurrence of each is the
// member itself: the members before them are a number and strings, and a
// string value writes every '"' as \", so it cannot contain either
// sequence.
var (
	targetMember = []byte(`,"target":{"kind":`)
	scopeMember  = []byte(`,"scope":`)
)

// KeyOf is the key of the single effect named by in that principal (a
// user's id) begins, and its identity: the canonical JSON of in
// ([ledger.CanonicalJSON]) with two more members, "principal" (the user)
// and "space":"single", and the ledger's v1 form of its SHA-256. Another
// user's identical operation is another call with another key; a
// campaign target's key is the v1 key of the canonical JSON without
// those members, so no identity an agent can send has a campaign target's
// key (or any other key ledger.NewKey makes: a notification's, a test
// send's). PostgreSQL refuses a call whose identity lacks either member
// or names another user than the one it is filed under (migrations 0026
// and 0037). Errors are ledger.CanonicalJSON's, or a principal that is no
// user's id.
func KeyOf(principal int64, in ledger.KeyInput) (ledger.Key, []byte, error) {
	canonical, err := ledger.CanonicalJSON(in)
	if err != nil {
		return "", nil, err
	}
	identity, err := singleIdentity(canonical, principal)
	if err != nil {
		return "", nil, err
	}
	return keyOfIdentity(identity), identity, nil
}

// singleIdentity is canonical with the principal and space members in
// their places.
func singleIdentity(canonical []byte, principal int64) ([]byte, error) {
	if principal <= 0 {
		return nil, fmt.Errorf("toolcall: a single effect's principal is a user's id, not %d", principal)
	}
	spaced, err := spacedIdentity(canonical)
	if err != nil {
		return nil, err
	}
	i := bytes.Index(spaced, scopeMember)
	if i < 0 {
		return nil, fmt.Errorf("toolcall: canonical key input %q has no scope member", canonical)
	}
	out := make([]byte, 0, len(spaced)+len(principalMember)+20)
	out = append(out, spaced[:i]...)
	out = append(out, principalMember...)
	out = strconv.AppendInt(out, principal, 10)
	return append(out, spaced[i:]...), nil
}

// spacedIdentity is canonical with the space member in its place: the
// identity of a call begun between migrations 0026 and 0037, before calls
// were their users' own.
func spacedIdentity(canonical []byte) ([]byte, error) {
	i := bytes.Index(canonical, targetMember)
	if i < 0 {
		return nil, fmt.Errorf("toolcall: canonical key input %q has no target member", canonical)
	}
	out := make([]byte, 0, len(canonical)+len(spaceMember))
	out = append(out, canonical[:i]...)
	out = append(out, spaceMember...)
	return append(out, canonical[i:]...), nil
}

// keyOfIdentity is "v1:" and the hex SHA-256 of identity, as migration
// 0021's tool_key_of writes it.
func keyOfIdentity(identity []byte) ledger.Key {
	sum := sha256.Sum256(identity)
	return ledger.Key(ledger.KeyVersion + hex.EncodeToString(sum[:]))
}
