package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"slices"
	"strconv"
	"strings"
)

// The plan hash is what an approver approves: version 1 is
//
//	sha256( "onceplan-plan-v1\n"
//	      + canonical JSON of {from, html, provider, subject, text, tool}
//	        (+ "list_unsubscribe": false for a transactional campaign) + "\n"
//	      + target count + "\n"
//	      + list digest )
//
// where the list digest is sha256 over every target in ordinal order as
//
//	key + "\t" + canonical JSON of its variables + "\n"
//
// The member list_unsubscribe is there only when it is false (the campaign
// was created transactional: its messages carry no unsubscribe link), so
// every plan made before it existed, all of which sent without asking,
// keeps the hash it was approved with. Canonical JSON is encoding/json's
// output for a map (keys sorted, no whitespace). The same payload and the same ordered list always give the
// same hash; any change of text, target, order or variable changes it.
// Changing this layout must change the version string.
const planHashVersion = "onceplan-plan-v1"

// ListDigest accumulates the digest of a target list, one target at a time
// in ordinal order.
type ListDigest struct {
	h     hash.Hash
	count int
	buf   []byte
}

// NewListDigest starts an empty list digest.
func NewListDigest() *ListDigest { return &ListDigest{h: sha256.New()} }

// Add adds the next target.
func (d *ListDigest) Add(key string, canonicalVars []byte) {
	d.buf = append(d.buf[:0], key...)
	d.line(canonicalVars)
}

// AddBytes is Add for a key held as bytes (a row as read).
func (d *ListDigest) AddBytes(key, canonicalVars []byte) {
	d.buf = append(d.buf[:0], key...)
	d.line(canonicalVars)
}

// line finishes the line that starts with the key in d.buf.
func (d *ListDigest) line(canonicalVars []byte) {
	d.buf = append(d.buf, '\t')
	d.buf = append(d.buf, canonicalVars...)
	d.buf = append(d.buf, '\n')
	d.h.Write(d.buf)
	d.count++
}

// Count is the number of targets added.
func (d *ListDigest) Count() int { return d.count }

// Sum returns the digest as lowercase hex.
func (d *ListDigest) Sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// CanonicalVars encodes merge variables canonically (sorted keys, compact).
func CanonicalVars(vars map[string]string) []byte {
	if len(vars) == 0 {
		return []byte("{}")
	}
	b, err := json.Marshal(vars)
	if err != nil { // a map[string]string always marshals
		panic(err)
	}
	return b
}

// PlanHashInput is everything the plan hash covers.
type PlanHashInput struct {
	Payload     Payload
	Provider    string
	Tool        string
	TargetCount int
	ListDigest  string
	// Transactional: the messages carry no unsubscribe link (the
	// campaign's list_unsubscribe is false).
	Transactional bool
}

// PlanHash computes the plan hash (see planHashVersion for the layout).
func PlanHash(in PlanHashInput) string {
	members := map[string]any{
		"from":     in.Payload.From,
		"subject":  in.Payload.Subject,
		"text":     in.Payload.Text,
		"html":     in.Payload.HTML,
		"provider": in.Provider,
		"tool":     in.Tool,
	}
	if in.Transactional {
		members["list_unsubscribe"] = false
	}
	head, err := json.Marshal(members)
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	h.Write([]byte(planHashVersion + "\n"))
	h.Write(head)
	h.Write([]byte("\n" + strconv.Itoa(in.TargetCount) + "\n"))
	h.Write([]byte(in.ListDigest))
	return hex.EncodeToString(h.Sum(nil))
}

// ValidHash reports whether s looks like a plan hash (64 lowercase hex).
func ValidHash(s string) error {
	if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return fieldErr("plan_hash", "must be 64 lowercase hexadecimal characters")
	}
	return nil
}

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
