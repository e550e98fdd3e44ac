package toolcall

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/onceplan/onceplan/ledger"
)

// spaceMember is the member a single effect's identity carries and a
// campaign target's never does (docs/ARCHITECTURE.md, "Single agent
// effects"). It sorts between "scope" and "target", so the identity stays
// in the canonical member order.
const spaceMember = `,"space":"single"`

// targetMember starts the target member of ledger.CanonicalJSON's output.
// Its first occurrence is the member itself: a string value writes every
// '"' as \", so it cannot contain this sequence.
var targetMember = []byte(`,"target":{"kind":`)

// KeyOf is the key of a single effect named by in, and its identity: the
// canonical JSON of in ([ledger.CanonicalJSON]) with one more member,
// "space":"single", and the ledger's v1 form of its SHA-256. A campaign
// target's key is the v1 key of the canonical JSON without that member,
// so no identity an agent can send has a campaign target's key (or any
// other key ledger.NewKey makes: a notification's, a test send's), and
// PostgreSQL refuses a call whose identity lacks the member (migration
// 0026). Errors are ledger.CanonicalJSON's.
func KeyOf(in ledger.KeyInput) (ledger.Key, []byte, error) {
	canonical, err := ledger.CanonicalJSON(in)
	if err != nil {
		return "", nil, err
	}
	identity, err := singleIdentity(canonical)
	if err != nil {
		return "", nil, err
	}
	return keyOfIdentity(identity), identity, nil
}

// singleIdentity is canonical with the space member in its place.
func singleIdentity(canonical []byte) ([]byte, error) {
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
