package migrations

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// TestAllRefusesTwoNamesForOneVersion: two branches that each took the
// next number, merged, are refused by name instead of being read as one
// version (the up file of one, the down file of the other).
func TestAllRefusesTwoNamesForOneVersion(t *testing.T) {
	t.Parallel()
	sql := &fstest.MapFile{Data: []byte("SELECT 1")}
	_, err := allIn(fstest.MapFS{
		"0001_a.up.sql": sql, "0001_a.down.sql": sql,
		"0002_b.up.sql": sql, "0002_b.down.sql": sql,
		"0002_c.up.sql": sql, "0002_c.down.sql": sql,
	})
	require.EqualError(t, err, "migrations: version 0002 has two names, b and c")

	ms, err := allIn(fstest.MapFS{"0001_a.up.sql": sql, "0001_a.down.sql": sql, "0002_b.up.sql": sql, "0002_b.down.sql": sql})
	require.NoError(t, err)
	require.Len(t, ms, 2)
}
