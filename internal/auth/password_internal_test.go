package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/stretchr/testify/require"
)

func TestHashPasswordRoundTrip(t *testing.T) {
	t.Parallel()
	h, err := HashPassword("correct horse battery staple")
	require.NoError(t, err)

	ok, err := VerifyPassword(h, "correct horse battery staple")
	require.NoError(t, err)
	require.True(t, ok)

	for _, wrong := range []string{"", "correct horse battery stapl", "Correct horse battery staple", "correct horse battery staple "} {
		ok, err := VerifyPassword(h, wrong)
		require.NoError(t, err)
		require.False(t, ok, "%q must not verify", wrong)
	}

	h2, err := HashPassword("correct horse battery staple")
	require.NoError(t, err)
	require.NotEqual(t, h, h2, "each hash has its own salt")
}

func TestHashPasswordPHCFormat(t *testing.T) {
	t.Parallel()
	h, err := HashPassword("correct horse battery staple")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`), h)

	p, salt, key, err := decodeHash(h)
	require.NoError(t, err)
	require.Equal(t, DefaultParams, p)
	require.Len(t, salt, 16)
	require.Len(t, key, 32)
}

// Hashes made by the reference implementation (libargon2, through its
// argon2id_hash_encoded) verify here: the PHC encoding and the parameters
// are read as other tools write them.
func TestVerifyPasswordReferenceVectors(t *testing.T) {
	t.Parallel()
	for _, h := range []string{
		"$argon2id$v=19$m=19456,t=2,p=1$b25jZXBsYW4tc2FsdC0xNg$uRC+rs14FLh51htU78a/v9O//mejrEv0uZJQnyFSS8k",
		"$argon2id$v=19$m=65536,t=1,p=4$b25jZXBsYW4tc2FsdC0xNg$Ymc5Ey1i6r8begme+w+SODxB3tRAwhxQe0cWqUIBUrY",
	} {
		ok, err := VerifyPassword(h, "correct horse battery staple")
		require.NoError(t, err)
		require.True(t, ok, h)
		ok, err = VerifyPassword(h, "correct horse battery staplE")
		require.NoError(t, err)
		require.False(t, ok, h)
	}
}

func TestDecodeHashRefusesMalformed(t *testing.T) {
	t.Parallel()
	const salt, key = "b25jZXBsYW4tc2FsdC0xNg", "uRC+rs14FLh51htU78a/v9O//mejrEv0uZJQnyFSS8k"
	for _, h := range []string{
		"",
		"plain text password",
		"$2a$10$abcdefghijklmnopqrstuv", // bcrypt
		"$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2$" + salt + "$" + key,
		"$argon2id$v=19$t=2,m=19456,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=019456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=4194304,t=2,p=1$" + salt + "$" + key, // 4 GiB
		"$argon2id$v=19$m=19456,t=2,p=0$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "==$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$" + key, // 4-byte salt
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$c2hvcnQ",
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key + "$",
	} {
		_, _, _, err := decodeHash(h)
		require.Error(t, err, "%q", h)
		ok, err := VerifyPassword(h, "correct horse battery staple")
		require.Error(t, err, "%q", h)
		require.False(t, ok)
		require.True(t, NeedsRehash(h), "%q", h)
	}
}

func TestNeedsRehash(t *testing.T) {
	t.Parallel()
	current, err := HashPassword("correct horse battery staple")
	require.NoError(t, err)
	require.False(t, NeedsRehash(current))

	old, err := hashWith(Params{Memory: 8 * 1024, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}, "correct horse battery staple")
	require.NoError(t, err)
	require.True(t, NeedsRehash(old))
	ok, err := VerifyPassword(old, "correct horse battery staple")
	require.NoError(t, err)
	require.True(t, ok, "old parameters still verify")

	require.True(t, NeedsRehash("$argon2id$v=19$m=65536,t=1,p=4$b25jZXBsYW4tc2FsdC0xNg$Ymc5Ey1i6r8begme+w+SODxB3tRAwhxQe0cWqUIBUrY"))
}

func TestValidatePassword(t *testing.T) {
	t.Parallel()
	err := ValidatePassword("elevenchars")
	require.Error(t, err)
	require.True(t, errors.Is(err, onceplan.ErrInvalid))
	require.Equal(t, "password: must be at least 12 characters (it has 11)", err.Error())

	require.NoError(t, ValidatePassword("twelve chars"))
	require.NoError(t, ValidatePassword("ééééééééééé€"), "characters, not bytes")
	require.Error(t, ValidatePassword("ééééé"), "10 bytes but 5 characters")
	require.Error(t, ValidatePassword(strings.Repeat("x", MaxPasswordBytes+1)))
	require.Error(t, ValidatePassword("invalid \xff utf-8 text"))
}

func TestGeneratePassword(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		p := GeneratePassword()
		require.Len(t, p, GeneratedPasswordLength)
		for _, c := range p {
			require.True(t, strings.ContainsRune(passwordAlphabet, c), "%q", c)
		}
		require.NoError(t, ValidatePassword(p))
		require.False(t, seen[p])
		seen[p] = true
	}
}
