package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Password policy. NIST SP 800-63B and OWASP favour length over
// composition rules; the upper bound only keeps a request from being a
// denial of service.
const (
	MinPasswordLength = 12   // characters
	MaxPasswordBytes  = 1024 // bytes
)

// Params are argon2id's cost parameters.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen uint32 // bytes
	KeyLen  uint32 // bytes
}

// DefaultParams are OWASP's Password Storage Cheat Sheet recommendation
// m=19 MiB, t=2, p=1 (the minimum configuration it lists first). The
// alternative m=64 MiB, t=1, p=4 would cost 64 MiB per concurrent sign-in
// on a server that also runs workers; 19 MiB keeps a burst of sign-ins
// cheap in memory while costing an attacker about as much per guess.
// Hashes made with other parameters still verify, and [NeedsRehash] tells
// Login to upgrade them.
var DefaultParams = Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// ValidatePassword applies the password policy.
func ValidatePassword(password string) error {
	if !utf8.ValidString(password) {
		return fieldErr("password", "must be valid UTF-8 text")
	}
	if n := utf8.RuneCountInString(password); n < MinPasswordLength {
		return fieldErr("password", "must be at least %d characters (it has %d)", MinPasswordLength, n)
	}
	if len(password) > MaxPasswordBytes {
		return fieldErr("password", "must be at most %d bytes", MaxPasswordBytes)
	}
	return nil
}

// HashPassword hashes password with argon2id and a random salt, in the PHC
// string format: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash> (salt and
// hash in unpadded standard base64). It does not apply the policy; callers
// creating or changing a password call ValidatePassword first.
func HashPassword(password string) (string, error) {
	return hashWith(DefaultParams, password)
}

func hashWith(p Params, password string) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

var b64 = base64.RawStdEncoding

// errBadHash: a stored hash this package cannot read.
var errBadHash = errors.New("the stored password hash is not an argon2id PHC string")

// decodeHash parses a PHC argon2id string. Bounds on the parameters keep a
// corrupted row from asking for gigabytes of memory.
func decodeHash(encoded string) (p Params, salt, key []byte, err error) {
	parts := strings.Split(encoded, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return p, nil, nil, fmt.Errorf("%w: version %q is not v=%d", errBadHash, parts[2], argon2.Version)
	}
	var threads uint32
	if n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &threads); err != nil || n != 3 ||
		fmt.Sprintf("m=%d,t=%d,p=%d", p.Memory, p.Time, threads) != parts[3] {
		return p, nil, nil, fmt.Errorf("%w: parameters %q", errBadHash, parts[3])
	}
	if p.Time < 1 || p.Time > 64 || threads < 1 || threads > 64 || p.Memory < 8*threads || p.Memory > 1<<21 {
		return p, nil, nil, fmt.Errorf("%w: parameters %q are out of range", errBadHash, parts[3])
	}
	p.Threads = uint8(threads)
	if salt, err = b64.DecodeString(parts[4]); err != nil || len(salt) < 8 || len(salt) > 64 {
		return p, nil, nil, fmt.Errorf("%w: bad salt", errBadHash)
	}
	if key, err = b64.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 128 {
		return p, nil, nil, fmt.Errorf("%w: bad hash", errBadHash)
	}
	p.SaltLen, p.KeyLen = uint32(len(salt)), uint32(len(key))
	return p, salt, key, nil
}

// VerifyPassword reports whether password matches the PHC string encoded,
// comparing in constant time. An error means encoded is not a hash this
// package reads (and is never a mismatch).
func VerifyPassword(encoded, password string) (bool, error) {
	p, salt, key, err := decodeHash(encoded)
	if err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// NeedsRehash reports whether encoded was made with parameters other than
// DefaultParams (or cannot be read), so that it should be replaced by a new
// hash the next time the password is known.
func NeedsRehash(encoded string) bool {
	p, _, _, err := decodeHash(encoded)
	return err != nil || p != DefaultParams
}

// dummyHash is verified against when the email is unknown, so that an
// unknown user costs the same argon2id work as a wrong password.
var dummyHash = sync.OnceValue(func() string {
	h, err := HashPassword(GeneratePassword())
	if err != nil {
		panic(fmt.Sprintf("auth: hashing the dummy password: %v", err))
	}
	return h
})

// passwordAlphabet leaves out look-alikes (0/O, 1/l/I) so a generated
// password survives being read aloud or copied by hand.
const passwordAlphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// GeneratedPasswordLength is the length of GeneratePassword's passwords
// (about 116 bits).
const GeneratedPasswordLength = 20

// GeneratePassword returns a random password of GeneratedPasswordLength
// characters.
func GeneratePassword() string {
	const n = len(passwordAlphabet)
	// Rejection sampling: bytes at or above the largest multiple of n would
	// bias the first characters of the alphabet.
	const limit = 256 - 256%n
	out := make([]byte, 0, GeneratedPasswordLength)
	buf := make([]byte, 32)
	for len(out) < GeneratedPasswordLength {
		rand.Read(buf) // never fails (crypto/rand since Go 1.24)
		for _, b := range buf {
			if int(b) < limit && len(out) < GeneratedPasswordLength {
				out = append(out, passwordAlphabet[int(b)%n])
			}
		}
	}
	return string(out)
}
