package plan_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/plan"
)

// varsGen makes merge variables with the characters that encode
// differently between encoding/json and PostgreSQL's jsonb output: HTML
// characters, control characters, quotes and backslashes, U+2028/U+2029,
// multi-byte text, and keys whose length order is not their byte order.
func varsGen() *rapid.Generator[map[string]string] {
	text := rapid.StringOf(rapid.SampledFrom([]rune{
		'a', 'Z', '0', ' ', '<', '>', '&', '"', '\\', '/', '\n', '\r', '\t', '\b', '\f', '\x01', '\x1f', '\x7f',
		'é', 'ß', '€', '\u2028', '\u2029', '😀', '\u00a0', '\ufeff',
	}))
	return rapid.MapOfN(text, text, 0, 6)
}

// TestAppendCanonicalVarsIsCanonicalVars: from any JSON spelling of a map
// of strings, encoding/json's or PostgreSQL's, AppendCanonicalVars gives
// exactly CanonicalVars (what the import hashed).
func TestAppendCanonicalVarsIsCanonicalVars(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vars := varsGen().Draw(t, "vars")
		want := plan.CanonicalVars(vars)
		got, err := plan.AppendCanonicalVars(nil, want)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "from its own output")

		// Indented, with escapes encoding/json does not use.
		loose, err := json.MarshalIndent(vars, " ", "\t")
		require.NoError(t, err)
		got, err = plan.AppendCanonicalVars(got[:0], loose)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "from %s", loose)
	})
}

// TestAppendCanonicalVarsFromPostgreSQL: the rows as the audit reads them,
// vars::text of what the import wrote, give back the bytes the import
// hashed.
func TestAppendCanonicalVarsFromPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		vars := varsGen().Draw(t, "vars")
		want := plan.CanonicalVars(vars)
		var stored []byte
		require.NoError(t, pool.QueryRow(ctx, `SELECT ($1::text::jsonb)::text`, string(want)).Scan(&stored))
		got, err := plan.AppendCanonicalVars(nil, stored)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "PostgreSQL printed %s", stored)
	})
}

func TestAppendCanonicalVarsRefusesWhatNoImportWrites(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{``, `[]`, `"x"`, `{"a": 1}`, `{"a": null}`, `{"a": "b"`, `{"a": "b"} x`, `{"a": "b", "a": "c"}`, `{a: "b"}`, `{"a": "\x01"}`} {
		_, err := plan.AppendCanonicalVars(nil, []byte(bad))
		require.Error(t, err, bad)
	}
	got, err := plan.AppendCanonicalVars(nil, []byte(` { } `))
	require.NoError(t, err)
	require.Equal(t, "{}", string(got))
}
